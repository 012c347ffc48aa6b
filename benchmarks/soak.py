"""Soak: many jobs at once on the testbed, each with a random fault; every one must end right.

    eval "$(scripts/testbed env)"
    .venv/bin/python benchmarks/soak.py --jobs 50

Each job is `slurmtorch sbatch --site testbed -N 2 tests/scripts/fault_rank.py MODE 1 STEPS`
(rank 1, on the second node, misbehaves at step 3 while rank 0 all_reduces every 0.2 s),
all submitted at once (sbatch on a busy controller) and followed with `slurmtorch status`.
The faults, drawn with --seed:

  none         the script finishes: COMPLETED, exit 0
  raise        rank 1 raises: FAILED, `rank 1 on node2: ValueError`
  kill         rank 1 SIGKILLs itself: FAILED, rank 1 named
  hang         rank 1 sleeps (--timeout 15): FAILED, rank 1 named as hung
  return       rank 1's script returns early (exit 0): FAILED, rank 1 named
  scancel      `slurmtorch cancel` once rank 1 has started: CANCELLED
  sigterm-cli  SIGTERM to the submitting CLI's process group at a random moment (0-6 s):
               either no job at all (no id printed, none left queued or held) or a job
               that ends like `none`
  batch-node   a --max-restarts job (tests/scripts/resume_train.py, 2 nodes, no spare) loses
               its batch node (`scripts/testbed fail-node`, rank 0's and the supervisor's)
               after its first checkpoint: requeued without it, resumed, COMPLETED, and
               status names the lost batch node
  two-nodes    the same job with a spare loses rank 1's node and the spare at once: both
               excluded, requeued on what is left, COMPLETED

Node faults run --exclusive (a lost node takes every process on it, so it must be the job's
alone); the lost nodes are brought back (`scripts/testbed restore-node`) once the job has
been requeued.

Afterwards, for the whole run: no job of this run still in the queue (held jobs included),
no `.submitting-*` folder left, no rank process (`fault_rank.py`) left on the machine.
Prints the counts per fault and outcome; exits 1 if any job ended wrong or anything was
left behind (a measurement that is also a check, not a test: it takes minutes).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, env

SCRIPT = REPO / "tests" / "scripts" / "fault_rank.py"
TRAIN = REPO / "tests" / "scripts" / "resume_train.py"
TESTBED = REPO / "scripts" / "testbed"
FAULTS = ("none", "raise", "kill", "hang", "return", "scancel", "sigterm-cli", "batch-node", "two-nodes")
NODE_FAULTS = ("batch-node", "two-nodes")
EXPECT = {  # fault -> (final state, what the status must say; rank 1 runs on the job's second node)
    "none": ("COMPLETED", r"exit_code=0"),
    "raise": ("FAILED", r"failed: rank 1 on node\d: ValueError: bad batch"),
    "kill": ("FAILED", r"failed: rank 1 on node\d: killed by a signal"),
    "hang": ("FAILED", r"failed: rank 1 on node\d: hung"),
    "return": ("FAILED", r"failed: rank 1 on node\d: its script returned while the others still needed it"),
    "scancel": ("CANCELLED", r""),
    "batch-node": ("COMPLETED", r"restarts: 1 of 3; excluded: node\d\nstart 0 failed: the batch node node\d was lost"),
    "two-nodes": ("COMPLETED", r"restarts: 1 of 3; excluded: node\d,node\d\n"),
}


def cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "slurmtorch.cli.main", *argv]


def submit(fault: str, tag: str, home: Path, environ: dict) -> subprocess.Popen:
    if fault in NODE_FAULTS:
        spare = "1" if fault == "two-nodes" else "0"
        argv = cli("sbatch", "--site", "testbed", "-N", "2", "-t", "5", "--timeout", "60", "-J", tag, "--exclusive",
                   "--max-restarts", "3", "--spare-nodes", spare, str(TRAIN), "--", "12")
        return subprocess.Popen(argv, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    mode = "none" if fault in ("scancel", "sigterm-cli") else fault
    steps = "400" if fault == "scancel" else "15"
    argv = cli("sbatch", "--site", "testbed", "-N", "2", "-t", "3", "--timeout", "15", "-J", tag,
               str(SCRIPT), "--", mode, "1", steps)
    return subprocess.Popen(argv, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def status(job_id: str, environ: dict) -> tuple[str, str]:
    p = subprocess.run(cli("status", job_id), env=environ, capture_output=True, text=True, timeout=60)
    text = p.stdout + p.stderr
    m = re.search(r"\bstate=(\w+)", text)
    return (m.group(1) if m else "?"), text


def job_field(job: str, key: str) -> str:
    p = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=30)
    m = re.search(rf"(?:^| ){key}=(\S*)", p.stdout)
    return m.group(1) if m else ""


def victims(fault: str, job: str) -> list[str]:
    """The nodes a node fault takes: the batch node; or rank 1's node and the spare."""
    nodes = subprocess.run(["scontrol", "show", "hostnames", job_field(job, "NodeList")], capture_output=True,
                           text=True, timeout=30).stdout.split()
    return [job_field(job, "BatchHost")] if fault == "batch-node" else nodes[1:3]


class NodeFaults:
    """Node faults in flight: fail the nodes once the job has its first checkpoint, bring them
    back once it has been requeued (Restarts=1) or after 120 s, whichever comes first."""

    def __init__(self, home: Path):
        self.home, self.waiting, self.lost = home, {}, {}

    def add(self, i: int, fault: str, job: str) -> None:
        self.waiting[i] = (fault, job)

    def tick(self) -> None:
        for i, (fault, job) in list(self.waiting.items()):
            if (self.home / "jobs" / job / "checkpoints" / "state.pt").exists() and job_field(job, "JobState") == "RUNNING":
                nodes = victims(fault, job)
                for node in nodes:
                    subprocess.run([str(TESTBED), "fail-node", node], capture_output=True, timeout=60)
                self.lost[i] = (job, nodes, time.monotonic())
                del self.waiting[i]
        for i, (job, nodes, t) in list(self.lost.items()):
            if job_field(job, "Restarts") not in ("", "0") or time.monotonic() - t > 120:
                for node in nodes:
                    subprocess.run([str(TESTBED), "restore-node", node], capture_output=True, timeout=120)
                del self.lost[i]

    def busy(self) -> bool:
        return bool(self.waiting or self.lost)


def queued(tag_prefix: str) -> list[str]:
    p = subprocess.run(["squeue", "-h", "-o", "%i %j %T %r"], capture_output=True, text=True, timeout=30)
    return [ln for ln in p.stdout.splitlines() if f" {tag_prefix}" in ln]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--deadline", type=float, default=900, help="seconds for the whole run")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    faults = [FAULTS[i % len(FAULTS)] for i in range(args.jobs)]
    rng.shuffle(faults)
    run_tag = f"soak{os.getpid()}-"
    home = Path(tempfile.mkdtemp(prefix="slurmtorch-soak-"))
    environ = env(SLURMTORCH_HOME=str(home))
    t0 = time.monotonic()
    procs = [(i, f, submit(f, f"{run_tag}{i}", home, environ)) for i, f in enumerate(faults)]
    kill_at = {i: t0 + rng.uniform(0, 6) for i, f, _ in procs if f == "sigterm-cli"}
    jobs: dict[int, str] = {}
    outcome: dict[int, str] = {}
    while any(p.poll() is None for _, _, p in procs) and time.monotonic() - t0 < 120:
        for i, when in list(kill_at.items()):
            if time.monotonic() >= when:
                p = procs[i][2]
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
                del kill_at[i]
        time.sleep(0.05)
    for i, f, p in procs:
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            outcome[i] = "submission hung"
            continue
        job = out.strip().splitlines()[0] if out.strip() else ""
        if re.fullmatch(r"[0-9]+", job):
            jobs[i] = job
        elif f == "sigterm-cli" and p.returncode != 0:
            outcome[i] = "no job (submission stopped)"
        else:
            outcome[i] = f"submission failed (exit {p.returncode}): {err.strip()[-200:]}"
    cancel_pending = {i for i, f, _ in procs if f == "scancel" and i in jobs}
    faults_in_flight = NodeFaults(home)
    for i, f, _ in procs:
        if f in NODE_FAULTS and i in jobs:
            faults_in_flight.add(i, f, jobs[i])
    while time.monotonic() - t0 < args.deadline:
        faults_in_flight.tick()
        for i in list(cancel_pending):
            out = home / "jobs" / jobs[i] / "rank-1.out"
            if out.exists() and "started" in out.read_text(errors="replace"):
                subprocess.run(cli("cancel", jobs[i]), env=environ, capture_output=True, timeout=60)
                cancel_pending.discard(i)
        if not queued(run_tag) and not cancel_pending and not faults_in_flight.busy():
            break
        time.sleep(3)  # one squeue for all jobs every few seconds
    results: collections.Counter[tuple[str, str]] = collections.Counter()
    wrong = []
    for i, f, _ in procs:
        if i not in jobs:
            results[(f, outcome[i])] += 1
            if f != "sigterm-cli":
                wrong.append(f"job {i} ({f}): {outcome[i]}")
            continue
        state, text = status(jobs[i], environ)
        want_state, want_text = EXPECT.get(f, EXPECT["none"])
        ok = state == want_state and re.search(want_text, text) is not None
        results[(f, state if ok else f"WRONG {state}")] += 1
        if not ok:
            wrong.append(f"job {jobs[i]} ({f}): {state}: {text.strip()[-300:]}")
    leftovers = queued(run_tag)
    submitting = sorted(p.name for p in (home / "jobs").glob(".submitting-*")) if (home / "jobs").exists() else []
    ranks = [pid for script in (SCRIPT, TRAIN)
             for pid in subprocess.run(["pgrep", "-f", str(script)], capture_output=True, text=True).stdout.split()]
    print(f"{args.jobs} jobs (seed {args.seed}) in {time.monotonic() - t0:.0f} s")
    for (f, o), n in sorted(results.items()):
        print(f"  {n:3d}  {f:<12} {o}")
    print(f"left in the queue: {len(leftovers)}; .submitting-* folders: {len(submitting)}; rank processes: {len(ranks)}")
    for line in wrong + leftovers:
        print("  " + line)
    return 1 if wrong or leftovers or submitting or ranks else 0


if __name__ == "__main__":
    sys.exit(main())
