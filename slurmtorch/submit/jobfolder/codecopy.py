"""Taking a snapshot: the tree's files listed (git's listing, or a walk) and copied into the job folder.

The copy is `code/` in the job's folder, so it lives and is pruned with the folder, and it
is made inside the folder's temporary name (jobdir.make_temp): a snapshot that fails
leaves nothing behind. Every file is read once, hashed while copied: `snapshot.json` lists
each path with its SHA-256 and mode (content-addressed, what a later sync to a cluster
compares to send only what changed), and the commit and whether the tree was dirty, which
`status` shows. Links are copied as links, never followed (snapshot.link_target).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

from slurmtorch.errors import SubmitError
from slurmtorch.protocol import CODE_DIR, SNAPSHOT
from slurmtorch.submit.jobfolder import snapshot
from slurmtorch.submit.jobfolder.snapshot import Entry, Snapshot

# git(folder, *args) -> (exit code, stdout bytes, stderr's last line): the scheduler edge's `git`.
Git = Callable[..., "tuple[int, bytes, str]"]
_LS_FILES = ("ls-files", "--cached", "--others", "--exclude-standard", "-z")
_CHUNK = 1 << 20


def list_entries(snap: Snapshot, git: Git, limit: int, home: str) -> list[Entry]:
    """What the snapshot copies, checked against the limit before anything is copied.
    Never slurmtorch's own home (job folders, earlier snapshots), should it be in the tree."""
    skip = snapshot.inside(home, snap.root)
    if snap.synced is not None:
        entries = _synced_entries(snap)
    else:
        entries = _git_entries(snap.root, "", git) if snap.git else _walk_entries(snap.root, home)
    if skip is not None:
        entries = [e for e in entries if not snapshot.under(e.path, skip)]
    if snap.script is not None and all(e.path != snap.script for e in entries):
        # The script named on the command line runs, even where .gitignore keeps it out (scratch/try.py).
        named = _make_entry(snap.root, snap.script, _lstat(os.path.join(snap.root, snap.script)))
        entries += [named] if named is not None else []
    snapshot.check_size(entries, snap.root, limit)
    return entries


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _unreadable(path, exc) from None


def _make_entry(root: str, rel: str, st: os.stat_result | None) -> Entry | None:
    target = ""
    if st is not None and stat.S_ISLNK(st.st_mode):
        target = snapshot.link_target(rel, os.readlink(os.path.join(root, rel)), root)
    return snapshot.entry(rel, st, target)


def _git_entries(root: str, prefix: str, git: Git) -> list[Entry]:
    """git's tracked and untracked-not-ignored files under `root`; a checked-out submodule
    (listed as its folder) with its own files, an empty (not checked-out) one with none."""
    folder = os.path.join(root, prefix) if prefix else root
    code, out, said = git(folder, *_LS_FILES)
    if code != 0:
        raise SubmitError(f"snapshot failed: git could not list the files of {folder}: "
                          f"{said or f'exit {code}'}", tip="run `git status` there; " + snapshot.TIP)
    entries: list[Entry] = []
    for rel in snapshot.git_paths(out):
        rel = f"{prefix}/{rel}" if prefix else rel
        st = _lstat(os.path.join(root, rel))
        if st is not None and stat.S_ISDIR(st.st_mode):
            if os.path.lexists(os.path.join(root, rel, ".git")):
                entries += _git_entries(root, rel, git)
            continue
        made = _make_entry(root, rel, st)
        if made is not None:
            entries.append(made)
        if len(entries) > snapshot.MAX_FILES:
            snapshot.too_many(root)
    return entries


def _synced_entries(snap: Snapshot) -> list[Entry]:
    """A laptop's tree (remote.sync): the files its record lists, found in the synced copy, and its links."""
    assert snap.synced is not None
    entries = [Entry(path, "link", target=target) for path, target in snap.synced.links]
    for path, _ in snap.synced.files:
        made = _make_entry(snap.root, path, _lstat(os.path.join(snap.root, path)))
        if made is None or made.kind != "file":
            raise _changed(snap, path)
        entries.append(made)
    return entries


def _changed(snap: Snapshot, path: str) -> SubmitError:
    return SubmitError(f"snapshot failed: {path} in the synced copy {snap.root} is not as the laptop sent it",
                       tip="another submission from the same tree may have synced meanwhile: submit again")


def _walk_entries(root: str, home: str) -> list[Entry]:
    """A folder outside git: everything in it but __pycache__, .git and slurmtorch's home, links as links."""
    entries: list[Entry] = []

    def refuse(exc: OSError) -> None:
        raise _unreadable(exc.filename or root, exc)

    for folder, dirs, files in os.walk(root, onerror=refuse):
        dirs[:] = sorted(d for d in dirs if d not in snapshot.SKIPPED_IN_FOLDERS and os.path.join(folder, d) != home)
        for name in [*(d for d in dirs if os.path.islink(os.path.join(folder, d))), *sorted(files)]:
            rel = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
            made = _make_entry(root, rel, _lstat(os.path.join(folder, name)))
            if made is not None:
                entries.append(made)
        if len(entries) > snapshot.MAX_FILES:
            snapshot.too_many(root)
    return entries


def copy(snap: Snapshot, entries: list[Entry], dest: Path) -> list[list]:
    """Copy `entries` into `dest` (made here, private); returns the manifest [path, sha256, mode]."""
    manifest: list[list] = []
    sent = dict(snap.synced.files) if snap.synced is not None else {}
    os.mkdir(dest, 0o700)
    made = {""}
    if snap.cwd:  # the job starts there, even where nothing in it is copied (an ignored outputs/ folder)
        os.makedirs(dest / snap.cwd, 0o700)
        made.add(snap.cwd)
    for e in entries:
        parent = posixpath_dirname(e.path)
        if parent not in made:
            os.makedirs(dest / parent, 0o700, exist_ok=True)
            made.add(parent)
        if e.kind == "link":
            os.symlink(e.target, dest / e.path)
            manifest.append([e.path, "link", e.target])
            continue
        mode = 0o700 if e.executable else 0o600
        digest = _copy_file(os.path.join(snap.root, e.path), dest / e.path, mode)
        if sent and sent.get(e.path) != digest:
            raise _changed(snap, e.path)
        manifest.append([e.path, digest, oct(mode)])
    return manifest


def posixpath_dirname(path: str) -> str:
    return path.rpartition("/")[0]


def _copy_file(source: str, target: Path, mode: int) -> str:
    """Copy one file, hashing it on the way; an unreadable one is refused by name."""
    digest = hashlib.sha256()
    try:
        src = open(source, "rb")
    except OSError as exc:
        raise _unreadable(source, exc) from None
    with src, open(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as out:
        os.fchmod(out.fileno(), mode)
        while chunk := _read(src, source):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def _read(src, source: str) -> bytes:
    try:
        return src.read(_CHUNK)
    except OSError as exc:
        raise _unreadable(source, exc) from None


def _unreadable(path: str, exc: OSError) -> SubmitError:
    return SubmitError(f"snapshot failed: cannot read {path}: {exc.strerror or exc}",
                       tip="make it readable, or keep it out of the tree (.gitignore); " + snapshot.TIP)


def describe(snap: Snapshot, git: Git, manifest: list[list], size: int) -> dict:
    """snapshot.json's record: the tree, its commit and dirtiness (git), the files."""
    commit, dirty = None, None
    if snap.synced is not None:
        commit, dirty = snap.synced.commit, snap.synced.dirty
    elif snap.git:
        code, out, _ = git(snap.root, "rev-parse", "--verify", "-q", "HEAD")
        commit = out.decode().strip() if code == 0 and out.strip() else None
        code, out, _ = git(snap.root, "status", "--porcelain", "-z")
        dirty = code != 0 or bool(out.strip(b"\0"))
    files = [m for m in manifest if m[1] != "link"]
    root = snap.synced.origin if snap.synced is not None else snap.root
    return {"root": root, "git": snap.git, "commit": commit, "dirty": dirty, "script": snap.script,
            "cwd": snap.cwd, "files": len(files), "bytes": size, "manifest": manifest}


def take(snap: Snapshot, folder: Path, git: Git, limit: int) -> dict:
    """The snapshot, copied into `folder`/code and described in `folder`/snapshot.json.
    The caller removes `folder` on failure (scheduler.submit: nothing half-written)."""
    entries = list_entries(snap, git, limit, str(folder.parent.parent))
    try:
        manifest = copy(snap, entries, folder / CODE_DIR)
    except OSError as exc:  # the job folder's side: a full disk, a quota
        raise SubmitError(f"snapshot failed: cannot write {exc.filename or folder}: {exc.strerror or exc}",
                          tip=snapshot.TIP) from None
    record = describe(snap, git, manifest, sum(e.size for e in entries))
    fd = os.open(folder / SNAPSHOT, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    return record


def read_record(folder: Path) -> dict | None:
    """A job's snapshot.json (an array task's: its array job's), or None: it ran in place."""
    path = folder / SNAPSHOT
    if not path.exists() and folder.name.startswith("trial-"):
        path = folder.parent / SNAPSHOT
    try:
        record = json.loads(path.read_text(encoding="utf-8", errors="surrogateescape"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
