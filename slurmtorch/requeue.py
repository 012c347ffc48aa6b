"""Requeueing the running job from inside it: the one path for a preempted rank and the restart supervisor.

`scontrol requeue` puts the job back in the queue with the same id and folder; Slurm ends
its steps and the batch script, and starts the script again with SLURM_RESTART_COUNT one
higher. The restart supervisor also keeps the nodes it blames out of the next run
(`exclude`). Runs on a job's node, in a rank or the batch script; `scontrol` is run through
`run`, which tests replace (`runner`).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

import hostlist

from slurmtorch.errors import BootstrapError, SubmitError

Runner = Callable[..., object]
EXCLUDE_WAIT_S = 20.0  # how long `exclude` retries while Slurm has not yet taken the requeue
RETRY_S = 0.2  # between its tries: the update must land within the cluster's KillWait


def target(environ: Mapping[str, str]) -> str:
    """The id `scontrol requeue` needs: `ARRAYJOBID_TASKID` for an array task, else the job id.

    SLURM_JOB_ID of an array task is the task's own id, which scontrol also accepts,
    but the `A_T` form is what the array's bookkeeping and users see.
    """
    array, task = environ.get("SLURM_ARRAY_JOB_ID", ""), environ.get("SLURM_ARRAY_TASK_ID", "")
    if array.isdigit() and task.isdigit():
        return f"{array}_{task}"
    job = environ.get("SLURM_JOB_ID", "") or environ.get("SLURM_JOBID", "")
    if not job.isdigit():
        raise BootstrapError("cannot requeue: not inside a Slurm job (no SLURM_JOB_ID)",
                             tip="preemption requeue works under sbatch; elsewhere the hooks only run")
    return job


def run(argv: Sequence[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """Run one scontrol command; a failure (or no scontrol) is a SubmitError with its last line."""
    argv = list(argv)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SubmitError(f"{' '.join(argv)} failed: {exc}", argv=argv) from None
    if proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
        raise SubmitError(f"{' '.join(argv)} failed (exit {proc.returncode}): {detail}", argv=argv,
                          returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)
    return proc


def requeue(job: str, runner: Runner = run) -> None:
    """`scontrol requeue JOB`; raises SubmitError when Slurm refuses. `runner(argv, timeout=)`
    runs the command and raises on failure."""
    runner(["scontrol", "requeue", job], timeout=60)


def exclude(job: str, nodes: Sequence[str], runner: Runner = run, wait_s: float = EXCLUDE_WAIT_S,
            extra: Sequence[str] = ()) -> list[str]:
    """Keep `nodes` out of a job just requeued; returns them sorted. `nodes` must already hold
    those the job excluded itself (the user's -x: `excluded_now`, asked before the requeue).
    `extra`: more `KEY=VALUE` fields for the same update (the supervisor's shrunk
    NumNodes/NumTasks/NumCPUs). Raises SubmitError if Slurm still refuses after `wait_s`.

    Slurm (22.05) takes a new ExcNodeList (and NumTasks) only from a job that is not
    running, and a requeue ends the batch script: so the requeue comes first, and the
    update follows while the job is completing (accepted from the moment the requeue is
    under way: seen on the testbed, at the second try). The caller is then inside KillWait
    (the requeue's TERM ignored, its KILL coming): nothing but this one update is asked
    here, retried every RETRY_S.
    """
    every = sorted(set(nodes))
    deadline = time.monotonic() + wait_s
    while True:
        try:
            runner(["scontrol", "update", f"JobId={job}", f"ExcNodeList={hostlist.collect_hostlist(every)}", *extra],
                   timeout=60)
            return every
        except SubmitError:
            if time.monotonic() > deadline:
                raise
        time.sleep(RETRY_S)


def excluded_now(job: str, runner: Runner = run) -> list[str]:
    """The job's ExcNodeList as Slurm has it now (the user's -x), expanded; [] if unknown."""
    try:
        proc = runner(["scontrol", "-o", "show", "job", job], timeout=60)
    except SubmitError:
        return []
    for token in str(getattr(proc, "stdout", "") or "").split():
        key, _, value = token.partition("=")
        if key == "ExcNodeList" and value and value != "(null)":
            return hostlist.expand_hostlist(value)
    return []
