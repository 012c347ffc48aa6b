"""2. Time to ready on one host: launch, init, one all_reduce, teardown, for 1/2/4/8 ranks."""
from __future__ import annotations

from _common import BIN, REPO, alternate, med, ms, table, timed

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


def run(reps: int, sizes=(1, 2, 4, 8)) -> tuple[str, dict]:
    rows, ratios = [], {}
    for n in sizes:
        t = alternate(cases_for(n), reps)
        ours, tr, mini = med(t["slurmtorch"]), med(t["torchrun"]), med(t["minimal"])
        rows.append([n, ms(ours), ms(tr), ms(mini), f"{ours / tr:.2f}x", f"{ours / mini:.2f}x"])
        ratios[f"ready {n} ranks vs torchrun"] = ours / tr
        ratios[f"ready {n} ranks vs minimal"] = ours / mini
    text = ("## 2. Time to ready, one host (launch -> init -> one all_reduce -> teardown)\n\n"
            "`mpirun -n N python -m slurmtorch.bootstrap probe.py` vs `torchrun --standalone "
            "--nproc-per-node N probe.py` vs `mpirun -n N python minimal_bootstrap.py probe.py`.\n\n"
            + table(["ranks", "slurmtorch", "torchrun", "minimal mpi4py", "vs torchrun", "vs minimal"], rows)
            + "\n\nTargets at 4 ranks: <= 0.9x torchrun, <= 1.05x the minimal bootstrap.")
    return text, ratios
