"""Sending the code to a cluster (`--cluster`), decided once for both sides.

The laptop's side: which tree a submission sends (`tree`: the script's git work tree, else its
folder; for `alloc`'s shell this folder), which of its files with their SHA-256 and the record
sent beside them (`listing`: the files a snapshot here would take, with the same limits), and
SCRIPT as the mirror names it (`script_there`). The cluster's side: the mirror made privately
or refused before anything is sent into it (`ready`). `remote/sync` carries the files.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from slurmtorch.errors import ClusterError, SpecError
from slurmtorch.submit.jobfolder import codecopy, jobdir, ownership, snapshot
from slurmtorch.submit.jobfolder.snapshot import Snapshot


@dataclass(frozen=True)
class Listing:
    """What a laptop sends of a tree: its files (and links), the record that names each with
    its hash, and what the listing says of the tree (a folder's Python code only, nested repos)."""

    files: list[str]
    size: int
    manifest: list[list[str]]
    record: dict
    notes: list[str]


def tree(script: str | None, module: str | None, shell: bool) -> Snapshot | None:
    """The tree a submission from here sends: the script's (or, with -m, this folder's); for
    `alloc`'s shell (`shell`) this folder outside any tree too; None: nothing to send."""
    found = snapshot.locate(script, module, os.getcwd())
    if found is None and shell:
        # alloc: its shell's `run SCRIPT` names this folder's files, so it is sent as a
        # script's folder outside git is (its Python code), and the shell opens in it.
        found = Snapshot(root=os.getcwd(), git=False, script=None, cwd="")
    return found


def listing(snap: Snapshot, environ: Mapping[str, str] = os.environ) -> Listing:
    """The tree's files as a snapshot here would list them (git's tracked and not-ignored
    ones, the same size limit), each hashed here, and the sync record naming them."""
    home = str(jobdir.jobs_root(environ).parent)
    nested: list[codecopy.Nested] = []
    notes: list[str] = []  # a folder outside git too big to send whole: its Python code only, said
    entries = codecopy.list_entries(snap, _git, snapshot.limit_bytes(environ), home, nested, notes)
    manifest = [[e.path, "link", e.target] if e.kind == "link" else [e.path, _sha256(snap.root, e.path), ""]
                for e in entries]
    record = codecopy.describe(snap, _git, manifest, sum(e.size for e in entries), nested)
    return Listing([e.path for e in entries if e.kind == "file"], sum(e.size for e in entries), manifest, record,
                   codecopy.nested_lines(nested) + notes)


def script_there(snap: Snapshot) -> str | None:
    """SCRIPT as the mirror names it, from the working folder: where it really is (the mirror
    holds files, not links: ld/s.py with ld -> d is d/s.py); None for -m MODULE."""
    if snap.script is None:
        return None
    real = codecopy.real_script(snap.root, snap.script)
    return posixpath.relpath(real, snap.cwd or ".") if snap.cwd is not None else real


def ready(name: str) -> None:
    """The cluster's side: the mirror NAME in $SLURMTORCH_HOME/sync, made privately or refused
    as a job folder's levels are (ownership), before anything is sent into it; a folder that
    cannot be made is the error a job folder's would be."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name) or name in (".", ".."):
        raise SpecError(f"not a mirror's name: {name!r}")
    home = jobdir.jobs_root().parent
    try:
        ownership.secure_folder(home / "sync" / name, home)
    except OSError as exc:
        raise jobdir.folder_error(exc, home, "code mirror") from None


def _git(folder: str, *args: str, input: bytes | None = None) -> tuple[int, bytes, str]:
    from slurmtorch.submit.edge.git import git  # lazy: the edge that runs git, only when a tree is listed

    return git(folder, *args, input=input)


def _sha256(root: str, path: str) -> str:
    digest = hashlib.sha256()
    try:
        with open(os.path.join(root, path), "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        raise ClusterError(f"cannot read {os.path.join(root, path)}: {exc.strerror or exc}",
                           tip="make it readable, or keep it out of the tree (.gitignore)") from None
    return digest.hexdigest()

