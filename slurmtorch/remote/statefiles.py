"""The laptop's own state: a private folder under XDG's state home, and small JSON files in it.

What `pull` trusts (which laptop folder a job was submitted from, what earlier pulls placed)
must come from the laptop itself, never from a file on the cluster, which a job can rewrite.
So it is kept here: `$XDG_STATE_HOME/slurmtorch/` (default `~/.local/state/slurmtorch/`), made
0700 and refused when another user owns it or can write it (`ownership`, as a job folder).
Each file is written whole or not at all (a temporary file beside it, renamed over it) and read
bounded: a plain file (not a link, a FIFO or a device), up to a cap, else one line saying why.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from slurmtorch.atomicwrite import write_atomic
from slurmtorch.errors import ClusterError
from slurmtorch.submit.jobfolder import ownership

LABEL = "slurmtorch's state (XDG_STATE_HOME)"


def state_folder(name: str, environ=os.environ) -> Path:
    """$XDG_STATE_HOME/slurmtorch/NAME, made privately, or SubmitError (whose, and the fix)."""
    base = environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    top = Path(base) / "slurmtorch"
    ownership.secure_folder(top / name, top, label=LABEL)
    return top / name


def write_json(path: Path, value: object, cap: int) -> None:
    """`value` as `path`, atomically (0600); over `cap` bytes is refused (ClusterError)."""
    data = json.dumps(value, separators=(",", ":")).encode("utf-8", "surrogateescape")
    if len(data) > cap:
        raise ClusterError(f"{path} would hold {len(data)} bytes, over slurmtorch's cap of {cap}",
                           tip=f"remove {path}; slurmtorch starts it afresh")
    write_atomic(str(path), data)


def read_bounded(path: Path, cap: int) -> bytes | None:
    """A plain file's bytes, None when there is none; OSError for a link, a FIFO, a device or a
    file over `cap` bytes (its strerror says which), so nothing can hang or flood the reader."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a plain file", str(path))
        data = f.read(cap + 1)
    if len(data) > cap:
        raise OSError(0, f"over {cap} bytes", str(path))
    return data


def read_json(path: Path, cap: int, what: str, tip: str) -> object | None:
    """The JSON value in `path` (None: no such file), or one ClusterError line naming it."""
    try:
        data = read_bounded(path, cap)
    except OSError as exc:
        raise ClusterError(f"{what}, {path}, cannot be read: {exc.strerror or exc}", tip=tip) from None
    if data is None:
        return None
    try:
        return json.loads(data.decode("utf-8", "surrogateescape"))
    except ValueError:
        raise ClusterError(f"{what}, {path}, is not JSON slurmtorch wrote", tip=tip) from None
