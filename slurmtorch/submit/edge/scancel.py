"""scancel: a job of this user's that is still queued or running cancelled, or its ranks
asked for their stacks (`scancel --signal`)."""

from __future__ import annotations

import signal

from slurmtorch import protocol
from slurmtorch.errors import SubmitError, typed
from slurmtorch.submit.edge.queries import live_job
from slurmtorch.submit.edge.runner import Runner, run
from slurmtorch.submit.jobfolder.jobstatus import JobStatus


def cancel(job_id: str, *, runner: Runner = run) -> JobStatus:
    """scancel a job of this user's that is still queued or running; its status before."""
    status = live_job(job_id, runner, "cancel")
    runner(["scancel", str(job_id)])
    return status


def running_job(job_id: str, *, runner: Runner = run) -> JobStatus:
    """A job of this user's that is running now, whose ranks can be asked for their stacks;
    else SubmitError (unknown to Slurm, someone else's, ended, or not started)."""
    status = live_job(job_id, runner, "ask")
    if status.state != "RUNNING":
        raise SubmitError(f"job {job_id} is {status.state.lower()}, not running: no rank to ask",
                          tip=typed(f"status {job_id}"))
    return status


def send_stacks_signal(job_id: str, batch_step: bool = False, runner: Runner = run) -> None:
    """`scancel --signal=28 JOBID`: every task of every step (and with `batch_step`, every
    process of the batch step: `--batch`; Slurm 22.05's `--full` reached the batch step
    only, on the testbed). By number: its scancel knows no WINCH by name ("Unknown job
    signal"). Every process ignores the signal unless it installed our handler
    (protocol.STACKS_SIGNAL), so the batch shell, srun and mpirun are untouched."""
    number = int(getattr(signal, f"SIG{protocol.STACKS_SIGNAL}"))
    runner(["scancel", f"--signal={number}", str(job_id)], timeout=20)
    if batch_step:
        runner(["scancel", f"--signal={number}", "--batch", str(job_id)], timeout=20)
