"""2. Time to ready on one host: launch, init, one all_reduce, teardown, for 1/2/4/8 ranks."""
from __future__ import annotations

from _common import BIN, REPO, Figure, alternate, med, ms, table, timed

TARGET_VS_TORCHRUN, TARGET_VS_MINIMAL = 0.9, 1.05
PROBE = REPO / "benchmarks" / "probe.py"
MINIMAL = REPO / "benchmarks" / "minimal_bootstrap.py"


def cases_for(n: int) -> dict:
    mpirun = [BIN / "mpirun", "-n", n, "--oversubscribe"]
    return {
        "slurmtorch": lambda: timed([*mpirun, BIN / "python", "-m", "slurmtorch.bootstrap", PROBE]),
        "torchrun": lambda: timed([BIN / "python", "-m", "torch.distributed.run", "--standalone",
                                   "--nproc-per-node", n, PROBE]),
        "minimal": lambda: timed([*mpirun, BIN / "python", MINIMAL, PROBE]),
    }


def run_bench(reps: int, sizes=(1, 2, 4, 8)) -> tuple[str, list[Figure]]:
    rows, figures = [], []
    for n in sizes:
        t = alternate(cases_for(n), reps)
        ours, tr, mini = med(t["slurmtorch"]), med(t["torchrun"]), med(t["minimal"])
        rows.append([n, ms(ours), ms(tr), ms(mini), f"{ours / tr:.2f}x", f"{ours / mini:.2f}x"])
        label = f"ready, {n} rank{'s' if n > 1 else ''},"
        figures.append(Figure(f"{label} vs torchrun", ours / tr, target=TARGET_VS_TORCHRUN if n == 4 else None))
        figures.append(Figure(f"{label} vs minimal", ours / mini, target=TARGET_VS_MINIMAL if n == 4 else None))
    text = ("## 2. Time to ready, one host (launch -> init -> one all_reduce -> teardown)\n\n"
            "`mpirun -n N python -m slurmtorch.bootstrap probe.py` vs `torchrun --standalone "
            "--nproc-per-node N probe.py` vs `mpirun -n N python minimal_bootstrap.py probe.py`. "
            "Ratios are slurmtorch / baseline: lower is faster.\n\n"
            + table(["ranks", "slurmtorch", "torchrun", "minimal mpi4py", "vs torchrun", "vs minimal"], rows)
            + f"\n\nTargets at 4 ranks: <= {TARGET_VS_TORCHRUN}x torchrun, <= {TARGET_VS_MINIMAL}x the minimal bootstrap.")
    return text, figures
