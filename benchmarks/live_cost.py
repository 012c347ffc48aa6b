"""What the live view costs a training step (issue 37: at most 1 %): with and without sampling.

Same run, alternating: `mpirun -n N python -m slurmtorch.bootstrap live_step.py` in a job
folder with SLURMTORCH_LIVE_S=1 (a sample a second, ten times the batch script's default;
the step hook and the timed backward in every step) vs SLURMTORCH_LIVE_S=0 (none). A step
is a DDP step of a 256x256 linear layer on 64 rows (forward, backward with its all-reduce,
SGD), median of 200: a step this small shows the per-step cost at its largest. Ratios are
with / without: 1.00 is free; on a busy machine expect noise of a few % either way.

    .venv/bin/python benchmarks/live_cost.py [--ranks 2] [--reps 5]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile

from _common import PY, REPO, env, machine, mpirun, reported_steps, table

STEP = REPO / "benchmarks" / "live_step.py"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2, help="ranks per mpirun launch, on this host (default 2)")
    ap.add_argument("--reps", type=int, default=5, help="launches per case, alternating (default 5)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        variants = {"sampling every 1 s": env(SLURMTORCH_JOB_DIR=folder, SLURMTORCH_LIVE_S="1"),
                    "without": env(SLURMTORCH_JOB_DIR=folder, SLURMTORCH_LIVE_S="0")}
        boot = [*mpirun(args.ranks), PY, "-m", "slurmtorch.bootstrap", "--backend", "gloo"]
        steps = reported_steps(boot, STEP, variants, args.reps)
    base = statistics.median(steps["without"])
    rows = [[name, f"{statistics.median(s) * 1e6:.0f} us", f"{statistics.median(s) / base:.3f}x",
             " ".join(f"{v * 1e6:.0f}" for v in s)] for name, s in steps.items()]
    print(f"## Live view, {args.ranks} ranks, median of {args.reps} launches (same run, alternating); {machine()}\n")
    print(table(["case", "training step", "vs without", "each launch's median step (us)"], rows))


if __name__ == "__main__":
    main()
