"""What earlier pulls placed in a laptop folder: the laptop's own ledger, one per folder.

A pull never writes over a laptop file on the strength of anything the cluster says (a date
is the job's to set). It replaces a file only where this ledger says a pull placed it and the
file is still as placed (size, modification time and SHA-256): a checkpoint pulled yesterday
gives way to today's; a file the user made or edited is kept. The ledger is the laptop's
(`statefiles`: `pulled/<hash of the folder's real path>.json`), never the cluster's.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slurmtorch.errors import ClusterError
from slurmtorch.remote import statefiles

LEDGER_MAX = 64 << 20  # about 300,000 files' entries
_SHA = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Placed:
    """A file as a pull left it."""

    size: int
    mtime_ns: int
    sha256: str


def parse(value: object, folder: str, where: str) -> dict[str, Placed]:
    """A ledger's JSON value as {path: Placed} (relative paths), or one ClusterError line (pure)."""
    files = value.get("files") if isinstance(value, dict) and value.get("folder") == folder else None
    ok = isinstance(files, dict) and all(
        isinstance(k, str) and k and not k.startswith("/") and isinstance(v, list) and len(v) == 3
        and type(v[0]) is int and type(v[1]) is int and isinstance(v[2], str) and _SHA.fullmatch(v[2])
        for k, v in files.items())
    if not ok:
        raise ClusterError(f"the ledger of pulls into {folder}, {where}, is not one slurmtorch wrote",
                           tip=f"remove {where}; a pull then keeps every file already in {folder}")
    assert isinstance(files, dict)
    return {k: Placed(*v) for k, v in files.items()}


def value(folder: str, files: Mapping[str, Placed]) -> dict:
    """The ledger's JSON value (pure)."""
    return {"folder": folder, "files": {k: [p.size, p.mtime_ns, p.sha256] for k, p in sorted(files.items())}}


def load(folder: str, environ=os.environ) -> dict[str, Placed]:
    """The ledger of pulls into `folder` (its real path), {} when none."""
    path = _path(folder, environ)
    found = statefiles.read_json(path, LEDGER_MAX, f"the ledger of pulls into {folder}",
                                 tip=f"remove {path}; a pull then keeps every file already in {folder}")
    return {} if found is None else parse(found, folder, str(path))


def save(folder: str, files: Mapping[str, Placed], environ=os.environ) -> None:
    """Keep `files` as the ledger of `folder`, less the entries whose file is gone."""
    here = {k: p for k, p in files.items() if os.path.lexists(os.path.join(folder, k))}
    statefiles.write_json(_path(folder, environ), value(folder, here), LEDGER_MAX)


def _path(folder: str, environ) -> Path:
    key = hashlib.sha256(folder.encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return statefiles.state_folder("pulled", environ) / f"{key}.json"
