"""The README example on 2 testbed nodes, in a charliecloud container and without one.

    cd benchmarks && ../.venv/bin/python container.py [--reps N]   (as root, testbed not in use)

slurmtorch: `slurmtorch sbatch --site <testbed + charliecloud> --nodes 2 --wait examples/train_ddp.py`,
the ranks under ch-run in scripts/image's image (its own python and torch). Baseline, in the same
run: the same command with `--site testbed`, the ranks on the host's venv. Submit to job gone.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _common import REPO, alternate, med, ms, run, slurmtorch_cli, table, timed
from turnaround import missing, testbed_env

EXAMPLE = REPO / "examples" / "train_ddp.py"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    reps = ap.parse_args().reps
    why = missing()
    if why:
        raise SystemExit(f"container: skipped: {why}")
    image = run([REPO / "scripts" / "image", EXAMPLE.parent], timeout=1800).stdout.strip()
    environ = testbed_env()
    tmp = Path(tempfile.mkdtemp(prefix="st-bench-container-"))
    environ["SLURMTORCH_HOME"] = str(tmp / "home")
    site = tmp / "charliecloud.yaml"
    site.write_text(json.dumps({"extends": "testbed", "container": {
        "runtime": "charliecloud", "image": image, "python": "/usr/bin/python3", "args": ["--set-env"]}}))

    def job(site_name: str):
        return lambda: timed([*slurmtorch_cli(), "sbatch", "--site", site_name, "--nodes", "2", "--time", "5",
                              "--wait", EXAMPLE], environ=environ, timeout=600)

    t = alternate({"charliecloud (ch-run, the image's python)": job(str(site)),
                   "no container (the host's venv)": job("testbed")}, reps)
    ours, base = (med(v) for v in t.values())
    print("## The README example on 2 testbed nodes: in a charliecloud container and without (submit -> job gone)\n")
    print(table(["job", "median", "min", "max"], [[n, ms(med(v)), ms(min(v)), ms(max(v))] for n, v in t.items()]))
    print(f"\nin the container / without: **{ours / base:.2f}x** (lower is faster)")


if __name__ == "__main__":
    main()
