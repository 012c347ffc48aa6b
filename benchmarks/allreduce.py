"""5. gloo all_reduce bandwidth through our process group vs the minimal mpi4py bootstrap's.

Both run under the same `mpirun -n 2` with the same script; only who sets up the process
group differs (slurmtorch.bootstrap vs benchmarks/minimal_bootstrap.py). Parity expected.
"""
from __future__ import annotations

import json

from _common import BIN, REPO, Figure, med, run, table

SCRIPT = REPO / "benchmarks" / "allreduce_bw.py"
MINIMAL = REPO / "benchmarks" / "minimal_bootstrap.py"
# Parity, read as: every message size at least 0.9x the minimal group's bandwidth.
TARGET = 0.9


def once(argv) -> dict:
    out = run(argv, timeout=600).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def run_bench(reps: int, ranks: int = 2) -> tuple[str, list[Figure]]:
    mpirun = [BIN / "mpirun", "-n", ranks, "--oversubscribe"]
    argv = {"ours": [*mpirun, BIN / "python", "-m", "slurmtorch.bootstrap", SCRIPT],
            "minimal": [*mpirun, BIN / "python", MINIMAL, SCRIPT]}
    got: dict[str, list[dict]] = {"ours": [], "minimal": []}
    for i in range(reps):
        for name in (("ours", "minimal") if i % 2 == 0 else ("minimal", "ours")):
            got[name].append(once(argv[name]))
    sizes = got["ours"][0]["sizes"]
    rows, ratios = [], []
    for j, size in enumerate(sizes):
        a = med([r["busbw_gbps"][j] for r in got["ours"]])
        b = med([r["busbw_gbps"][j] for r in got["minimal"]])
        label = f"{size // 1024} KiB" if size < 1 << 20 else f"{size >> 20} MiB"
        if b:
            ratios.append(a / b)
        rows.append([label, f"{a:.3f}", f"{b:.3f}", f"{a / b:.2f}x" if b else "-"])
    worst = Figure("all_reduce bandwidth, worst message size vs minimal", min(ratios), better="higher",
                   target=TARGET)
    text = (f"## 5. gloo all_reduce bus bandwidth, {ranks} ranks on one host (GB/s, median of {reps})\n\n"
            f"Both groups under the same `mpirun -n {ranks}`: `python -m slurmtorch.bootstrap allreduce_bw.py` "
            "vs `python minimal_bootstrap.py allreduce_bw.py`. The ratio is slurmtorch / minimal: a bandwidth, "
            "so higher is faster.\n\n"
            + table(["message", "slurmtorch group", "minimal mpi4py group", "ratio"], rows)
            + f"\n\nTarget: parity, every size >= {TARGET}x. This run's worst size: {worst.show()} "
            f"({worst.verdict()}). NCCL: measured only where a GPU machine is lent (see below).")
    return text, [worst]
