"""`slurmtorch clean`: remove ended jobs' folders from $SLURMTORCH_HOME/jobs."""

from __future__ import annotations

import sys

import typer

from slurmtorch.usecases import clean as cleaning


def clean(older_than: str = typer.Option(cleaning.DEFAULT_AGE, "--older-than",
                                         help="only folders whose newest file is older than this (30d, 12h, 0)"),
          dry_run: bool = typer.Option(False, "--dry-run", help="list what would be removed, remove nothing")) -> int:
    """Remove the folders of your ended jobs (logs, the copy of the code, reports).

    A job folder, $SLURMTORCH_HOME/jobs/JOBID (default ~/.slurmtorch/jobs), stays until you
    remove it: status, logs and a requeue read it. This removes those of jobs that squeue no
    longer lists as queued or running (an array: none of its tasks) and whose newest file is
    older than --older-than; never a folder of another user's, never a Distributor job's
    whose answer was never read, never a chain's part while a part of it is queued or
    running, never a submission not finished. Each leaves its record (a few KiB), so that
    status and logs say when it was cleaned. Your relative outputs (checkpoints) are in the
    folders you submitted from, not here, and are never touched.
    """
    lines, said = cleaning.clean(older_than, dry_run)
    for line in lines:
        print(line)
    for line in said:
        print(line, file=sys.stderr)
    return 0
