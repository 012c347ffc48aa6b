"""2. Time to ready on one host: launch, init, one all_reduce, teardown, for 1 to 16 ranks."""
from __future__ import annotations

from _common import needs_mpi_and_torch as missing  # noqa: F401 - run_all asks
from _common import PY, REPO, Figure, alternate, med, mpirun, ms, table, timed

# Issue 28: at 4, 8 and 16 ranks, <= 1.0x the minimal mpi4py bootstrap and <= 0.75x torchrun.
TARGET_VS_TORCHRUN, TARGET_VS_MINIMAL = 0.75, 1.0
TARGET_SIZES = (4, 8, 16)
PROBE = REPO / "benchmarks" / "probe.py"
MINIMAL = REPO / "benchmarks" / "minimal_bootstrap.py"


def cases_for(n: int) -> dict:
    launch = mpirun(n)
    return {
        "slurmtorch": lambda: timed([*launch, PY, "-m", "slurmtorch.bootstrap", PROBE]),
        "torchrun": lambda: timed([PY, "-m", "torch.distributed.run", "--standalone",
                                   "--nproc-per-node", n, PROBE]),
        "minimal": lambda: timed([*launch, PY, MINIMAL, PROBE]),
    }


def run_bench(reps: int, sizes=(1, 2, 4, 8, 16)) -> tuple[str, list[Figure]]:
    rows, figures = [], []
    for n in sizes:
        # 16 ranks on a small machine take tens of seconds a launch: fewer repetitions there.
        t = alternate(cases_for(n), reps if n <= 8 else max(3, reps // 2))
        ours, tr, mini = med(t["slurmtorch"]), med(t["torchrun"]), med(t["minimal"])
        rows.append([n, ms(ours), ms(tr), ms(mini), f"{ours / tr:.2f}x", f"{ours / mini:.2f}x"])
        label = f"ready, {n} rank{'s' if n > 1 else ''},"
        figures.append(Figure(f"{label} vs torchrun", ours / tr, target=TARGET_VS_TORCHRUN if n in TARGET_SIZES else None))
        figures.append(Figure(f"{label} vs minimal", ours / mini, target=TARGET_VS_MINIMAL if n in TARGET_SIZES else None))
    text = ("## 2. Time to ready, one host (launch -> init -> one all_reduce -> teardown)\n\n"
            "`mpirun -n N python -m slurmtorch.bootstrap probe.py` vs `torchrun --standalone "
            "--nproc-per-node N probe.py` vs `mpirun -n N python minimal_bootstrap.py probe.py`. "
            "Ratios are slurmtorch / baseline: lower is faster.\n\n"
            + table(["ranks", "slurmtorch", "torchrun", "minimal mpi4py", "vs torchrun", "vs minimal"], rows)
            + f"\n\nTargets at {', '.join(map(str, TARGET_SIZES))} ranks: <= {TARGET_VS_TORCHRUN}x torchrun, "
            f"<= {TARGET_VS_MINIMAL}x the minimal bootstrap. With more ranks than cores every rank's "
            "`import torch` competes for the same cores, so those rows measure the machine more than us.")
    return text, figures
