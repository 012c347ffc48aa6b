"""How often does a run whose script finished exit non-zero? (It must be never.)

A rank whose script returned used to abort at interpreter exit now and then:
gloo's worker threads were still alive when Python finalized, one of them tried to
take the GIL to drop a tensor, and libstdc++ ended the process with `terminate called
without an active exception` (SIGABRT; srun then killed the step). Seen in 1 of 15
launches of the command below. This repeats the launch and counts every outcome, so a
fix is shown over hundreds of runs instead of believed after a few.

    eval "$(scripts/testbed env)"
    .venv/bin/python benchmarks/exit_soak.py --runs 200                   # srun, 4 nodes
    .venv/bin/python benchmarks/exit_soak.py --runs 100 --launcher mpirun # Open MPI, here

Prints the launches, the non-zero exits, the aborts among them, and the median launch
time; exits 0 (a measurement, not a test).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import subprocess
import sys
import time

from _common import REPO, env

TRAIN = str(REPO / "examples" / "train_ddp.py")
BOOT = [sys.executable, "-m", "slurmtorch.bootstrap"]


def command(launcher: str, nodes: int) -> list[str]:
    if launcher == "srun":
        # The path rendered srun jobs take: the world from Slurm's variables, no MPI_Init.
        return ["srun", "-p", "debug", f"-N{nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                *BOOT, "--from", "slurm", TRAIN, "--epochs", "2"]
    return ["mpirun", "-n", str(nodes), "--oversubscribe", *BOOT, TRAIN, "--epochs", "2"]


def signature(proc: subprocess.CompletedProcess) -> str:
    text = proc.stdout + proc.stderr
    if "terminate called" in text:
        return "abort at exit (terminate called)"
    if "trained on" not in text:
        return "script did not finish"
    return f"exit {proc.returncode} after the script finished"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--launcher", choices=("srun", "mpirun"), default="srun")
    parser.add_argument("--nodes", type=int, default=4, help="srun nodes, or mpirun ranks")
    args = parser.parse_args()
    environ = env(GLOO_SOCKET_IFNAME="eth0" if args.launcher == "srun" else "lo")
    argv = command(args.launcher, args.nodes)
    outcomes: collections.Counter[str] = collections.Counter()
    times = []
    for i in range(args.runs):
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(argv, env=environ, cwd=REPO, capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired:
            outcomes["hung (180 s)"] += 1
            continue
        times.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            outcomes[signature(proc)] += 1
            print(f"run {i}: exit {proc.returncode}: {signature(proc)}\n{proc.stderr[-1500:]}", file=sys.stderr)
        else:
            outcomes["exit 0"] += 1
    bad = args.runs - outcomes["exit 0"]
    print(f"{args.launcher} x{args.nodes}: {args.runs} launches, {bad} non-zero, "
          f"{outcomes['abort at exit (terminate called)']} aborts at exit; "
          f"median launch {statistics.median(times):.2f} s" if times else "no launch finished")
    for name, count in sorted(outcomes.items()):
        print(f"  {count:4d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
