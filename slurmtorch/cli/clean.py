"""`slurmtorch clean`: remove ended jobs' folders from $SLURMTORCH_HOME/jobs."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import typer

from slurmtorch.submit.edge import queries
from slurmtorch.submit.jobfolder import cleaning, jobdir, pruning, tombstone
from slurmtorch.submit.jobfolder.snapshot import mib


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
    age = cleaning.parse_age(older_than)
    root = jobdir.jobs_root()
    if not root.is_dir():
        print(f"slurmtorch: nothing to clean: {root} does not exist", file=sys.stderr)
        return 0
    jobdir.checked(root)
    choice = choose(root, age, active_jobs)
    removed = [s for s in choice.removed if dry_run or remove(s)]
    for s in removed:
        print(f"{'would remove' if dry_run else 'removed'} {s.folder} ({mib(s.size)}, {s.age_s / 86400:.0f} days old)")
    total = mib(sum(s.size for s in removed))
    kept = cleaning.kept_line(choice.kept, older_than)
    print(f"slurmtorch: {len(removed)} job folder{'' if len(removed) == 1 else 's'} ({total}) "
          f"{'would be removed (--dry-run)' if dry_run else 'removed'}; {'kept: ' + kept if kept else 'none kept'}",
          file=sys.stderr)
    return 0


def choose(root: Path, age: float, ask_active: Callable[[], Iterable[str]]) -> cleaning.Choice:
    """The folders listed first, squeue asked after (`ask_active`: the ids it lists as queued
    or running): a job submitted in between has no folder under its id yet when listed (a
    submission renames its folder once sbatch answered), or squeue lists it."""
    listed, submitting = cleaning.list_folders(root, os.geteuid())
    active = cleaning.active_ids(ask_active())
    return cleaning.select(listed, age, time.time(), active, submitting)


def active_jobs() -> list[str]:
    """This user's jobs that squeue lists as queued or running."""
    return [j for j, st in queries.my_jobs().items() if not st.done]


def remove(stale: cleaning.Stale) -> bool:
    """The one way `clean` removes a job's folder (renamed away, then removed), leaving its
    tombstone (its record, and when it was cleaned: `status` and `logs` say so); False where
    another remover got there first. An older folder of a reused id (`.stale-*`) leaves none."""
    record = tombstone.kept(stale.folder)
    if not pruning.remove(stale.folder):
        return False
    if stale.folder.name == stale.job_id:
        tombstone.leave(stale.folder, record, stale.size)
    return True
