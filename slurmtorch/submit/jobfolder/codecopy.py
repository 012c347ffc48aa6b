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
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from slurmtorch import readback
from slurmtorch.errors import SubmitError
from slurmtorch.protocol import CODE_DIR, SNAPSHOT
from slurmtorch.submit.jobfolder import snapshot
from slurmtorch.submit.jobfolder.snapshot import Entry, Snapshot

# git(folder, *args) -> (exit code, stdout bytes, stderr's last line): the scheduler edge's `git`.
Git = Callable[..., "tuple[int, bytes, str]"]
# git's listing in two: what it tracks, and what it does not track nor ignore (`outputs_line`).
_TRACKED = ("ls-files", "--cached", "-z")
_UNTRACKED = ("ls-files", "--others", "--exclude-standard", "-z")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Nested:
    """A git repository inside the tree (a submodule, or a clone git does not track), whose
    files are taken as its own .gitignore and every enclosing tree's say: `left_out` of the
    files it lists, a .gitignore from the tree's top down ignores (the tree's `secret.txt`; its
    own `*.tmp`, even where it tracks one by force). The strict reading, for secrets' sake."""

    path: str
    kind: str  # "submodule" (its .git a file) | "clone"
    left_out: int


def nested_lines(nested: list[Nested]) -> list[str]:
    """What the listing says of each repository inside the tree (pure)."""
    return [f"slurmtorch: snapshot: {n.path} is a git repository of its own ({n.kind}): taken as its own .gitignore "
            f"and the tree's say" + (f"; {n.left_out} file{'s' if n.left_out > 1 else ''} they ignore left out"
                                     if n.left_out else "")
            for n in nested]


def list_entries(snap: Snapshot, git: Git, limit: int, home: str, nested: list[Nested] | None = None,
                 notes: list[str] | None = None) -> list[Entry]:
    """What the snapshot copies, checked against the limit before anything is copied.
    Never slurmtorch's own home (job folders, earlier snapshots), should it be in the tree, nor
    sweep trials' working folders (snapshot.in_trials). `nested` gets the repositories inside
    the tree (`Nested`); `notes`, what the user should be told of what was taken (a folder
    outside git too big to copy whole: `_folder_entries`; untracked files that look like a
    run's output: snapshot.outputs_line)."""
    skip = snapshot.inside(home, snap.root)
    said: list[str] = [] if notes is None else notes
    if snap.synced is not None:
        entries = _synced_entries(snap)
    elif snap.git:
        untracked: set[str] = set()
        entries = _git_entries(snap.root, "", git, [] if nested is None else nested, untracked)
        outputs = snapshot.outputs_line(entries, untracked)
        said += [outputs] if outputs else []
    else:
        entries = _folder_entries(snap.root, home, limit, said)
    if skip is not None:
        entries = [e for e in entries if not snapshot.under(e.path, skip)]
    if snap.script is not None and snap.synced is None:
        entries += _named_script(snap.root, snap.script, {e.path for e in entries})
    snapshot.check_size(entries, snap.root, limit)
    return entries


def _named_script(root: str, script: str, listed: set[str]) -> list[Entry]:
    """What the copy needs beside `listed` for the script named on the command line to run:
    itself, even where .gitignore keeps it out (scratch/try.py); named through a linked
    folder (ld/s.py, ld -> d), the links on its way and the file where it really is, so the
    copy never writes a file through a link it made."""
    links = _links_on_the_way(root, script)
    wanted = [*links, real_script(root, script)] if links else [script]
    made = [_make_entry(root, rel, _lstat(os.path.join(root, rel))) for rel in wanted if rel not in listed]
    return [e for e in made if e is not None]


def _links_on_the_way(root: str, script: str) -> list[str]:
    """The folders on the way to `script` (inside `root`, '/'-separated) that are links."""
    return [p for p in _parents(script) if (st := _lstat(os.path.join(root, p))) and stat.S_ISLNK(st.st_mode)]


def real_script(root: str, script: str) -> str:
    """Where `script` (inside `root`) really is in the tree: itself unless a folder on its
    way is a link (ld/s.py, ld -> d: d/s.py); SubmitError where that is outside the tree."""
    links = _links_on_the_way(root, script)
    if not links:
        return script
    real = snapshot.inside(os.path.realpath(os.path.join(root, script)), os.path.realpath(root))
    if real is None:
        raise SubmitError(f"snapshot refused: the script {script} is reached through the link {links[0]}, which leads "
                          f"out of {root}: the copy would not hold it",
                          tip="name the script where it is, inside its own tree; or --no-snapshot runs it in place")
    return real


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


def _git_entries(root: str, prefix: str, git: Git, nested: list[Nested], untracked: set[str]) -> list[Entry]:
    """git's tracked and untracked-not-ignored files under `root` (those untracked also added to
    `untracked`), but a sweep trial's; a repository inside (a checked-out submodule or an
    untracked clone, listed as its folder) with its own files, less those this tree's rules
    ignore (`_ignored`); an empty (not checked-out) one with none."""
    folder = os.path.join(root, prefix) if prefix else root
    listings = []
    for args in (_TRACKED, _UNTRACKED):
        code, out, said = git(folder, *args)
        if code != 0:
            raise _unlisted(folder, code, said)
        listings.append([f"{prefix}/{rel}" if prefix else rel for rel in snapshot.git_paths(out)])
    untracked.update(listings[1])
    entries: list[Entry] = []
    for rel in dict.fromkeys(listings[0] + listings[1]):
        if snapshot.in_trials(rel):
            continue
        st = _lstat(os.path.join(root, rel))
        if st is not None and stat.S_ISDIR(st.st_mode):
            dot_git = os.path.join(root, rel, ".git")
            if os.path.lexists(dot_git):
                inner = _git_entries(root, rel, git, nested, untracked)
                ignored = _ignored(folder, prefix, [e.path for e in inner], git)
                entries += [e for e in inner if e.path not in ignored]
                nested.append(Nested(rel, "submodule" if os.path.isfile(dot_git) else "clone", len(ignored)))
            continue
        made = _make_entry(root, rel, st)
        if made is not None:
            entries.append(made)
        if len(entries) > snapshot.MAX_FILES:
            snapshot.too_many(root)
    return entries


def _ignored(folder: str, prefix: str, paths: list[str], git: Git) -> set[str]:
    """Which of `paths` (inside the repository at `folder`, itself `prefix` in the tree) its
    ignore rules match, though a repository inside it lists them: `check-ignore --no-index`
    reads the rules alone, every .gitignore on the way down included (with the index, git
    refuses a path inside a submodule)."""
    if not paths:
        return set()
    cut = len(prefix) + 1 if prefix else 0
    data = b"".join(os.fsencode(p[cut:]) + b"\0" for p in paths)
    code, out, said = git(folder, "check-ignore", "--no-index", "-z", "--stdin", input=data)
    if code not in (0, 1):  # 1: none of them ignored
        raise _unlisted(folder, code, said)
    return {f"{prefix}/{p}" if prefix else p for p in snapshot.git_paths(out)}


def _unlisted(folder: str, code: int, said: str) -> SubmitError:
    return SubmitError(f"snapshot failed: git could not list the files of {folder}: {said or f'exit {code}'}",
                       tip="run `git status` there; " + snapshot.TIP)


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


def _folder_entries(root: str, home: str, limit: int, notes: list[str]) -> list[Entry]:
    """A folder outside git: all of it; where that is more than a snapshot may hold (a data
    set, or a home folder, beside the script) or holds what we cannot read (another user's
    files in /tmp), its Python code only (`_code_entries`), said in one line: no .gitignore
    there says what is code, and refusing would fail the first run of a common layout. The
    ranks start in the submission folder, where the rest is."""
    entries, why = _walk_entries(root, home)
    if entries is not None:
        if not snapshot.over_limit(entries, limit):
            return entries
        why = f"{snapshot.mib(sum(e.size for e in entries))}, over the {snapshot.mib(limit)} limit"
    code = _code_entries(root, home)
    notes.append(f"slurmtorch: snapshot: {root} is not a git work tree and holds {why}: copied its Python code only "
                 f"({len(code)} .py files: those beside the script and its packages); the job reads anything else "
                 "where it is, relative to the folder it was submitted from")
    return code


def _walk_entries(root: str, home: str) -> tuple[list[Entry] | None, str]:
    """A folder outside git: everything in it but __pycache__, .git, slurmtorch's home and sweep
    trials' folders, links as links; or None and why not (more than a snapshot's MAX_FILES,
    something unreadable)."""
    entries: list[Entry] = []
    unreadable: list[str] = []
    for folder, dirs, files in os.walk(root, onerror=lambda exc: unreadable.append(exc.filename or root)):
        if unreadable:
            break
        dirs[:] = sorted(d for d in dirs if d not in snapshot.SKIPPED_IN_FOLDERS and os.path.join(folder, d) != home
                         and not snapshot.in_trials(os.path.relpath(os.path.join(folder, d), root).replace(os.sep, "/")))
        for name in [*(d for d in dirs if os.path.islink(os.path.join(folder, d))), *sorted(files)]:
            rel = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
            made = _make_entry(root, rel, _lstat(os.path.join(folder, name)))
            if made is not None and made.kind == "file" and not os.access(os.path.join(folder, name), os.R_OK):
                return None, f"a file it cannot read ({rel})"
            if made is not None:
                entries.append(made)
        if len(entries) > snapshot.MAX_FILES:
            return None, f"more than {snapshot.MAX_FILES} files"
    if unreadable:
        return None, f"a folder it cannot read ({unreadable[0]})"
    return entries, ""


def _code_entries(root: str, home: str) -> list[Entry]:
    """The Python code of a folder: its own .py files and its packages' (folders with an
    `__init__.py`, all the way down), as `import` beside the script finds them; never
    a folder's data, nor slurmtorch's home. Files only: a link could lead anywhere."""
    entries: list[Entry] = []
    for folder, dirs, files in os.walk(root, onerror=_refuse(root)):
        dirs[:] = sorted(d for d in dirs if d not in snapshot.SKIPPED_IN_FOLDERS and os.path.join(folder, d) != home
                         and os.path.isfile(os.path.join(folder, d, "__init__.py"))
                         and not os.path.islink(os.path.join(folder, d)))
        for name in sorted(f for f in files if f.endswith(".py")):
            rel = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
            made = snapshot.entry(rel, _lstat(os.path.join(folder, name)))
            if made is not None and made.kind == "file":
                entries.append(made)
        if len(entries) > snapshot.MAX_FILES:
            snapshot.too_many(root)
    return entries


def _refuse(root: str) -> Callable[[OSError], None]:
    def refuse(exc: OSError) -> None:
        raise _unreadable(exc.filename or root, exc)

    return refuse


def copy(snap: Snapshot, entries: list[Entry], dest: Path) -> list[list]:
    """Copy `entries` into `dest` (made here, private); returns the manifest [path, sha256, mode]."""
    manifest: list[list] = []
    sent = dict(snap.synced.files) if snap.synced is not None else {}
    links = {e.path for e in entries if e.kind == "link"}
    for e in entries:  # before anything is written: a file written there would land where the link leads
        through = next((p for p in _parents(e.path) if p in links), None)
        if through is not None:
            raise _through_link(snap, e.path, through)
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


def _parents(path: str) -> list[str]:
    """`a/b/c` -> `a`, `a/b` (pure)."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _through_link(snap: Snapshot, path: str, link: str) -> SubmitError:
    where = f" in the synced copy {snap.root}" if snap.synced is not None else ""
    return SubmitError(f"snapshot failed: {path}{where} is reached through the link {link}, which the copy holds as a link",
                       tip="name the file where it really is, not through a linked folder; " + snapshot.TIP)


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


def describe(snap: Snapshot, git: Git, manifest: list[list], size: int, nested: list[Nested] | None = None) -> dict:
    """snapshot.json's record: the tree, its commit and dirtiness (git), the files, and the
    repositories inside it (`Nested`)."""
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
            "cwd": snap.cwd, "files": len(files), "bytes": size, "nested": [asdict(n) for n in nested or ()],
            "manifest": manifest}


def take(snap: Snapshot, folder: Path, git: Git, limit: int) -> dict:
    """The snapshot, copied into `folder`/code and described in `folder`/snapshot.json.
    The caller removes `folder` on failure (sbatch.submit: nothing half-written)."""
    nested: list[Nested] = []
    notes: list[str] = []
    entries = list_entries(snap, git, limit, str(folder.parent.parent), nested, notes)
    for line in notes:
        print(line, file=sys.stderr)
    try:
        manifest = copy(snap, entries, folder / CODE_DIR)
    except OSError as exc:  # the job folder's side: a full disk, a quota
        raise SubmitError(f"snapshot failed: cannot write {exc.filename or folder}: {exc.strerror or exc}",
                          tip=snapshot.TIP) from None
    for line in nested_lines(nested):
        print(line, file=sys.stderr)
    record = describe(snap, git, manifest, sum(e.size for e in entries), nested)
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
        data = readback.read_bytes(path, readback.RECORD)
        record = None if data is None else json.loads(data.decode("utf-8", errors="surrogateescape"))
    except (readback.NotRead, ValueError):
        return None
    return record if isinstance(record, dict) else None
