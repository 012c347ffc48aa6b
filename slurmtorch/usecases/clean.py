"""`clean`: ended jobs' folders removed from $SLURMTORCH_HOME/jobs.

The folders are listed first and squeue asked after (`choose`), so a job submitted in between
is never taken for an ended one; each chosen folder is removed through one function
(`remove`), leaving its tombstone (its record, so that `status` and `logs` say when it was
cleaned); what was kept is counted by reason. The front end prints the lines that come back.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from slurmtorch.submit.edge import queries
from slurmtorch.submit.jobfolder import cleaning, jobdir, pruning, tombstone
from slurmtorch.submit.jobfolder.snapshot import mib

DEFAULT_AGE = cleaning.DEFAULT_AGE  # --older-than's default


def clean(older_than: str, dry_run: bool) -> tuple[list[str], list[str]]:
    """The folders removed (or, `dry_run`, that would be): a line each (stdout's), then the
    count, the size and what was kept by reason (stderr's)."""
    age = cleaning.parse_age(older_than)
    root = jobdir.jobs_root()
    if not root.is_dir():
        return [], [f"slurmtorch: nothing to clean: {root} does not exist"]
    jobdir.checked(root)
    choice = choose(root, age, active_jobs)
    removed = [s for s in choice.removed if dry_run or remove(s)]
    lines = [f"{'would remove' if dry_run else 'removed'} {s.folder} ({mib(s.size)}, {s.age_s / 86400:.0f} days old)"
             for s in removed]
    total = mib(sum(s.size for s in removed))
    kept = cleaning.kept_line(choice.kept, older_than)
    return lines, [f"slurmtorch: {len(removed)} job folder{'' if len(removed) == 1 else 's'} ({total}) "
                   f"{'would be removed (--dry-run)' if dry_run else 'removed'}; "
                   f"{'kept: ' + kept if kept else 'none kept'}"]


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
