"""3. The bootstrap's own phases per rank, 1..16 ranks on one host (SLURMTORCH_TIMINGS).

Ours: detect (derive the world, minus MPI_Init and the allgather) + agree (one allgather)
+ handover (group ready -> user script). Not ours, shown for scale: MPI_Init,
`import torch`, and torch's own init_process_group (TCPStore rendezvous).
"""
from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

from _common import needs_mpi_and_torch as missing  # noqa: F401 - run_all asks
from _common import PY, REPO, Figure, env, med, mpirun, run, table

PROBE = REPO / "benchmarks" / "probe.py"
OURS = ("detect", "agree", "handover")
# Issue 15: our own work <= 10 ms of CPU per rank, and flat in the number of ranks, read as:
# the highest per-rank-count median at most 1.25x the lowest.
TARGET_MS, TARGET_SPREAD = 10.0, 1.25
# A rank started with these modules already loaded: the standard-library modules that
# `import torch` loads anyway (filled in by torch_stdlib()), so the phases count only
# what the bootstrap adds to a rank that goes on to use torch.
WARM = ("import {mods}; import runpy; "
        "runpy.run_module('slurmtorch.bootstrap', run_name='__main__', alter_sys=True)")


def torch_stdlib() -> list[str]:
    """The standard-library modules a fresh interpreter loads for `import torch` (pure stdlib
    names only: what a rank pays for whoever imports it first)."""
    code = ("import sys; before = set(sys.modules); import torch; "
            "print(' '.join(sorted(m for m in sys.modules if m not in before "
            "and m.split('.')[0] in sys.stdlib_module_names and not m.startswith('__'))))")
    return run([PY, "-c", code]).stdout.split()


# The control: one rank while as many other processes as the largest size has extra ranks
# import torch over and over beside it. It does the one-rank work under the machine's
# contention at that size, so the largest size over it is what grows with the world itself.
BUSY = ("import sys\nwhile True:\n    import torch\n"
        "    [sys.modules.pop(m) for m in list(sys.modules) if m.split('.')[0] == 'torch']")


def beside_importers(others: int) -> list[dict]:
    busy = [subprocess.Popen([PY, "-c", BUSY], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(others)]
    try:
        time.sleep(3)  # past their first import, into the steady churn
        return once(1)
    finally:
        for p in busy:
            p.kill()
        for p in busy:
            p.wait()


def once(n: int, warm: list[str] | None = None) -> list[dict]:
    folder = Path(tempfile.mkdtemp(prefix="st-bench-phases-"))
    rank = ([PY, "-c", WARM.format(mods=", ".join(warm))] if warm
            else [PY, "-m", "slurmtorch.bootstrap"])
    run([*mpirun(n), *rank, PROBE],
        environ=env(SLURMTORCH_TIMINGS=str(folder)), timeout=600)
    return [json.loads(p.read_text()) for p in sorted(folder.glob("rank-*.json"))]


def own(runs: list[dict], key: str) -> float:
    return med([sum(r[key].get(k, 0.0) for k in OURS) for r in runs])


def run_bench(reps: int, sizes=(1, 2, 4, 8, 16)) -> tuple[str, list[Figure]]:
    warm = torch_stdlib()
    # Every size in every round, the plain and the warm start alternating: the machine's
    # drift over the minute this takes (clock, other load) then falls on every size alike
    # instead of on whichever ran last, which the highest/lowest ratio would read as growth.
    by_size: dict[int, tuple[list[dict], list[dict]]] = {n: ([], []) for n in sizes}
    control: list[dict] = []
    for _ in range(max(1, reps // 2)):
        for n in sizes:
            by_size[n][0].extend(once(n))
            by_size[n][1].extend(once(n, warm))
        control.extend(beside_importers(sizes[-1] - 1))
    rows, own_cpus, net_cpus = [], [], []
    for n in sizes:
        runs, net = by_size[n]
        samples = [r["phases"] for r in runs]
        m = {k: med([s.get(k, 0.0) for s in samples]) for k in
             ("detect", "agree", "handover", "mpi_init", "import_torch", "init_process_group")}
        own_cpus.append(own(runs, "cpu"))
        net_cpus.append(own(net, "cpu"))
        rows.append([n] + [f"{m[k] * 1000:.1f}" for k in ("detect", "agree", "handover")]
                    + [f"{own(runs, 'phases') * 1000:.1f}", f"**{own_cpus[-1] * 1000:.1f}**",
                       f"**{net_cpus[-1] * 1000:.1f}**"]
                    + [f"{m[k] * 1000:.0f}" for k in ("mpi_init", "import_torch", "init_process_group")])
    control_cpu = own(control, "cpu")
    rows.append([f"1, beside {sizes[-1] - 1} processes importing torch (control)", "", "", "",
                 f"{own(control, 'phases') * 1000:.1f}", f"{control_cpu * 1000:.1f}", "", "", "", ""])
    span = f"{sizes[0]}-{sizes[-1]} ranks"
    figures = [
        Figure("bootstrap own work per rank, worst median CPU", max(own_cpus) * 1000, unit="ms", target=TARGET_MS),
        Figure("bootstrap own work per rank net of torch's stdlib imports, worst median CPU", max(net_cpus) * 1000,
               unit="ms", target=TARGET_MS),
        Figure(f"bootstrap own work, highest / lowest median CPU over {span}", spread(own_cpus),
               target=TARGET_SPREAD),
        Figure(f"bootstrap own work net of torch's stdlib, highest / lowest over {span}", spread(net_cpus),
               target=TARGET_SPREAD),
        Figure(f"bootstrap own work, {sizes[-1]} ranks / 1 rank beside {sizes[-1] - 1} importers (control)",
               own_cpus[-1] / control_cpu),
    ]
    text = ("## 3. Bootstrap phases per rank (ms, median over ranks and runs; more ranks than cores oversubscribe)\n\n"
            + table(["ranks", "detect", "agree", "handover", "ours (wall)", "ours (CPU)",
                     "ours (CPU), net of torch's stdlib", "MPI_Init", "import torch", "torch init_process_group"], rows)
            + f"\n\nTarget: our own work <= {TARGET_MS:.0f} ms of CPU per rank and flat in the number of ranks "
            f"(highest median at most {TARGET_SPREAD}x the lowest). 'ours (CPU)' is this process's CPU time in our "
            "phases as it starts; 'net of torch's stdlib' is the same with the {len(warm)} standard-library modules "
            "that `import torch` loads anyway (dataclasses, inspect, json, socket, typing, ...) loaded before the "
            "clock starts: what the bootstrap adds to a rank that uses torch. Wall times grow once ranks outnumber "
            "the cores (each rank gets a share of one). The control row is one rank doing the one-rank work while "
            f"{sizes[-1] - 1} other processes import torch beside it: the same contention for caches and memory as "
            f"{sizes[-1]} ranks starting at once on this machine, with no world to grow; the summary gives "
            f"{sizes[-1]} ranks over it.".replace("{len(warm)}", str(len(warm))))
    return text, figures


def spread(values: list[float]) -> float:
    return max(values) / min(values) if min(values) > 0 else float("inf")
