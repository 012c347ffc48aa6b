"""5. gloo all_reduce bandwidth through our process group vs one set up by torchrun: parity expected."""
from __future__ import annotations

import json

from _common import BIN, REPO, med, run, table

SCRIPT = REPO / "benchmarks" / "allreduce_bw.py"


def once(argv) -> dict:
    out = run(argv, timeout=600).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def run_bench(reps: int, ranks: int = 2) -> tuple[str, dict]:
    ours_argv = [BIN / "mpirun", "-n", ranks, "--oversubscribe", BIN / "python", "-m", "slurmtorch.bootstrap", SCRIPT]
    hand_argv = [BIN / "python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", ranks, SCRIPT]
    ours, hand = [], []
    for i in range(reps):
        for name in (("ours", "hand") if i % 2 == 0 else ("hand", "ours")):
            (ours if name == "ours" else hand).append(once(ours_argv if name == "ours" else hand_argv))
    sizes = ours[0]["sizes"]
    rows, worst = [], 1.0
    for j, size in enumerate(sizes):
        a = med([r["busbw_gbps"][j] for r in ours])
        b = med([r["busbw_gbps"][j] for r in hand])
        worst = min(worst, a / b) if b else worst
        label = f"{size // 1024} KiB" if size < 1 << 20 else f"{size >> 20} MiB"
        rows.append([label, f"{a:.3f}", f"{b:.3f}", f"{a / b:.2f}x"])
    text = (f"## 5. gloo all_reduce bus bandwidth, {ranks} ranks on one host (GB/s, median of {reps})\n\n"
            + table(["message", "slurmtorch group", "torchrun group", "ratio"], rows)
            + "\n\nTarget: parity within noise. NCCL: measured only where a GPU machine is lent (see below).")
    return text, {"allreduce worst size ratio": worst}
