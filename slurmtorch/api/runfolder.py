"""The run folder, `$SLURMTORCH_HOME/distributor/<run>/`: where the submitting process and
the ranks meet (meta, payload, result, error reports; a local run's logs too).

It lives on the shared file system the job folders already need, and it is private
(0700): a pickled payload runs as code on every rank, so the folders above it must be
this user's alone too (`ownership`). Once the answer is read it is
closed (close_run_folder): a run that succeeded leaves nothing (every call used to leave
24-44 KB for good), a failed one is kept for its logs and error reports, marked `failed`,
and only the newest KEEP_FAILED of those stay. A folder without an answer yet (a job
still running, a submit() nobody asked for its result) is never touched.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from slurmtorch.errors import SubmitError
from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.submit.jobfolder import ownership

FAILED = "failed"  # in a run folder: its job failed; holds the error's first line
KEEP_FAILED = 20  # failed run folders kept, newest first


def create_run_folder(workdir: Path) -> None:
    """Make `workdir` (0700) in `distributor/` of SLURMTORCH_HOME, both made privately if
    missing and refused (SubmitError) when another user owns or can write them: the
    payload in it runs on every rank (ownership)."""
    ownership.secure_folder(workdir.parent, workdir.parent.parent)
    os.mkdir(workdir, 0o700)
    os.chmod(workdir, 0o700)  # mkdir's mode is masked by the umask


def run_folder_error(exc: OSError, workdir: Path) -> SubmitError:
    """The SubmitError for a run folder that cannot be written, naming it."""
    return jobdir.folder_error(exc, workdir.parent, "run folder")


def close_run_folder(workdir: Path, succeeded: bool, why: str = "") -> None:
    """The answer is read: remove a succeeded run's folder; mark a failed one (`why`, the
    error's first line) and prune the failed ones past the newest KEEP_FAILED. Best effort:
    the answer matters more than the tidying, so a file system error is left unsaid."""
    if succeeded:
        shutil.rmtree(workdir, ignore_errors=True)
        return
    try:
        (workdir / FAILED).write_text(why.splitlines()[0] + "\n" if why else "\n", encoding="utf-8")
    except OSError:
        return
    prune_failed(workdir.parent, KEEP_FAILED)


def prune_failed(runs: Path, keep: int) -> list[Path]:
    """Remove the failed run folders under `runs` but the newest `keep` (by when they were
    marked); folders not marked failed are left alone. Returns those removed."""
    marked = []
    for folder in runs.iterdir() if runs.is_dir() else ():
        try:
            marked.append((os.stat(folder / FAILED).st_mtime, folder.name, folder))
        except OSError:
            continue  # not a failed run (running, succeeded meanwhile, or not ours)
    marked.sort(reverse=True)
    removed = [folder for _, _, folder in marked[keep:]]
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    return removed
