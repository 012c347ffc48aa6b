"""A 2-node Ray cluster on the testbed: from the allocation to every node joined.

    cd benchmarks && ../.venv/bin/python ray_start.py [--reps N]   (as root, testbed not in use; ray installed)

slurmtorch: `slurmtorch sbatch --site <testbed + a prologue line> --nodes 2 --ray ready.py`: the
head, the worker and the driver's wait start at once; ready.py, the driver, prints the time it
starts, once raynode saw both nodes. Baseline, in the same run: the cluster by hand, as Ray's
Slurm guide writes it (one `srun ray start --block` per node, the head first), with the head on
ib0 as ours, the workers started once the head's port answers (not the guide's `sleep 10`), then
a driver polling `ray.nodes()` until both nodes are alive. Both measure on the first node, from
the first line of the batch script (a site prologue line in ours, before it picks the port and
address) to the driver seeing the whole cluster.
"""
from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path

from _common import BIN, PY, alternate, med, ms, run, slurmtorch_cli, table
from turnaround import missing, testbed_env

READY = """\
import time
print("READY", time.time(), flush=True)
"""

POLL = """\
import sys, time, ray
ray.init(address=sys.argv[1], logging_level="WARNING", log_to_driver=False)
while len([n for n in ray.nodes() if n["Alive"]]) < 2:
    time.sleep(0.2)
print("READY", time.time(), flush=True)
"""


def by_hand(out: Path) -> str:
    """The batch script a Ray user writes (docs.ray.io, Deploying on Slurm), head on ib0."""
    return f"""#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 --time=5 --output={out}/%j.out
echo "T0 $(date +%s.%N)"
nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
head_ip=$(ip -4 -o addr show dev ib0 | awk '{{print $4}}' | cut -d/ -f1)
port=6379
srun --overlap --nodes=1 --ntasks=1 -w "${{nodes[0]}}" {BIN}/ray start --head --node-ip-address="$head_ip" \\
    --port=$port --num-cpus=2 --block --disable-usage-stats --temp-dir=/tmp/rb-$SLURM_JOB_ID-head >/dev/null 2>&1 &
until (exec 3<>/dev/tcp/$head_ip/$port) 2>/dev/null; do sleep 0.1; done
srun --overlap --nodes=1 --ntasks=1 -w "${{nodes[1]}}" {BIN}/ray start --address="$head_ip:$port" \\
    --num-cpus=2 --block --disable-usage-stats --temp-dir=/tmp/rb-$SLURM_JOB_ID-w1 >/dev/null 2>&1 &
{PY} {out}/poll.py "$head_ip:$port"
srun --overlap --nodes=2 --ntasks=2 {BIN}/ray stop --force >/dev/null 2>&1
kill %1 %2 2>/dev/null
wait
"""


def wait_gone(job: str, environ) -> None:
    while run(["squeue", "-h", "-j", job], environ=environ).stdout.strip():
        time.sleep(0.25)


def seconds(text: str) -> float:
    t0 = float(re.search(r"^T0 (\S+)", text, re.M).group(1))
    return float(re.search(r"^READY (\S+)", text, re.M).group(1)) - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    reps = ap.parse_args().reps
    why = missing()
    if why:
        raise SystemExit(f"ray_start: skipped: {why}")
    environ = testbed_env()
    tmp = Path(tempfile.mkdtemp(prefix="st-bench-ray-"))
    environ["SLURMTORCH_HOME"] = str(tmp / "home")
    (tmp / "ready.py").write_text(READY)
    (tmp / "poll.py").write_text(POLL)
    (tmp / "by-hand.sbatch").write_text(by_hand(tmp))
    site = tmp / "testbed-t0.yaml"  # the testbed, with the first line of by_hand's script as a prologue
    t0_line = 'echo "T0 $(date +%s.%N)" >"$SLURMTORCH_JOB_DIR/t0"'
    site.write_text(json.dumps({"extends": "testbed", "prologue": [t0_line]}))

    def ours() -> float:
        job = run([*slurmtorch_cli(), "sbatch", "--site", site, "--nodes", "2", "--time", "5", "--ray",
                   "--parsable", tmp / "ready.py"], environ=environ, cwd=tmp).stdout.split()[0]
        wait_gone(job, environ)
        folder = tmp / "home" / "jobs" / job
        return seconds((folder / "t0").read_text() + (folder / "rank-0.out").read_text())

    def hand() -> float:
        job = run(["sbatch", "--parsable", tmp / "by-hand.sbatch"], environ=environ).stdout.strip().split(";")[0]
        wait_gone(job, environ)
        return seconds((tmp / f"{job}.out").read_text())

    t = alternate({"slurmtorch --ray": ours, "by hand (srun ray start per node)": hand}, reps)
    a, b = (med(v) for v in t.values())
    print("## A 2-node Ray cluster on the testbed: allocation -> every node joined\n")
    print(table(["how", "median", "min", "max"], [[n, ms(med(v)), ms(min(v)), ms(max(v))] for n, v in t.items()]))
    print(f"\n--ray / by hand: **{a / b:.2f}x** (lower is faster)")


if __name__ == "__main__":
    main()
