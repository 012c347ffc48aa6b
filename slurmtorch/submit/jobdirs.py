"""Where job folders live. Pure paths: the dry run needs them without importing subprocess."""

from __future__ import annotations

import os
import re
from pathlib import Path

from slurmtorch.errors import SpecError


def jobs_root(environ=None) -> Path:
    """Where job folders live: `$SLURMTORCH_HOME/jobs`, default `~/.slurmtorch/jobs`."""
    environ = os.environ if environ is None else environ
    home = environ.get("SLURMTORCH_HOME") or os.path.join(os.path.expanduser("~"), ".slurmtorch")
    return Path(os.path.abspath(os.path.expanduser(home))) / "jobs"


def check_job_id(job_id: str) -> str:
    if not re.fullmatch(r"[0-9]+", str(job_id)):
        raise SpecError(f"invalid job id {job_id!r}", tip="a Slurm job id is a number, e.g. 1234")
    return str(job_id)


def job_dir(job_id: str, root: Path | None = None) -> Path:
    return (root or jobs_root()) / check_job_id(job_id)
