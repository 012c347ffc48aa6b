"""What a job runs and is called: exactly one of SCRIPT or -m MODULE, arguments a script can
carry, and the job's name (the module, else the script's stem, within Slurm's length)."""

from __future__ import annotations

import re

from slurmtorch import shell
from slurmtorch.errors import SpecError, typed
from slurmtorch.options import Options

_MODULE_RE = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"  # compiled on first use (re's cache): most jobs never need it
KINDS = ("sbatch", "mpirun")
MAX_JOB_NAME = 1024  # slurmctld's limit for a job name


def check_program(o: Options) -> None:
    """The job kind, exactly one of SCRIPT or MODULE, and text a script can carry."""
    if o.kind not in KINDS:
        raise SpecError(f"unknown job kind {o.kind!r}")
    if o.interactive and o.script is None and o.module is None:
        pass  # `slurmtorch alloc` itself: the program comes later, with each `slurmtorch run`
    elif (o.script is None) == (o.module is None):
        raise SpecError("give exactly one of SCRIPT or -m MODULE", tip=f"e.g. {typed('sbatch train.py')}, or -m pkg.train")
    if o.module is not None and not re.match(_MODULE_RE, o.module):
        raise SpecError(f"invalid module name {o.module!r}", tip="a dotted Python module path, e.g. pkg.train")

    # Checked here to name the value; rendering quotes each of them again.
    if o.script is not None:
        shell.quote(o.script, what="SCRIPT path")
    for i, arg in enumerate(o.script_args, 1):
        shell.quote(arg, what=f"script argument {i}")

    if o.kind == "sbatch" and "\\" in o.job_root:
        # Slurm turns off every %-pattern in an --output/--error path that holds a
        # backslash: each rank's log would be one literal `rank-%t.out` in `%j`.
        raise SpecError(f"job folder root {o.job_root!r} contains a backslash, which turns off Slurm's "
                        "%j/%t patterns in log paths", tip="set SLURMTORCH_HOME to a path without '\\'")


def job_name(o: Options) -> str:
    """--job-name, else the module, else the script's stem; at most Slurm's length."""
    name = o.job_name or (o.module if o.module else _stem(o.script))
    if len(name) > MAX_JOB_NAME:
        # slurmctld refuses longer names ("Pathname ... too long") only after submission.
        raise SpecError(f"job name is {len(name)} characters; Slurm allows at most {MAX_JOB_NAME}",
                        tip="pass a shorter --job-name")
    return name


def _stem(script: str | None) -> str:
    name = (script or "job").rstrip("/").rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0] if "." in name[1:] else name
    return stem or "job"
