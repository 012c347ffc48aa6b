"""A job's record: one append-only file of events in its folder, a JSON object a line.

Every side that knows something of a job's life writes it here as it happens: the
submitting side (`submitted`), the batch script (`started` at each start of the batch
script, `ended` with its exit code), the restart supervisor (`launched` for each start
of the step, `restarting` with the failed start's cause and what follows), whoever requeues
the job (`requeued`: a preempted rank 0, the supervisor, the watcher), and a front end that
sees Slurm's final word on it (`settled`: state, exit code, elapsed, nodes) or removes its
folder (`cleaned`). Front ends tell a job's story by folding these (`submit.jobfolder.story`),
never by piecing it together from other files.

Written so that nothing can corrupt what is read back: each event is one `write()` of one
line of at most MAX_LINE bytes to a file opened O_APPEND (POSIX appends of that size by
one write land whole and in order on a local file system; on NFS a torn line is possible,
and is skipped), never through a link, the line built here whatever the values hold. Read
bounded (a regular file, at most MAX_BYTES: the newest events win), each line parsed on its
own: a torn line, a line of another version or kind, a value of the wrong type is skipped.
Pure but for `append` and `read`; both sides import it, it imports neither.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slurmtorch import readback

VERSION = 1
FILE = "events.jsonl"
MAX_LINE = 4000  # bytes, newline included: under PIPE_BUF (4096), one write lands whole
MAX_BYTES = 4 * 1024 * 1024  # read: the newest this many bytes (a job with thousands of restarts)
_TEXT_MAX = 1000  # characters of one text value; a longer one is cut, marked

# The kinds, and the fields each may carry (name -> type). A field of another type, or a field
# not listed, is dropped on reading: a line written by a newer slurmtorch still reads.
KINDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "submitted": {"job": str, "name": str, "nodes": int, "ntasks": int, "launcher": str, "command": str,
                  "workdir": str, "max_restarts": int, "spare_nodes": int, "by": str},
    "started": {"attempt": int, "nodes": str, "host": str},
    "launched": {"start": int, "nodes": list},
    "restarting": {"start": int, "cause": str, "action": str, "nodes": list, "excluded": list},
    "requeued": {"by": str, "why": str, "excluded": list, "attempt": int},
    "ended": {"attempt": int, "code": int},
    "settled": {"state": str, "code": (int, type(None)), "elapsed": (int, float, type(None)), "nodes": str,
                "started": (int, float, type(None)), "ended": (int, float, type(None))},
    "cleaned": {"freed": int},
}


@dataclass(frozen=True)
class Event:
    """One line of the record: its kind, when (seconds since the epoch), its fields."""

    kind: str
    at: float
    fields: Mapping[str, object] = field(default_factory=dict)

    def get(self, name: str, default=None):
        return self.fields.get(name, default)


def line(kind: str, fields: Mapping[str, object], at: float | None = None) -> bytes:
    """The event as its line (pure): versioned, its text values cut to fit MAX_LINE."""
    if kind not in KINDS:
        raise ValueError(f"not an event kind: {kind!r}")
    record = {"v": VERSION, "t": round(time.time() if at is None else at, 3), "ev": kind,
              **{k: _cut(v) for k, v in fields.items() if v is not None}}
    data = json.dumps(record, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"
    while len(data) > MAX_LINE:  # lists of many nodes: keep the head, say how many more
        name = max((k for k in record if k not in ("v", "t", "ev")), key=lambda k: len(json.dumps(record[k])))
        record[name] = _shrink(record[name])
        data = json.dumps(record, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"
    return data


def _cut(value: object) -> object:
    if isinstance(value, str) and len(value) > _TEXT_MAX:
        return value[:_TEXT_MAX] + "..."
    if isinstance(value, (list, tuple)):
        return [_cut(v) for v in value]
    return value


def _shrink(value: object) -> object:
    if isinstance(value, list) and len(value) > 1:
        return value[: len(value) // 2] + [f"... {len(value) - len(value) // 2} more"]
    if isinstance(value, str) and len(value) > 20:
        return value[: len(value) // 2] + "..."
    return None


def append(folder: str | os.PathLike, kind: str, **fields: object) -> bool:
    """Append one event to `folder`'s record; False (and nothing written) when it cannot be:
    the record is another kind of file or a link, the folder is gone. Never raises for an
    OSError: a job goes on whether or not its story could be noted."""
    data = line(kind, fields)
    try:
        fd = os.open(os.path.join(folder, FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return os.write(fd, data) == len(data)
    except OSError:
        return False
    finally:
        os.close(fd)


def parse(data: bytes) -> list[Event]:
    """Every well-formed event of this version in `data`, in order (pure)."""
    events = []
    for raw in data.split(b"\n"):
        event = _event(raw)
        if event is not None:
            events.append(event)
    return events


def _event(raw: bytes) -> Event | None:
    try:
        record = json.loads(raw)
    except ValueError:  # a torn line, a foreign one
        return None
    if not isinstance(record, dict) or record.get("v") != VERSION:
        return None
    kind, at = record.get("ev"), record.get("t")
    if kind not in KINDS or isinstance(at, bool) or not isinstance(at, (int, float)):
        return None
    types = KINDS[kind]
    fields = {k: v for k, v in record.items()
              if k in types and _fits(v, types[k])}
    return Event(kind, float(at), fields)


def _fits(value: object, kind) -> bool:
    if isinstance(value, bool):  # JSON's true is no count
        return False
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** 15:
        return False
    return isinstance(value, kind)


def read(folder: str | os.PathLike) -> list[Event]:
    """The record of the job in `folder` (its newest MAX_BYTES): [] when it has none, or it is
    not a plain file reached without a link."""
    try:
        data = readback.read_bytes(Path(folder) / FILE, MAX_BYTES, below=Path(folder), cut="tail")
    except readback.NotRead:
        return []
    if data is None:
        return []
    if len(data) == MAX_BYTES:  # cut: its first line most likely in half
        data = data.partition(b"\n")[2]
    return parse(data)
