"""The run folder, `$SLURMTORCH_HOME/distributor/<run>/`: where the submitting process and
the ranks meet (meta, payload, result, error reports; a local run's logs too).

It lives on the shared file system the job folders already need, and it is private
(0700): a pickled payload runs as code on every rank.
"""

from __future__ import annotations

import os
from pathlib import Path

from slurmtorch.errors import SubmitError
from slurmtorch.submit import jobdir


def create_run_folder(workdir: Path) -> None:
    """Make `workdir` (0700); missing levels above it (SLURMTORCH_HOME) never
    world-writable, whatever the umask."""
    parent = workdir.parent
    jobdir.ensure_folder(parent.parent)
    parent.mkdir(exist_ok=True, mode=0o700)
    if parent.stat().st_mode & 0o022:
        os.chmod(parent, 0o700)
    os.mkdir(workdir, 0o700)
    os.chmod(workdir, 0o700)  # mkdir's mode is masked by the umask


def run_folder_error(exc: OSError, workdir: Path) -> SubmitError:
    """The SubmitError for a run folder that cannot be written, naming it."""
    return jobdir.folder_error(exc, workdir.parent, "run folder")
