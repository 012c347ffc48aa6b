"""The laptop's edge of a pull: the staging folder, what lies in it and in the laptop's tree,
and a plan (`pullplan`) carried out.

rsync writes the job's files into a private staging folder inside the destination (the same
file system, so placing a file is a rename), never into the laptop's tree itself. The staging
folder is removed whatever happens: an error, Ctrl-C, TERM or HUP (`staging`); nothing half
written is left. A new file is placed without ever replacing one (a hard link, which fails
where a name exists, then the staged name removed); where the destination's folder is on
another file system (the user's link to a big disk), the file is copied beside its place
first and renamed there.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from slurmtorch.errors import ClusterError
from slurmtorch.remote.ledger import Placed
from slurmtorch.remote.pullplan import DIR, DIRLINK, FILE, LINK, MISSING, OTHER, Here, Plan, Staged, needs_hash
from slurmtorch.submit import interrupts

STAGING_PREFIX = ".slurmtorch-pull-"
_NO_HARD_LINK = (errno.EXDEV, errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS)


@contextmanager
def staging(dest: str) -> Iterator[str]:
    """A private (0700) folder in `dest`, removed at the end whatever happens; TERM and HUP
    end the pull as Ctrl-C does (`interrupts.stops_as_interrupts`), through this removal."""
    with interrupts.stops_as_interrupts():
        try:
            stage = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=dest)
        except OSError as exc:
            raise ClusterError(f"cannot write into {dest}: {exc.strerror or exc}",
                               tip="pull into a folder of yours: --to DIR") from None
        try:
            yield stage
        finally:
            remove(stage)


def remove(folder: str) -> None:
    """`folder` and all in it (rsync made its folders 0700 and its files u+rw: all removable)."""
    shutil.rmtree(folder, ignore_errors=True)
    if os.path.lexists(folder):  # an entry that came while it was emptied
        shutil.rmtree(folder, ignore_errors=True)


def staged_entries(stage: str) -> list[Staged]:
    """What rsync left in the staging folder: folders and plain files (it makes nothing else:
    no -l, no -D), each file hashed."""
    out: list[Staged] = []
    todo = [""]
    while todo:
        rel = todo.pop()
        with os.scandir(os.path.join(stage, rel) if rel else stage) as entries:
            for e in entries:
                path = f"{rel}/{e.name}" if rel else e.name
                st = e.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    out.append(Staged(path, DIR))
                    todo.append(path)
                elif stat.S_ISREG(st.st_mode):
                    out.append(Staged(path, FILE, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode),
                                      sha256(e.path)))
    return out


def laptop_entries(dest: str, staged: Sequence[Staged], ledger: Mapping[str, Placed]) -> dict[str, Here]:
    """The laptop's entry at each staged path (its folders' links followed, as the kernel
    does; the entry itself not), a file hashed only where that decides something."""
    out: dict[str, Here] = {}
    for s in staged:
        full = os.path.join(dest, s.path)
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            out[s.path] = Here(MISSING)  # under a laptop file or link: the plan keeps that one
            continue
        except OSError:
            out[s.path] = Here(OTHER)
            continue
        if stat.S_ISLNK(st.st_mode):
            target = _readlink(full)
            out[s.path] = Here(DIRLINK if os.path.isdir(full) else LINK, target=target)
        elif stat.S_ISDIR(st.st_mode):
            out[s.path] = Here(DIR)
        elif stat.S_ISREG(st.st_mode):
            digest = ""
            if s.kind == FILE and needs_hash(s, st.st_size, st.st_mtime_ns, ledger.get(s.path)):
                try:
                    digest = sha256(full)
                except OSError:  # unreadable here: not the same, not as placed; kept
                    pass
            out[s.path] = Here(FILE, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), digest)
        else:
            out[s.path] = Here(OTHER)
    return out


def apply(plan: Plan, stage: str, dest: str) -> dict[str, Placed]:
    """Carry the plan out; what was placed, as it now lies here (for the ledger). A failure
    is one line naming the file; what was placed before it stays placed."""
    done: dict[str, Placed] = {}
    for step in plan.steps:
        target = os.path.join(dest, step.path)
        try:
            if step.action == "mkdir":
                os.mkdir(target, step.mode)
                continue
            source = os.path.join(stage, step.path)
            os.chmod(source, step.mode)
            _place(source, target, replace=step.action == "replace")
            st = os.lstat(target)
        except OSError as exc:
            raise ClusterError(f"placing {target} failed: {exc.strerror or exc}; "
                               f"{len(done)} file{'' if len(done) == 1 else 's'} placed before it",
                               tip="pull again once it is fixed: what is placed already is not sent again") from None
        done[step.path] = Placed(st.st_size, st.st_mtime_ns, step.sha256)
    return done


def _place(source: str, target: str, replace: bool) -> None:
    if not replace:
        try:
            os.link(source, target)  # fails where the name exists: never over a file
            os.unlink(source)
            return
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINK:
                raise
    moved = source if _same_fs(source, target) else _beside(source, target)
    try:
        if not replace and os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "made meanwhile", target)
        os.replace(moved, target)
    except BaseException:
        if moved != source:
            os.unlink(moved)
        raise


def _beside(source: str, target: str) -> str:
    """A copy of `source` (data, mode and times) in `target`'s folder, under a temporary name."""
    fd, tmp = tempfile.mkstemp(prefix=STAGING_PREFIX, dir=os.path.dirname(target))
    os.close(fd)
    try:
        shutil.copy2(source, tmp)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _same_fs(a: str, b: str) -> bool:
    return os.stat(a).st_dev == os.stat(os.path.dirname(b)).st_dev


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"
