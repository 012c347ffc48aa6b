"""squeue and scontrol: what Slurm says of jobs, without an accounting DB.

squeue (`-t all`: ended jobs too, while the controller remembers them), the job folder's
exit-code, and scontrol only for the exit code of an ended job that wrote none. How often
to ask is `polling`'s and `watch`'s.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from slurmtorch import events
from slurmtorch.errors import SubmitError, typed
from slurmtorch.submit.edge.runner import Runner, run
from slurmtorch.submit.jobfolder.jobstatus import (SQUEUE_FORMAT, TERMINAL_STATES, JobStatus, SqueueRow, TrialStatus,
                                                parse_squeue, scontrol_exit, scontrol_fields,
                                                scontrol_record)
from slurmtorch.submit.jobfolder import jobdir, story


def squeue(selection: Sequence[str], runner: Runner = run) -> dict[str, SqueueRow]:
    """One squeue call: every job the controller still knows (`-t all`: ended ones too, for
    MinJobAge, 300 s by default) among `selection` (`-j 1,2,3_4`, `-u NAME`), array tasks
    one per line (`-r`). A selection of only forgotten ids is an empty answer, not an error."""
    argv = ["squeue", "-h", "-r", "-t", "all", "-o", SQUEUE_FORMAT, *selection]
    proc = runner(argv, check=False, timeout=30)
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:
            return {}
        raise SubmitError(
            f"squeue failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}",
            argv=argv, returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
        )
    return parse_squeue(proc.stdout)


def scontrol_job(job_id: str, runner: Runner = run, *, multiline: bool = False) -> dict[str, str] | None:
    """scontrol's fields of a job, None once Slurm has forgotten it; `multiline`: its WorkDir
    (and log paths) whole, a space in them too (`scontrol_record`)."""
    proc = runner(["scontrol", *([] if multiline else ["-o"]), "show", "job", job_id], check=False, timeout=30)
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    return scontrol_record(proc.stdout) if multiline else scontrol_fields(proc.stdout)


def cluster_self_description(runner: Runner = run) -> tuple[str, str, str, str]:
    """For `site init`: scontrol's nodes and partitions (a line each), srun's MPI plugins (older
    srun prints them on stderr; a failure leaves the site on the cluster's MpiDefault) and
    scontrol's configuration (MaxArraySize; a failure leaves Slurm's default, marked CHECK)."""
    nodes = runner(["scontrol", "show", "node", "--oneliner"], timeout=30).stdout
    parts = runner(["scontrol", "show", "partition", "--oneliner"], timeout=30).stdout
    mpi = runner(["srun", "--mpi=list"], check=False, timeout=30)
    config = runner(["scontrol", "show", "config"], check=False, timeout=30)
    return nodes, parts, mpi.stdout + mpi.stderr, config.stdout if config.returncode == 0 else ""


def job_folder(job_id: str, root: Path | None = None) -> Path:
    """The folder of job `JOBID`, or of array task `JOBID_K` (its trial-K)."""
    base, sep, task = str(job_id).partition("_")
    jobdir.check_job_id(base)
    if not sep:
        return jobdir.job_dir(base, root)
    return jobdir.trial_dir(base, int(jobdir.check_job_id(task)), root)


def statuses(job_ids: Sequence[str], root: Path | None = None, *, runner: Runner = run,
             unknown: dict[str, SubmitError] | None = None) -> dict[str, JobStatus]:
    """Every job's (or array task's) status with one squeue call; scontrol only for an
    ended job whose folder holds no exit code (cancelled, timed out: what code Slurm saw).
    A job neither Slurm nor a folder knows raises, or with `unknown` is left out and its
    error kept there."""
    folders = {j: job_folder(j, root) for j in job_ids}
    rows = squeue(["-j", ",".join(job_ids)], runner) if job_ids else {}
    out = {}
    for j in job_ids:
        try:
            out[j] = status_of(j, rows.get(j), folders[j], runner)
        except SubmitError as exc:
            if unknown is None:
                raise
            unknown[j] = exc
    return out


def job_status(job_id: str, root: Path | None = None, *, runner: Runner = run) -> JobStatus:
    """State of a job (or array task `JOBID_K`) without an accounting DB: squeue, then its folder."""
    return statuses([str(job_id)], root, runner=runner)[str(job_id)]




def status_of(job_id: str, row: SqueueRow | None, folder: Path, runner: Runner = run) -> JobStatus:
    """The status given squeue's row (None: the controller has forgotten the job): a job
    still queued or running as squeue says; an ended one with the batch script's exit code
    (scontrol's when the script never wrote one), Slurm's word then kept in its record
    (`settled`); a forgotten one from its folder and its record."""
    if row is not None and row.state not in TERMINAL_STATES:
        return row.status()
    exit_code = jobdir.read_exit_code(folder)
    if row is not None:
        if exit_code is None:
            fields = scontrol_job(job_id, runner)
            exit_code = scontrol_exit(fields or {}, row.state)
        status = replace(row.status(), exit_code=exit_code)
        settle(folder, status)
        return status
    if not folder.is_dir():
        raise SubmitError(f"job {job_id} is unknown to squeue, and {folder} does not exist",
                          tip="check the job id and SLURMTORCH_HOME")
    return remembered(job_id, story.fold(events.read(folder)), exit_code)


def settle(folder: Path, status: JobStatus) -> None:
    """Slurm's word on an ended job (state, exit code, nodes, start and end), appended to its
    record by the first reader that sees it, once a start: what `status` says of the job once
    Slurm has forgotten it (MinJobAge). Never through a link; a folder that cannot take it is
    left as it is."""
    if not folder.is_dir() or folder.is_symlink() or story.fold(events.read(folder)).settled is not None:
        return
    events.append(folder, "settled", state=status.state, code=status.exit_code, elapsed=status.elapsed(),
                  nodes=status.nodes, started=status.started, ended=status.ended)


def remembered(job_id: str, told: story.Story, exit_code: int | None) -> JobStatus:
    """A job the scheduler has forgotten, as its folder tells it (pure): Slurm's last word where
    a reader kept it, else the batch script's starts and exit code. With neither exit code nor
    Slurm's word, it was cancelled, timed out or killed with its node."""
    first = told.attempts[0].started if told.attempts else None
    submitted = told.submitted.at if told.submitted is not None else None
    if told.settled is not None:
        said = told.settled
        code = exit_code if exit_code is not None else said.get("code")
        return JobStatus(job_id, str(said.get("state") or "ENDED"), code, nodes=told.nodes, source="job folder",
                         submitted=submitted, started=said.get("started") or first,
                         ended=said.get("ended") or said.at, name=told.name)
    ended = told.attempts[-1].ended if told.attempts else None
    if exit_code is not None:
        return JobStatus(job_id, "COMPLETED" if exit_code == 0 else "FAILED", exit_code, nodes=told.nodes,
                         source="job folder", submitted=submitted, started=first, ended=ended, name=told.name)
    return JobStatus(job_id, "ENDED", None, "no exit-code file (cancelled or killed?)", told.nodes, "job folder",
                     submitted, first, ended=ended, name=told.name)


def my_jobs(runner: Runner = run) -> dict[str, JobStatus]:
    """This user's jobs that the controller still knows (queued, running, recently ended),
    by id, from one squeue call; ended ones without their exit code (the caller has folders)."""
    return {j: row.status() for j, row in squeue(["-u", me()], runner).items()}


def array_status(job_id: str, root: Path | None = None, *, runner: Runner = run,
                 known: dict[int, JobStatus] | None = None) -> list[TrialStatus]:
    """Every trial (array task) of an array job submitted by slurmtorch.

    One squeue for all tasks; scontrol only for an ended task without an exit code. Trials
    in `known` (ended ones a waiter has already reported) are taken as they are, without
    asking the scheduler again.
    """
    folder = jobdir.job_dir(job_id, root)
    record = jobdir.read_trials(folder)
    if record is None:
        raise SubmitError(f"job {job_id} is not an array job (no {folder / jobdir.TRIALS})")
    known = known or {}
    trials = sorted(((int(t), params) for t, params in record["trials"].items()), key=lambda kv: kv[0])
    rows = squeue(["-j", job_id], runner) if any(t not in known for t, _ in trials) else {}
    out = []
    for t, params in trials:
        task = f"{job_id}_{t}"
        status = known.get(t) or status_of(task, rows.get(task), jobdir.trial_dir(job_id, t, root), runner)
        out.append(TrialStatus(t, params, status))
    return out


def me() -> str:
    """This process's user name as Slurm shows it (not $USER, which a shell may have changed)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def live_job(job_id: str, runner: Runner, what: str) -> JobStatus:
    """The status of a job of this user's that is still queued or running; else SubmitError.

    scancel (22.05) exits 0 and says nothing for an unknown job id, so the job is looked up
    first: unknown, someone else's, or already ended is an error naming which.
    """
    base = jobdir.check_job_id(str(job_id).partition("_")[0])
    rows = squeue(["-j", str(job_id)], runner)
    row = rows.get(str(job_id)) or next((r for j, r in rows.items() if j.partition("_")[0] == base), None)
    if row is None:
        raise SubmitError(f"job {job_id} is not known to Slurm (never submitted, or ended long enough ago "
                          "to be forgotten)", tip=f"{typed(f'status {job_id}')} reads its folder")
    user = me()
    if row.user and row.user != user:
        raise SubmitError(f"job {job_id} belongs to {row.user}, not to {user}",
                          tip=f"only its owner (or an operator, with scancel) can {what} it")
    status = row.status()
    if status.done:
        raise SubmitError(f"job {job_id} has already ended ({status.state}); nothing to {what}",
                          tip=typed(f"status {job_id}"))
    return status
