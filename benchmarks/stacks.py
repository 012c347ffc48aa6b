"""What the stacks handler costs a rank (issue 26): time to ready and a training step, with and without.

Same run, alternating: `mpirun -n N python -m slurmtorch.bootstrap` in a job folder
(SLURMTORCH_JOB_DIR set: the handler, its reader thread and the alive lock installed) vs
the same with SLURMTORCH_NO_STACKS=1. Time to ready is the launch to one all_reduce and
teardown (probe.py); a step is a 64x256 @ 256x256 matmul and an all_reduce of its result
(stacks_step.py, median of 200). Ratios are with / without: 1.00 is free; on a busy
machine expect noise of +-20 % either way, so measure on a quiet one.

The handler's normal path is the same whether py-spy is installed or not: py-spy is looked
up and run only when stacks are asked for (bootstrap.native), which this benchmark never does.

    .venv/bin/python benchmarks/stacks.py [--ranks 4] [--reps 7]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from _common import PY, REPO, alternate, env, med, mpirun, ms, reported_steps, table, timed

PROBE = REPO / "benchmarks" / "probe.py"
STEP = REPO / "benchmarks" / "stacks_step.py"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4, help="ranks per mpirun launch, on this host (default 4)")
    ap.add_argument("--reps", type=int, default=7,
                    help="launches per case, alternating with and without (default 7; each launch imports torch)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        variants = {"with handler": env(SLURMTORCH_JOB_DIR=folder),
                    "without": env(SLURMTORCH_JOB_DIR=folder, SLURMTORCH_NO_STACKS="1")}
        # gloo on any machine: on a GPU machine "auto" would pick nccl, and N ranks on one GPU are refused.
        boot = [*mpirun(args.ranks), PY, "-m", "slurmtorch.bootstrap", "--backend", "gloo"]
        ready = alternate({k: (lambda e=e: timed([*boot, PROBE], environ=e)) for k, e in variants.items()}, args.reps)
        steps = reported_steps(boot, STEP, variants, args.reps)
    rows = []
    base_ready, base_step = med(ready["without"]), statistics.median(steps["without"])
    for name in variants:
        r, s = med(ready[name]), statistics.median(steps[name])
        rows.append([name, ms(r), f"{r / base_ready:.3f}x", f"{s * 1e6:.0f} us", f"{s / base_step:.3f}x"])
    print(f"## Stacks handler, {args.ranks} ranks, median of {args.reps} (same run, alternating)\n")
    print(table(["case", "time to ready", "vs without", "training step", "vs without"], rows))
    print(f"\nInstalling the handler in a rank (in-process, median of 50): {install_us():.0f} us")


def install_us(n: int = 50) -> float:
    """What `stacks.install` itself costs: the folder, the lock, the pipe, the thread, the handler."""
    import os  # here: the rest of the benchmark runs ranks, not this

    from slurmtorch.bootstrap import stacks

    times = []
    with tempfile.TemporaryDirectory() as folder:
        for i in range(n):
            os.environ["SLURMTORCH_JOB_DIR"] = f"{folder}/{i}"
            t = time.perf_counter()
            stacks.install(0, "here")
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


if __name__ == "__main__":
    main()
