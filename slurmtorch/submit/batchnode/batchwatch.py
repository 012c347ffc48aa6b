"""The batch node's watcher: how a `--max-restarts` job outlives the loss of its batch node.

A restartable job runs with `--no-kill`, so that a lost node leaves the rest of the
allocation to the supervisor, which starts the step again on a spare. Slurm (22.05, and
the same in 24.x's job_mgr.c) takes the failed node out of such a job whichever node it
was: a --no-kill job of more than one node is shrunk before `--requeue` is even looked
at. When that node is the batch node, the batch script, the supervisor and rank 0 go
with it, and the job stays RUNNING on the survivors with nothing in it (slurmctld: `batch
step received ... This should never happen`) until its time limit. Nothing on the batch
node can help, and Slurm offers no setting that requeues a --no-kill job on the loss of
its batch node alone; without --no-kill every node's loss would end or requeue the whole
job and a spare could never step in.

So the supervisor starts this watcher as a one-task `srun --overlap` step on another of
the job's nodes (supervisor.start_watcher, again before a start if it has ended). Every
POLL_S it asks slurmctld (one `scontrol show job`) whether the batch node is still in the
job. Slurm's word, not a heartbeat file, decides: a slow shared filesystem must not
requeue a healthy job, and slurmctld takes the node out once it is declared DOWN, after
SlurmdTimeout. Then the watcher records the failed start in restarts.json (the batch
node excluded, a restart counted) and requeues the job (slurmjob.requeue_alone: Slurm
finishes a requeue only after this step has ended, so the node is kept out by
restarts.json, not by ExcNodeList); with no restart left it cancels the job. Slurm starts
the batch script again elsewhere (the node is DOWN) and the supervisor resumes from
restarts.json, starting nowhere it excludes; `status` and `--wait` show the line this writes.
A heterogeneous job (roles on different resources) is not requeued: it is cancelled.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import hostlist

from slurmtorch import protocol, requeue
from slurmtorch.submit.batchnode import record, slurmjob
from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.submit.batchnode.restarts import batch_node_lost, decide

POLL_S = 3.0  # one scontrol call per job this often: the loss is known SlurmdTimeout + POLL_S after it
WATCHED = ("RUNNING", "SUSPENDED")  # other states: the job ended, or is being requeued already
USAGE = "usage: python -m slurmtorch.submit.batchnode.batchwatch --batch-host NODE --max-restarts N"


def parse_args(argv: Sequence[str]) -> tuple[str, int]:
    """(batch host, max restarts) from the supervisor's call (pure)."""
    values = dict(zip(argv[::2], argv[1::2]))
    if len(argv) % 2 or set(values) != {"--batch-host", "--max-restarts"} or not values["--max-restarts"].isdigit():
        raise ValueError(USAGE)
    return values["--batch-host"], int(values["--max-restarts"])


def batch_host_gone(fields: Mapping[str, str], host: str) -> bool | None:
    """Pure, over `scontrol -o show job`'s fields: True once the running job no longer holds
    `host`; None once the job no longer runs (nothing left to watch); False otherwise,
    and when scontrol said nothing usable."""
    state, nodes = fields.get("JobState", ""), fields.get("NodeList", "")
    if not state:
        return False
    if state not in WATCHED:
        return None
    return bool(nodes) and host not in hostlist.expand_hostlist(nodes)


def act(folder: Path, job: str, host: str, max_restarts: int) -> int:
    """Record the lost start (`host` excluded) and requeue the job, or cancel it: no restarts left."""
    plan = decide(record.load_state(folder), batch_node_lost(host), (), 1, max_restarts, now=time.time(),
                  in_place=False, requeue=not slurmjob.heterogeneous(os.environ))
    record.noted(folder, plan, max_restarts)
    if plan.action == "requeue":
        return 0 if slurmjob.requeue_alone(job, plan.state.events[-1].cause, [host]) else 1
    slurmjob.cancel(job)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    try:
        host, max_restarts = parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    folder = Path(os.environ[protocol.JOB_DIR])
    # Our lines go to batch.out ourselves: srun, on the batch node, would carry them there
    # only while that node lives.
    sys.stderr = open(folder / jobdir.BATCH_OUT, "a", encoding="utf-8", buffering=1)
    job = requeue.target(os.environ)
    try:
        while True:
            gone = batch_host_gone(slurmjob.job_fields(job), host)
            if gone is None:
                return 0
            if gone:
                return act(folder, job, host, max_restarts)
            time.sleep(POLL_S)
    except (OSError, ValueError, RuntimeError) as exc:
        record.say(f"error: the batch node's watcher failed: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
