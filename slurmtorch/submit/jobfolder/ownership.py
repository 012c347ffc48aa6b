"""Folders that hold what runs as this user: whose they are, and who else can write them.

A job folder holds script.sh, a run folder the pickled payload, a cache pickled sites and
compiled templates: whoever can swap any of them runs code as the user who submits. So a
folder slurmtorch writes such files into (SLURMTORCH_HOME, its jobs/ and distributor/,
its caches) must be this user's and writable by no one else, and every level above it
(each folder, each symbolic link, the levels a link leads through) must be this user's
or root's and, where others may write it, sticky: in a sticky folder (/tmp) only an
entry's owner may rename or remove it. A shared folder another user made first (/tmp/x,
shared scratch) fails the check instead of being used. What is missing is made here,
0700, one level at a time and only under levels already checked. sshd's StrictModes
checks the same chain for authorized_keys.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

from slurmtorch import shell
from slurmtorch.errors import ShellSafetyError, SubmitError

_MAX_LINKS = 40  # as the kernel's ELOOP limit
NOT_A_FOLDER = "is not a folder"


def secure_folder(folder: Path, top: Path, label: str = "SLURMTORCH_HOME", make: bool = True) -> None:
    """Make `folder` (at or below `top`) and whatever is missing above it, privately; refuse
    (SubmitError: why, and the fix) a level from `top` down that is not this user's or that
    anyone else can write, or a level above `top` that another user could rename.

    `label` names `top` in the message (SLURMTORCH_HOME, a cache folder). Without `make`
    (a verb that reads a job folder, or writes into one made already), nothing is made: the
    levels there are checked, and the check ends where one is missing."""
    folder, top = Path(os.path.abspath(folder)), Path(os.path.abspath(top))
    uid = os.geteuid()
    own = _own_levels(folder, top)
    for path, st in _levels(folder, make):
        why = level_problem(st, uid, own=str(path) in own)
        if why == NOT_A_FOLDER:
            raise SubmitError(f"{path} ({_where(path, top, own, label)}) {why}",
                              tip=f"remove it, or set {label} to a folder of your own")
        if why:
            raise SubmitError(f"{path} ({_where(path, top, own, label)}) {why}: another user could swap "
                              "the scripts and payloads slurmtorch keeps there, which run as you",
                              tip=_fix(path, st, uid, own=str(path) in own, label=label))


def level_problem(st: os.stat_result, uid: int, own: bool) -> str | None:
    """Why a level with this lstat is unsafe, or None (pure). `own`: a level slurmtorch
    writes into (it must be this user's and writable by no one else); else a level above."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):  # its own mode means nothing; whoever owns it can repoint it
        return None if st.st_uid in (uid, 0) else f"is a symbolic link owned by {_user(st.st_uid)}"
    if not stat.S_ISDIR(mode):
        return NOT_A_FOLDER
    if own:
        if st.st_uid != uid:
            return f"belongs to {_user(st.st_uid)}, not to you"
        if mode & 0o022:
            return f"is writable by {'anyone' if mode & 0o002 else 'its group'} (mode {stat.S_IMODE(mode):04o})"
        return None
    if st.st_uid not in (uid, 0):
        return f"belongs to {_user(st.st_uid)}, who can rename what is in it"
    if mode & 0o022 and not mode & stat.S_ISVTX:
        return (f"is writable by {'anyone' if mode & 0o002 else 'its group'} and not sticky "
                f"(mode {stat.S_IMODE(mode):04o}), so they can rename what is in it")
    return None


def cache_folder(name: str) -> Path | None:
    """$XDG_CACHE_HOME/slurmtorch/NAME (default ~/.cache), checked and made as above; None
    when it is unsafe or cannot be made (a cache is never worth failing a run for)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    where = Path(base) / "slurmtorch" / name
    try:
        secure_folder(where, where.parent, label="slurmtorch's cache")
    except (OSError, SubmitError):
        return None
    return where


def _own_levels(folder: Path, top: Path) -> set[str]:
    """The real folders that `top` and each level below it down to `folder` name (a level
    may be a link to a folder elsewhere: the folder it leads to is the one written into)."""
    levels = [folder, *folder.parents]
    if top not in levels:
        raise ValueError(f"{folder} is not in {top}")
    return {os.path.realpath(p) for p in levels[:levels.index(top) + 1]}


def _levels(path: Path, make: bool = True) -> Iterator[tuple[Path, os.stat_result]]:
    """Every level the kernel goes through to reach `path` (absolute), with its lstat:
    each folder, each symbolic link, and the levels each link's target goes through.
    A missing folder is made (0700) before it is yielded (without `make`, the walk ends
    there); the caller checks each level before the next is looked at, so nothing is
    made under a level that failed."""
    names = list(reversed(path.parts[1:]))  # a stack: a link pushes its target's names
    here = Path("/")
    yield here, os.lstat(here)
    links = 0
    while names:
        name = names.pop()
        if name in ("", "."):
            continue
        if name == "..":
            here = here.parent  # `here` is always a real folder, so its parent is too
            continue
        step = here / name
        try:
            st = os.lstat(step)
        except FileNotFoundError:
            if not make:
                return
            _make(step)
            st = os.lstat(step)
        yield step, st
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > _MAX_LINKS:
                raise OSError(errno.ELOOP, "too many levels of symbolic links", str(path))
            target = Path(os.readlink(step))
            if target.is_absolute():
                here = Path("/")
                yield here, os.lstat(here)
            names.extend(reversed(target.parts[1:] if target.is_absolute() else target.parts))
        else:
            here = step


def _make(path: Path) -> None:
    """A missing level: 0700 whatever the umask (mkdir's mode is masked by it)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return  # made meanwhile by someone else: the check that follows judges it
    os.chmod(path, 0o700)


def _where(path: Path, top: Path, own: set[str], label: str) -> str:
    if path == top:
        return label
    return f"in {label} {top}" if str(path) in own else f"on the way to {label} {top}"


def _fix(path: Path, st: os.stat_result, uid: int, own: bool, label: str) -> str:
    if st.st_uid == uid and stat.S_ISDIR(st.st_mode):
        return f"chmod go-w {_q(path)}" if own else f"chmod go-w {_q(path)} (or +t), or set {label} to a folder of your own"
    return (f"set {label} to a folder of your own whose every level above is yours or root's "
            "(the default, ~/.slurmtorch, usually is)")


def _q(path: Path) -> str:
    try:
        return shell.quote(path)
    except ShellSafetyError:  # not UTF-8: shown, not for pasting
        return repr(str(path))


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"
