"""A job's snapshot of its code: which tree, which files, and where the job finds them.

`slurmtorch sbatch` copies the code at submission into the job's folder (`code/`), and the
job, its restarts and its requeues run that copy: an edit made while the job waits in the
queue, or before a requeue, no longer changes what it runs (submitit's SnapshotManager,
TorchX's workspaces and NeMo-Run's packagers do the same). The tree is the git work tree
holding the script, found as git finds it (the nearest `.git` above), whose tracked and
untracked-but-not-ignored files are taken (git's own listing, so what `.gitignore` keeps
out, secrets and data, stays out; a repository inside the tree by its own rules and the
tree's: codecopy.Nested); outside git, the script's folder (one too big to copy: its Python
code, codecopy._folder_entries). The job runs the copy, but its ranks start in the folder
it was submitted from (each array task in `trials/<its parameters>/` below it), where its
relative files go (docs/users-guide.md#where-a-job-runs). Pure: the listing and the copy
are `codecopy`'s, the git calls the scheduler edge's.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from slurmtorch.errors import SpecError, SubmitError
from slurmtorch.submit.jobfolder.trialfolders import is_trial_folder

SETTING = "SLURMTORCH_SNAPSHOT"  # off (0, no, false): run in place unless --snapshot is given
LIMIT_SETTING = "SLURMTORCH_SNAPSHOT_MAX_MB"
DEFAULT_LIMIT_MB = 100
MAX_FILES = 20_000
_OFF, _ON = ("0", "off", "no", "false"), ("1", "on", "yes", "true")
# Never code, and rewritten by any run: a folder's walk (no .gitignore there) leaves them out.
SKIPPED_IN_FOLDERS = ("__pycache__", ".git")
TIP = "--no-snapshot runs the code in place; or keep big or private files out of the tree (.gitignore)"
# What a run writes rather than code, named when git does not track it (`outputs_line`): a
# checkpoint or weights by its suffix (torch's .pt/.pth, Lightning's .ckpt, safetensors,
# Hugging Face's and DeepSpeed's .bin, Keras' .h5, ONNX), and any file over BIG_FILE. 1 MiB: no
# source file a person writes is that big (torch's largest Python file, a generated test table,
# is 1.3 MB), while a small model's checkpoint already is; each is copied into every later job.
OUTPUT_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors", ".bin", ".h5", ".onnx")
BIG_FILE = 1 << 20
NAMED_OUTPUTS = 3


@dataclass(frozen=True)
class Synced:
    """A tree a laptop sent to this cluster (remote.sync): exactly the files its snapshot
    takes there, each with the hash it had on the laptop, and what git said of it there."""

    files: tuple[tuple[str, str], ...]  # (path, sha256)
    links: tuple[tuple[str, str], ...]  # (path, target as the copy has it)
    commit: str | None
    dirty: bool | None
    origin: str  # the tree on the laptop, host:path


@dataclass(frozen=True)
class Snapshot:
    """Where a job's code comes from and where it runs inside the copy."""

    root: str  # the tree copied: the git work tree holding the script (or the cwd, for -m), else its folder
    git: bool
    script: str | None  # the script inside the tree, '/'-separated; None for -m MODULE
    cwd: str | None  # the submission folder inside the tree ('' the root); None: outside it, the job runs there
    synced: Synced | None = None  # a laptop's tree, sent with `--cluster`: its files are the record's


@dataclass(frozen=True)
class Entry:
    """One thing the snapshot copies: a file (its size and exec bit) or a link (its target, as the copy has it)."""

    path: str  # inside the tree, '/'-separated
    kind: str  # "file" | "link"
    size: int = 0
    executable: bool = False
    target: str = ""


# --------------------------------------------------------------------------- the setting


def wanted(flag: bool | None, environ: Mapping[str, str]) -> bool:
    """--snapshot/--no-snapshot as given, else $SLURMTORCH_SNAPSHOT (a site's module file or
    the user's shell may set it off), else on."""
    if flag is not None:
        return flag
    value = environ.get(SETTING, "").strip().lower()
    if value in _OFF:
        return False
    if value and value not in _ON:
        raise SpecError(f"{SETTING}={environ[SETTING]!r} is neither on nor off", tip=f"set {SETTING}=on or off")
    return True


def limit_bytes(environ: Mapping[str, str]) -> int:
    """The most a snapshot may hold: $SLURMTORCH_SNAPSHOT_MAX_MB MiB, default 100."""
    text = environ.get(LIMIT_SETTING, "").strip()
    if not text:
        return DEFAULT_LIMIT_MB << 20
    if not text.isdigit() or int(text) < 1:
        raise SpecError(f"{LIMIT_SETTING}={text!r} is not a number of MiB", tip=f"e.g. {LIMIT_SETTING}=500")
    return int(text) << 20


# --------------------------------------------------------------------------- which tree


def git_root(start: str, exists: Callable[[str], bool] = os.path.lexists) -> str | None:
    """The work tree holding `start`: the nearest folder above it with a `.git` (a folder, or
    the file a worktree or submodule has), as git looks for it."""
    folder = start
    while True:
        if exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def inside(path: str, root: str) -> str | None:
    """`path` relative to `root`, '/'-separated ('' for the root itself), or None outside it."""
    if path == root:
        return ""
    prefix = root.rstrip(os.sep) + os.sep
    return path[len(prefix):].replace(os.sep, "/") if path.startswith(prefix) else None


def under(path: str, folder: str) -> bool:
    """Whether the '/'-separated `path` is `folder` or inside it ('' holds everything)."""
    return not folder or path == folder or path.startswith(folder + "/")


def locate(script: str | None, module: str | None, cwd: str,
           exists: Callable[[str], bool] = os.path.lexists) -> Snapshot | None:
    """The tree to copy for SCRIPT (absolute) or -m MODULE, submitted from `cwd`.

    SCRIPT: its git work tree, else its folder. -m MODULE: `python -m` imports from the
    working folder first, so its git work tree; outside git, the working folder only when
    the module's package or file is there (else it is an installed module: None, nothing
    of the user's to copy, and the job runs in place).
    """
    if script is not None:
        root = git_root(os.path.dirname(script), exists)
        folder = root or os.path.dirname(script)
        rel = inside(script, folder)
        return Snapshot(root=folder, git=root is not None, script=rel, cwd=inside(cwd, folder))
    root = git_root(cwd, exists)
    if root is not None:
        return Snapshot(root=root, git=True, script=None, cwd=inside(cwd, root))
    top = (module or "").split(".")[0]
    if top and (exists(os.path.join(cwd, top)) or exists(os.path.join(cwd, top + ".py"))):
        return Snapshot(root=cwd, git=False, script=None, cwd="")
    return None


def from_sync(record: Mapping, script: str | None, cwd: str) -> Snapshot:
    """The snapshot of a tree a laptop synced here (`record`: remote.sync's), for SCRIPT
    (absolute) or -m MODULE submitted from `cwd`, both inside the synced copy."""
    root = str(record["mirror"])
    rel = inside(script, root) if script is not None else None
    if script is not None and rel is None:
        raise SpecError(f"{script} is not in the code synced from {record.get('root')}",
                        tip="with --cluster, the script must be inside the tree that is sent (its git work tree)")
    manifest = record.get("manifest") or []
    synced = Synced(files=tuple((str(m[0]), str(m[1])) for m in manifest if m[1] != "link"),
                    links=tuple((str(m[0]), str(m[2])) for m in manifest if m[1] == "link"),
                    commit=record.get("commit"), dirty=record.get("dirty"),
                    origin=str(record.get("origin") or record.get("root")))
    return Snapshot(root=root, git=bool(record.get("git")), script=rel, cwd=inside(cwd, root), synced=synced)


# --------------------------------------------------------------------------- which files


def git_paths(listing: bytes) -> list[str]:
    """`git ls-files -z` output as paths (bytes that are not UTF-8 kept, as os.fsdecode does),
    each once: a file both tracked and changed, or in a merge conflict, is listed again; a
    folder (an untracked repository inside the tree) without its trailing slash."""
    seen: dict[str, None] = {}
    for raw in listing.split(b"\0"):
        if raw.rstrip(b"/"):  # an untracked nested repository is listed as its folder, `vendor/x/`
            seen.setdefault(os.fsdecode(raw.rstrip(b"/")), None)
    return list(seen)


def in_trials(path: str) -> bool:
    """Whether the '/'-separated `path` is in a sweep trial's working folder (`trials/<its
    parameters>/`, which the job makes below the folder it runs in): what a trial wrote, never
    the code, and found where it is by the next trial of the same parameters (pure)."""
    parts = path.split("/")
    return any(parts[i] == "trials" and is_trial_folder(parts[i + 1]) for i in range(len(parts) - 1))


def outputs_line(entries: Sequence[Entry], untracked: set[str]) -> str | None:
    """One line naming the files git does not track that look written by a run (a checkpoint's
    suffix, or over BIG_FILE), the biggest first, which every later job would copy too; None
    where there are none (pure)."""
    found = sorted((e for e in entries if e.kind == "file" and e.path in untracked
                    and (e.size > BIG_FILE or e.path.lower().endswith(OUTPUT_SUFFIXES))),
                   key=lambda e: (-e.size, e.path))
    if not found:
        return None
    named = ", ".join(f"{e.path} ({mib(e.size)})" for e in found[:NAMED_OUTPUTS])
    more = f" and {len(found) - NAMED_OUTPUTS} more" if len(found) > NAMED_OUTPUTS else ""
    many = len(found) > 1
    what, them = (f"{len(found)} untracked files look", "them") if many else ("an untracked file looks", "it")
    return (f"slurmtorch: snapshot: {what} like a run's output, not code, and each job copies {them} "
            f"({mib(sum(e.size for e in found))}): {named}{more}; add {them} to .gitignore, "
            "or --no-snapshot runs the code in place")


def entry(path: str, st: os.stat_result | None, target: str = "") -> Entry | None:
    """What to copy for `path` given its lstat (None: gone, a tracked file deleted since the
    last commit): a file, a link (its target as the copy gets it), or nothing (a fifo,
    a socket, a device: not code, and a fifo would block the copy)."""
    if st is None:
        return None
    if stat.S_ISLNK(st.st_mode):
        return Entry(path, "link", target=target)
    if stat.S_ISREG(st.st_mode):
        return Entry(path, "file", size=st.st_size, executable=bool(st.st_mode & stat.S_IXUSR))
    return None


def link_target(path: str, target: str, root: str) -> str:
    """A link's target in the copy: as it is, unless it is relative and leads out of the tree,
    where from the copy it would lead somewhere else; then the absolute place it led to.
    The link is copied, never followed: what lies outside the tree is not copied."""
    if posixpath.isabs(target):
        return target
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if resolved == ".." or resolved.startswith("../"):
        return os.path.normpath(os.path.join(root, os.path.dirname(path), target))
    return target


def over_limit(entries: Sequence[Entry], limit: int) -> bool:
    """Whether `entries` are more than a snapshot may hold: `limit` bytes or MAX_FILES files."""
    return sum(e.size for e in entries) > limit or len(entries) > MAX_FILES


def check_size(entries: Sequence[Entry], root: str, limit: int) -> None:
    """Refuse a tree over `limit` bytes or MAX_FILES files, naming the biggest file."""
    total = sum(e.size for e in entries)
    if total > limit:
        big = max(entries, key=lambda e: e.size)
        raise SubmitError(f"snapshot refused: {root} holds {mib(total)} to copy, over the {mib(limit)} limit "
                          f"(largest: {big.path}, {mib(big.size)})",
                          tip=f"{TIP}, or raise {LIMIT_SETTING}")
    if len(entries) > MAX_FILES:
        too_many(root)


def too_many(root: str) -> None:
    raise SubmitError(f"snapshot refused: {root} holds more than {MAX_FILES} files to copy", tip=TIP)


def mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


# --------------------------------------------------------------------------- what status says


def summary(record: Mapping | None) -> str:
    """`status`'s word for what the job ran (snapshot.json's record; None: in place), in the
    style of `git describe --dirty`: code=3f2c1a9e0b1d, code=3f2c1a9e0b1d-dirty,
    code=uncommitted (a git tree without a commit), code=folder (not git), code=in-place."""
    if not record:
        return "code=in-place"
    if not record.get("git"):
        return "code=folder"
    what = str(record["commit"])[:12] if record.get("commit") else "uncommitted"
    return f"code={what}-dirty" if record.get("dirty") and record.get("commit") else f"code={what}"


def origin(record: Mapping | None) -> str:
    """The user's tree the job's copy of its code came from, as a path their editor opens:
    snapshot.json's root; a laptop's (`host:path`, sent with --cluster) without its host.
    '' for a job that ran in place (no record)."""
    root = str((record or {}).get("root") or "")
    return root if root.startswith("/") else root.partition(":")[2]
