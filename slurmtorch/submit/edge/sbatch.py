"""sbatch: a job submitted all or nothing, and its undo.

The job folder (`jobdir`) is made under a temporary name, the job is submitted *held* so
that it cannot start before its folder exists, then the folder is renamed to the job id
and the job released. Any failure on the way removes the folder (and cancels the held
job): nothing half-written is left behind.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmtorch import events
from slurmtorch.errors import SubmitError
from slurmtorch.submit.edge.git import git
from slurmtorch.submit.edge.runner import Runner, run
from slurmtorch.submit.interrupts import deferred
from slurmtorch.submit.jobfolder import codecopy, jobdir
from slurmtorch.submit.jobfolder.snapshot import Snapshot

_JOB_ID_RE = re.compile(r"^(?P<id>[0-9]+)(?:;(?P<cluster>\S+))?$")


def parse_job_id(stdout: str, argv: Sequence[str] = ()) -> str:
    """`sbatch --parsable` prints `jobid` or `jobid;cluster`."""
    lines = [ln.strip() for ln in stdout.strip().splitlines() if ln.strip()]
    m = _JOB_ID_RE.match(lines[-1]) if lines else None
    if not m:
        raise SubmitError(
            f"could not read a job id from sbatch's output {stdout.strip()!r}",
            argv=argv, returncode=0, stdout=stdout,
        )
    return m.group("id")


def sbatch_env_overrides(environ) -> list[str]:
    """The SBATCH_* input variables set in `environ` (pure): sbatch lets each override the
    script's matching #SBATCH line, so the job would differ from the dry run."""
    return sorted(k for k in environ if k.startswith("SBATCH_"))


def sbatch_env_warning(names: Sequence[str]) -> str | None:
    if not names:
        return None
    return (f"warning: {', '.join(names)} set in the environment override{'s' if len(names) == 1 else ''} "
            "the script's #SBATCH lines (the job may differ from --dry-run); unset "
            f"{'it' if len(names) == 1 else 'them'} to run exactly the script")


@dataclass(frozen=True)
class Submission:
    job_id: str
    job_dir: Path


def submit(script: str, root: Path | None = None, *, runner: Runner = run, trials: dict | None = None,
           job: dict | None = None, announce: Callable[[Submission], None] | None = None,
           snapshot: Snapshot | None = None, snapshot_limit: int = 0, release: bool = True,
           files: Sequence[tuple[str, str]] = ()) -> Submission:
    """Write the job folder, submit held, rename the folder to the job id, release (unless
    `release` is False: a chain's parts stay held until every part is in, `release_jobs`).

    `job` (spec.job_record) is written as job.json; `trials` (spec.trials_record) makes it
    an array job's folder: trials.json and trial-K/; `files`: the shell files the script
    sources (render.shell_files), in its sh/. `snapshot`: the code is copied into
    the folder (code/, snapshot.json) before sbatch, at most `snapshot_limit` bytes.
    Nothing in it is world-writable, whatever the umask. A file system error becomes a
    SubmitError naming the path; any failure removes what was made and cancels the job.
    All or nothing under signals too: a TERM/HUP/INT on the way is held until a safe point,
    then the job is cancelled, the folder removed and `Interrupted` raised. `announce`
    (the CLI prints the id) runs once the job is released, still inside that shelter.
    """
    root = root or jobdir.jobs_root()
    with deferred("submission undone: no job left queued, no folder left") as pending:
        tmp = jobdir.make_temp(root, script, trials, job, files)
        job_id: str | None = None
        final: Path | None = None
        released = False
        try:
            if snapshot is not None:
                codecopy.take(snapshot, tmp, git, snapshot_limit)
            pending.check()
            warning = sbatch_env_warning(sbatch_env_overrides(os.environ))
            if warning:
                print(warning, file=sys.stderr, flush=True)
            # Held, so that the job cannot start (and open batch.out) before its folder exists.
            argv = ["sbatch", "--parsable", "--hold", str(tmp / jobdir.SCRIPT)]
            job_id = parse_job_id(runner(argv).stdout, argv)
            pending.check()
            # Only once renamed is the folder at the job id ours: before, it may be an older job's.
            final = jobdir.move_into_place(tmp, root, job_id)
            events.append(final, "submitted", **submitted_fields(job_id, job or {}), name=jobdir.read_job_name(final))
            if release:
                released = True  # from here the job may start, even if scontrol fails to say so
                runner(["scontrol", "release", job_id])
            pending.check()
        except BaseException:
            _undo(tmp, final, job_id, runner, released)
            raise
        submission = Submission(job_id=job_id, job_dir=final)
        if announce is not None:
            announce(submission)
    return submission


def submitted_fields(job_id: str, job: dict) -> dict:
    """The `submitted` event of a job from its job.json (pure): what the story starts with."""
    keep = {"nodes": int, "ntasks": int, "launcher": str, "workdir": str, "max_restarts": int}
    return {"job": job_id, **{k: job[k] for k, kind in keep.items() if isinstance(job.get(k), kind)}}


def release_jobs(job_ids: Sequence[str], *, runner: Runner = run) -> None:
    """Release jobs submitted held (`submit(release=False)`), all in one scontrol call."""
    runner(["scontrol", "release", ",".join(job_ids)])


def withdraw(submissions: Sequence[Submission], *, runner: Runner = run) -> None:
    """Undo submissions still held (never started): each job cancelled, its folder removed."""
    for sub in submissions:
        _undo(sub.job_dir, None, sub.job_id, runner, released=False)


def _undo(tmp: Path, final: Path | None, job_id: str | None, runner: Runner, released: bool) -> None:
    """Cancel the job, then remove the folder. A released job may have started: it is
    waited for (bounded) first, as its script, still writing in its folder, made it again
    when the folder went before the cancel (seen on Slurm 24.11, which starts a released
    job at once)."""
    if job_id is not None:
        try:
            runner(["scancel", job_id], check=False, timeout=10)
            if released:
                _wait_gone(job_id, runner)
        except Exception:  # noqa: BLE001 - the original error matters more
            pass
    for folder in (tmp, final):
        if folder is not None and folder.exists():
            shutil.rmtree(folder, ignore_errors=True)


def _wait_gone(job_id: str, runner: Runner, timeout: float = 30) -> None:
    """Until squeue no longer lists the job as pending, running or completing (a cancelled
    job's processes end within KillWait, 30 s by default) or `timeout` has passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = runner(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False, timeout=10)
        if proc.returncode != 0 or not proc.stdout.strip():
            return
        time.sleep(0.2)
