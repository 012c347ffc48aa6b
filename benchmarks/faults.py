"""Time to end for one misbehaving rank on the 4-node testbed, N runs per case.

    eval "$(scripts/testbed env)"; .venv/bin/python benchmarks/faults.py --reps 5
    .venv/bin/python benchmarks/faults.py --reps 2 --cases node-lost   # kills node3, then restores

Each run is `slurmtorch sbatch --site testbed -N 4 --timeout 20 --wait
tests/scripts/fault_rank.py MODE 2`: rank 2 (on node3) exits 3, SIGKILLs itself, raises,
or hangs (or its script returns) at step 3 while the others all_reduce every 0.2 s. Time to end = from the fault
(the rank's own timestamp, or the node kill) until `--wait` returns. Every run is
bounded (--deadline); a run that does not end is reported as a hang and the job cancelled.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "scripts"))
import fault_node  # noqa: E402

CASES = ("exit", "kill", "raise", "hang", "return", "node-lost")
SCRIPT = REPO / "tests" / "scripts" / "fault_rank.py"


def one(case: str, home: Path, deadline: float) -> dict:
    mode = "none" if case == "node-lost" else case
    env = dict(os.environ, SLURMTORCH_HOME=str(home))
    argv = [sys.executable, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed", "-N", "4",
            "--timeout", "20", "-t", "10", "--wait", str(SCRIPT), mode, "2"]
    t_submit = time.time()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job_id = proc.stdout.readline().strip()
    fault_at = None
    if case == "node-lost":
        out = home / "jobs" / job_id / "rank-2.out"
        limit = time.monotonic() + 60
        while not (out.exists() and "started" in out.read_text()) and time.monotonic() < limit:
            time.sleep(0.1)
        time.sleep(1.0)  # a few steps into training
        fault_at = fault_node.lose(3)
    try:
        stdout, stderr = proc.communicate(timeout=deadline)
        hung = False
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        subprocess.run(["scancel", job_id], capture_output=True)
        hung = True
    t_end = time.time()
    if fault_at is None:
        err = (home / "jobs" / job_id / "rank-2.err").read_text(errors="replace") if job_id else ""
        m = re.search(r"^FAULT \S+ at ([0-9.]+)$", err, re.MULTILINE)
        fault_at = float(m.group(1)) if m else float("nan")
    named = [ln for ln in stderr.splitlines() if ln.startswith("slurmtorch: failed: ")]
    return {"case": case, "job": job_id, "rc": proc.returncode, "hung": hung,
            "submit_to_end_s": round(t_end - t_submit, 2), "fault_to_end_s": round(t_end - fault_at, 2),
            "named": named[0] if named else ""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cases", default="exit,kill,raise,hang")
    ap.add_argument("--deadline", type=float, default=240, help="seconds before a run counts as hung")
    ap.add_argument("--json", help="also write every run here")
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            ap.error(f"unknown case {c!r}; cases: {', '.join(CASES)}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="slurmtorch-faults-") as tmp:
        for rep in range(args.reps):
            for case in cases:
                r = one(case, Path(tmp), args.deadline)
                if case == "node-lost":
                    fault_node.restore(dict(os.environ))
                runs.append(r)
                print(json.dumps(r), flush=True)
    print(f"\n{'case':<10} {'runs':>4} {'rc!=0':>5} {'hung':>4} {'median s':>9} {'max s':>7}  (fault -> --wait returns)")
    for case in cases:
        rs = [r for r in runs if r["case"] == case]
        t = [r["fault_to_end_s"] for r in rs]
        print(f"{case:<10} {len(rs):>4} {sum(r['rc'] != 0 for r in rs):>5} {sum(r['hung'] for r in rs):>4} "
              f"{statistics.median(t):>9.2f} {max(t):>7.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    return 1 if any(r["hung"] or r["rc"] == 0 for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
