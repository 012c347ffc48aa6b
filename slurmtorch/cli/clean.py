"""`slurmtorch clean`: remove ended jobs' folders from $SLURMTORCH_HOME/jobs."""

from __future__ import annotations

import os
import sys
import time

import typer

from slurmtorch.submit.edge import queries
from slurmtorch.submit.jobfolder import cleaning, jobdir, pruning
from slurmtorch.submit.jobfolder.snapshot import mib


def clean(older_than: str = typer.Option(cleaning.DEFAULT_AGE, "--older-than",
                                         help="only folders whose newest file is older than this (30d, 12h, 0)"),
          dry_run: bool = typer.Option(False, "--dry-run", help="list what would be removed, remove nothing")) -> int:
    """Remove the folders of your ended jobs (logs, the copy of the code, reports).

    A job folder, $SLURMTORCH_HOME/jobs/JOBID (default ~/.slurmtorch/jobs), stays until you
    remove it: status, logs and a requeue read it. This removes those of jobs that squeue no
    longer lists as queued or running (an array: none of its tasks) and whose newest file is
    older than --older-than; never a folder of another user's. Your relative outputs
    (checkpoints) are in the folders you submitted from, not here, and are never touched.
    """
    age = cleaning.parse_age(older_than)
    root = jobdir.jobs_root()
    if not root.is_dir():
        print(f"slurmtorch: nothing to clean: {root} does not exist", file=sys.stderr)
        return 0
    jobdir.checked(root)
    active = cleaning.active_ids(j for j, st in queries.my_jobs().items() if not st.done)
    stale = cleaning.stale_folders(root, age, time.time(), active, os.geteuid())
    removed = [s for s in stale if dry_run or pruning.remove(s.folder)]
    for s in removed:
        print(f"{'would remove' if dry_run else 'removed'} {s.folder} ({mib(s.size)}, {s.age_s / 86400:.0f} days old)")
    total = mib(sum(s.size for s in removed))
    print(f"slurmtorch: {len(removed)} job folder{'' if len(removed) == 1 else 's'} ({total}) "
          f"{'would be removed (--dry-run)' if dry_run else 'removed'}; queued and running jobs' and those newer "
          f"than {older_than} kept", file=sys.stderr)
    return 0
