"""The run folder, `$SLURMTORCH_HOME/distributor/<run>/`: where the submitting process and
the ranks meet (meta, payload, result, error reports; a local run's logs too).

It lives on the shared file system the job folders already need, and it is private
(0700): a pickled payload runs as code on every rank, so the folders above it must be
this user's alone too (`ownership`). Once the answer is read it is
closed (close_run_folder): the pickles go, the rest stays for `Job.logs(rank=N)` and the
error reports, marked `ended`, and only the newest KEEP_RUNS ended folders stay. A folder
without an answer yet (a job still running, a submit() nobody asked for its result) is
never touched.
"""

from __future__ import annotations

import os
from pathlib import Path

from slurmtorch import protocol
from slurmtorch.errors import SubmitError
from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.submit.jobfolder import ownership
from slurmtorch.submit.jobfolder.pruning import prune_ended

__all__ = ["ENDED", "KEEP_RUNS", "RUN_FOLDER", "close_run_folder", "create_run_folder", "prune_ended", "run_folder_error"]

ENDED = protocol.RUN_ENDED  # in a run folder: its answer was read; holds `completed` or `failed: <the error's first line>`
KEEP_RUNS = 20  # ended run folders kept, newest first (docs/python-api.md says so)
RUN_FOLDER = protocol.RUN_FOLDER  # in a Distributor job's job.json: its run folder, which `Job.attach` finds by id


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
    """The answer is read: mark the folder ended (`completed`, or `failed: ` and the error's
    first line) and prune the ended ones past the newest KEEP_RUNS. Best effort: the answer
    matters more than the tidying, so a file system error is left unsaid."""
    line = "completed" if succeeded else f"failed: {why.splitlines()[0] if why else ''}"
    try:
        fd = os.open(workdir / ENDED, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError:
        return
    prune_ended(workdir.parent, KEEP_RUNS, ENDED)
