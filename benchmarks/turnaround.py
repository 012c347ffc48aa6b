"""4. Real Slurm turnaround on the 4-node testbed: submit -> 4 ranks all_reduce -> job ended.

slurmtorch: `slurmtorch sbatch --site testbed --nodes 4 --wait probe.py`.
Baseline: the recipe most users copy, a hand-written sbatch script running
`srun torchrun --nnodes 4 --rdzv-backend c10d ...`, submitted with `sbatch --parsable` and
polled with `squeue -j` at the same 0.25 s interval slurmtorch's --wait uses.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

from _common import BIN, REPO, Figure, alternate, env, have, med, ms, run, slurmtorch_cli, table, timed

TARGET = 0.9
PROBE = REPO / "benchmarks" / "probe.py"


def missing() -> str | None:
    """Why the Slurm section cannot run here: the testbed needs root and Debian's Slurm."""
    if os.geteuid() != 0:
        return "the local Slurm testbed needs root"
    if not have("slurmctld") or not have("sbatch"):
        return "no Slurm here (slurmctld, sbatch: scripts/setup installs them on Debian)"
    return None


def testbed_env() -> dict[str, str]:
    run([REPO / "scripts" / "testbed", "up", "4"], timeout=180)
    out = run([REPO / "scripts" / "testbed", "env"]).stdout
    extra = {}
    for line in out.splitlines():
        key, _, value = shlex.split(line.removeprefix("export "))[0].partition("=")
        extra[key] = value
    return env(**extra)


def torchrun_script(out: Path) -> str:
    return f"""#!/bin/bash
#SBATCH --nodes=4 --ntasks-per-node=1 --cpus-per-task=2 --output={out}/%j.out
export GLOO_SOCKET_IFNAME=eth0
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun {BIN}/torchrun --nnodes 4 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$head:29500" \\
    --rdzv-id "$SLURM_JOB_ID" {PROBE}
"""


def sbatch_and_poll(script: Path, environ) -> float:
    t0 = time.perf_counter()
    job = run(["sbatch", "--parsable", script], environ=environ).stdout.strip().split(";")[0]
    while subprocess.run(["squeue", "-h", "-j", job], env=environ, capture_output=True, text=True).stdout.strip():
        time.sleep(0.25)
    dt = time.perf_counter() - t0
    state = run(["scontrol", "show", "job", job], environ=environ).stdout
    if "JobState=COMPLETED" not in state:
        raise RuntimeError(f"baseline job {job} did not complete:\n{state}")
    return dt


def run_bench(reps: int) -> tuple[str, list[Figure]]:
    environ = testbed_env()
    tmp = Path(tempfile.mkdtemp(prefix="st-bench-turn-"))
    environ["SLURMTORCH_HOME"] = str(tmp / "home")
    script = tmp / "torchrun.sbatch"
    script.write_text(torchrun_script(tmp))
    cases = {
        "slurmtorch": lambda: timed([*slurmtorch_cli(), "sbatch", "--site", "testbed", "--nodes", "4",
                                     "--wait", PROBE], environ=environ),
        "sbatch + srun torchrun": lambda: sbatch_and_poll(script, environ),
    }
    t = alternate(cases, reps)
    ours, base = med(t["slurmtorch"]), med(t["sbatch + srun torchrun"])
    text = ("## 4. Slurm turnaround on the 4-node testbed (submit -> all_reduce on 4 nodes -> job gone)\n\n"
            + table(["command", "median", "min", "max"],
                    [[n, ms(med(v)), ms(min(v)), ms(max(v))] for n, v in t.items()])
            + f"\n\nslurmtorch / hand-written torchrun recipe: **{ours / base:.2f}x** (lower is faster; "
              f"target <= {TARGET}x).")
    return text, [Figure("turnaround vs srun torchrun", ours / base, target=TARGET)]


