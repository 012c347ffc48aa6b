"""A local run's folder: what `slurmtorch mpirun` gives a run without Slurm, so it can be asked where it stands.

`$SLURMTORCH_HOME/local/<N>/`, the run's id `local-N` (N counting up: the first free number
above the newest folder's). A `Distributor`'s local run is one too: its folder
`distributor/<run id>/` (`usecases.runfolder`), its id `local-<run id>`, as its `Job` names it. It holds `script.sh` (the script run), `job.json` (launcher
mpirun, ntasks: what `slurmtorch stacks` reads, as for a job), the ranks' `stacks/` and exit
notes (they find the folder in `protocol.LOCAL_RUN_DIR`), and `exit-code` once the run has
ended. Private as job folders are (0700, `ownership`); the newest KEEP ended ones stay.
The ranks' output still goes to the terminal, as mpirun's does.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from slurmtorch import protocol, readback
from slurmtorch.errors import SpecError, SubmitError, typed
from slurmtorch.submit.jobfolder import jobdir, ownership
from slurmtorch.submit.jobfolder.pruning import prune_ended

PREFIX = "local-"
KEEP = 20  # ended local runs kept, newest first (docs/users-guide.md says so)
_ID_RE = re.compile(rf"{PREFIX}([0-9]+)")
_DISTRIBUTOR_ID_RE = re.compile(rf"{PREFIX}([0-9]{{8}}-[0-9]{{6}}-[0-9a-f]{{8}})")  # Distributor.submit's run ids


def runs_root(environ=None) -> Path:
    """`$SLURMTORCH_HOME/local`, beside `jobs/`."""
    return jobdir.jobs_root(environ).parent / "local"


def is_local_id(run_id: str) -> bool:
    return run_id.startswith(PREFIX)


def run_dir(run_id: str, root: Path | None = None) -> Path:
    root = root or runs_root()
    distributed = _DISTRIBUTOR_ID_RE.fullmatch(run_id)
    if distributed:
        return root.parent / "distributor" / distributed.group(1)
    m = _ID_RE.fullmatch(run_id)
    if not m:
        raise SpecError(f"invalid local run id {run_id!r}", tip=f"a local run's id is {PREFIX}N, e.g. {PREFIX}3, "
                                                                "as slurmtorch mpirun printed it")
    return root / m.group(1)


def run_id(folder: Path) -> str:
    return f"{PREFIX}{folder.name}"


def write_record(folder: Path, ntasks: int) -> None:
    """job.json: what `slurmtorch stacks` reads of a local run (launcher, ntasks), as of a job."""
    jobdir.write_new(folder / protocol.JOB, json.dumps({"launcher": "mpirun", "ntasks": ntasks, "local": True}))


def create(script: str, ntasks: int, root: Path | None = None) -> Path:
    """A new run's folder, its script and job.json in it; SubmitError where it cannot be made."""
    root = root or runs_root()
    try:
        ownership.secure_folder(root, root.parent)
        taken = [n for p in root.iterdir() if (n := readback.numbered(p.name, "")) is not None]
        number = max(taken, default=0) + 1
        while True:
            folder = root / str(number)
            try:
                jobdir.private_folder(folder)
                break
            except FileExistsError:  # another run took it first
                number += 1
        jobdir.write_new(folder / protocol.SCRIPT, script)
        write_record(folder, ntasks)
    except OSError as exc:
        raise jobdir.folder_error(exc, root, "local run folder") from None
    return folder


def ended(folder: Path) -> None:
    """The run has ended (its exit-code is there): prune the ended runs past the newest KEEP."""
    prune_ended(folder.parent, KEEP, protocol.EXIT_CODE)


def live_runs(root: Path | None = None) -> list[Path]:
    """The local runs not yet ended (no exit-code; job.json says local), oldest first: the
    CLI's, then the Distributor's."""
    root = root or runs_root()
    mine = sorted((p for p in _folders(root) if readback.numbered(p.name, "") is not None), key=lambda p: int(p.name))
    distributed = sorted(p for p in _folders(root.parent / "distributor") if _DISTRIBUTOR_ID_RE.fullmatch(run_id(p)))
    return [p for p in (*mine, *distributed)
            if not (p / protocol.EXIT_CODE).exists() and (jobdir.read_job(p) or {}).get("local")]


def _folders(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []


def only_live_run(root: Path | None = None) -> Path:
    """The one local run still running, for `slurmtorch stacks` without an id."""
    live = live_runs(root)
    if len(live) == 1:
        return live[0]
    if not live:
        raise SubmitError("no job id given and no local run is running",
                          tip=f"{typed('stacks JOBID')} (a Slurm job), or local-N as slurmtorch mpirun printed it")
    raise SubmitError(f"no job id given and {len(live)} local runs are running: "
                      f"{', '.join(run_id(p) for p in live)}", tip=typed(f"stacks {run_id(live[-1])}"))


def environment(folder: Path) -> dict[str, str]:
    """What the run's script and its ranks get, beside the caller's environment."""
    return {**os.environ, protocol.LOCAL_RUN_DIR: str(folder)}
