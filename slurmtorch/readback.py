"""Reading back what a job wrote, bounded: every file in a job folder (a log, a rank's sample,
a record, a dump) is opened here, by the login node's verbs and by a rank reading its peers'.

A job writes its folder as the user, and what it leaves there is data: a FIFO (a read waits
for a writer that never comes), a link to /dev/zero (a read that never ends) or to a file
outside the folder, a log of many GiB (a print in a loop). So a file is read only when it
is a plain file reached without a symbolic link below the folder the caller names (`below`:
a job folder that `jobdir.checked` judged; by default the file's own folder). Its lstat is
looked at before it is opened, so a FIFO is never opened (opening one releases a writer
blocked on it), and the open refuses a link (O_NOFOLLOW) and never waits (O_NONBLOCK). At
most the cap of its kind is read (a log: its end); bytes that are not UTF-8 are replaced.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import BinaryIO

# The caps, by kind of file.
SAMPLE = 64 << 10  # a rank's live sample, heartbeat, exit note, alive line; the exit code: a line each
RECORD = 16 << 20  # a record slurmtorch wrote there: job.json, trials.json, restarts.json, chain.json, snapshot.json
LOG_TAIL = 1 << 20  # the end of a log, read for its failure or its last line: a traceback is a few KiB
LOG_LINES = 64 << 20  # how far back a log's last N lines are looked for (`logs --tail`), and Job.logs() at most
STACKS = 16 << 20  # a rank's stacks, its native frames (py-spy's JSON of every thread)
CHUNK = 1 << 20  # a log copied to the terminal: this much at a time

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"),
          (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


class NotRead(Exception):
    """Why a file a job wrote was not read, as one short phrase: `not a plain file (a FIFO)`,
    `over 64 KiB`, `unreadable (Permission denied)`."""


def size_said(cap: int) -> str:
    return f"{cap >> 20} MiB" if cap >= 1 << 20 else f"{cap >> 10} KiB"


def _kind(st: os.stat_result) -> str:
    return next((said for test, said in _KINDS if test(st.st_mode)), "not a file")


def _not_plain(st: os.stat_result) -> str | None:
    return None if stat.S_ISREG(st.st_mode) else f"not a plain file ({_kind(st)})"


def _open_fd(path: Path, below: Path | None) -> int:
    """An fd for reading `path`: a plain file whose every level below `below` is a real
    folder. FileNotFoundError when it is not there; else NotRead."""
    base = path.parent if below is None else below
    names = path.relative_to(base).parts
    folder = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in names[:-1]:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                raise NotRead(f"{name}/ is not a folder ({'a plain file' if stat.S_ISREG(st.st_mode) else _kind(st)})")
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
            os.close(folder)
            folder = inner
        why = _not_plain(os.stat(names[-1], dir_fd=folder, follow_symlinks=False))
        if why:
            raise NotRead(why)
        fd = os.open(names[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    finally:
        os.close(folder)
    why = _not_plain(os.fstat(fd))  # swapped for something else since its lstat
    if why:
        os.close(fd)
        raise NotRead(why)
    return fd


def open_plain(path: Path, below: Path | None = None) -> BinaryIO:
    """`path` open for reading (binary), a plain file reached without a link below `below`;
    FileNotFoundError when it (or a level above it) is not there, else NotRead."""
    try:
        return os.fdopen(_open_fd(Path(path), below), "rb")
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link put there since its lstat
            raise NotRead("not a plain file (a symbolic link)") from None
        raise NotRead(f"unreadable ({exc.strerror or exc})") from None


def read_bytes(path: Path, cap: int, *, below: Path | None = None, cut: str | None = None) -> bytes | None:
    """A job's file, whole, or None when it is not there. Over `cap` bytes: NotRead, or with
    `cut` its first (`head`) or last (`tail`: a log's end) `cap` bytes. NotRead for anything
    but a plain file."""
    try:
        f = open_plain(path, below)
    except FileNotFoundError:
        return None
    with f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > cap and cut is None:
                raise NotRead(f"over {size_said(cap)}")
            if size > cap and cut == "tail":
                f.seek(size - cap)
            return f.read(cap)
        except OSError as exc:
            raise NotRead(f"unreadable ({exc.strerror or exc})") from None


def read_text(path: Path, cap: int, *, below: Path | None = None, cut: str | None = None) -> str | None:
    """`read_bytes` as text, what is not UTF-8 replaced."""
    data = read_bytes(path, cap, below=below, cut=cut)
    return None if data is None else data.decode("utf-8", errors="replace")


def text_or_empty(path: Path, cap: int, *, below: Path | None = None, cut: str | None = "tail") -> str:
    """A log's text (its last `cap` bytes; `cut=None`: '' over `cap`), '' when there is none
    to read: not there (yet), or not a plain file. What parses it finds nothing in ''."""
    try:
        return read_text(path, cap, below=below, cut=cut) or ""
    except NotRead:
        return ""


_NUMBER_RE = re.compile(r"[0-9]{1,18}")


def numbered(name: str, prefix: str, suffix: str = "") -> int | None:
    """N of a file a job named `<prefix>N<suffix>` (rank-3.err), or None: N is ASCII digits,
    and few (`rank-²3.err` passes str.isdigit(), which int() then refuses)."""
    if not name.startswith(prefix) or not name.endswith(suffix):
        return None
    middle = name[len(prefix):len(name) - len(suffix)]
    return int(middle) if _NUMBER_RE.fullmatch(middle) else None
