"""`slurmtorch status|logs|cancel JOBID`: follow a job without an accounting DB."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from slurmtorch.errors import SubmitError
from slurmtorch.submit import jobdir
from slurmtorch.submit import scheduler
from slurmtorch.submit.report import failure_lines, restart_lines
from slurmtorch.submit.tail import Tail


def status(job_id: str = typer.Argument(..., metavar="JOBID")) -> int:
    """Print the job's state (squeue, then scontrol, then its folder's exit-code)."""
    folder = jobdir.job_dir(job_id)
    if jobdir.read_trials(folder) is not None:
        trials = scheduler.array_status(job_id)
        for t in trials:
            print(t.line())
            if t.status.done:
                for line in failure_lines(jobdir.trial_dir(job_id, t.trial)):
                    print(f"  {line}")
        return 0
    status = scheduler.job_status(job_id)
    print(status.line())
    for line in restart_lines(folder):
        print(line)
    if status.done:
        for line in failure_lines(folder):
            print(line)
    return 0


def logs(
    job_id: str = typer.Argument(..., metavar="JOBID"),
    rank: Optional[int] = typer.Option(None, "--rank", "-r", help="which rank's output (default 0)"),
    node: Optional[int] = typer.Option(None, "--node", help="torchrun jobs: which node's output (one file per "
                                                            "node, all its ranks; default 0)"),
    trial: Optional[int] = typer.Option(None, "--trial", "-k", help="which trial (array task) of an array job"),
    batch: bool = typer.Option(False, "--batch", help="the batch script's own output instead"),
    follow: bool = typer.Option(False, "--follow", "-f", help="keep printing until the job ends"),
) -> int:
    """Print a rank's stdout (to stdout) and stderr (to stderr) from the job folder.

    torchrun writes one log per node (every rank on it), not per rank: --node N.
    """
    folder = jobdir.job_dir(job_id)
    if not folder.is_dir():
        raise SubmitError(f"no job folder {folder}", tip="was the job submitted by slurmtorch with this SLURMTORCH_HOME?")
    record = jobdir.read_trials(folder)
    if record is not None:
        ids = sorted(int(t) for t in record["trials"])
        if trial is None:
            raise SubmitError(f"job {job_id} is an array of {len(ids)} trials: say which",
                              tip=f"slurmtorch logs {job_id} --trial {ids[0]} [--rank R]")
        if trial not in ids:
            raise SubmitError(f"job {job_id} has no trial {trial}", tip=f"trials: {', '.join(map(str, ids))}")
        folder = jobdir.trial_dir(job_id, trial)
        job_id = f"{job_id}_{trial}"
    elif trial is not None:
        raise SubmitError(f"job {job_id} is not an array job; --trial does not apply")
    if batch:
        paths = [(folder / jobdir.BATCH_OUT, sys.stdout)]
    else:
        out, err = jobdir.rank_log_paths(folder, rank, node)
        paths = [(out, sys.stdout), (err, sys.stderr)]
    if follow:
        scheduler.follow(job_id, paths)
        return 0
    if not any(p.exists() for p, _ in paths):
        raise SubmitError(
            f"no output yet for {'the batch step' if batch else paths[0][0].stem.replace('-', ' ')} "
            f"of job {job_id} in {folder}",
            tip=f"is it still pending? slurmtorch status {job_id}",
        )
    for p, stream in paths:
        Tail(p, stream).pump()
    for line in failure_lines(folder):
        print(f"slurmtorch: {line}", file=sys.stderr)
    return 0


def cancel(job_id: str = typer.Argument(..., metavar="JOBID")) -> int:
    """Cancel the job (scancel)."""
    scheduler.cancel(job_id)
    print(f"cancel requested for job {job_id}", file=sys.stderr)
    return 0
