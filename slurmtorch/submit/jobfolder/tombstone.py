"""What `slurmtorch clean` leaves of a job folder: its record alone, with a `cleaned` event.

A removed folder would leave `status JOBID` saying `code=in-place` and `logs JOBID` asking
whether the job was submitted with this SLURMTORCH_HOME. The tombstone keeps the job's
story (when it was submitted, each start and where, how it ended as Slurm said, each
requeue) and says when its folder was cleaned: a few KiB at most, a private folder holding
one file. `clean` lists no tombstone (it is never cleaned again).
"""

from __future__ import annotations

import os
from pathlib import Path

from slurmtorch import events

KEEP = 200  # events: a story's worth (a job with thousands of restarts keeps its newest)


def is_tombstone(folder: Path) -> bool:
    """Whether `folder` is what `clean` left of a job's: its record and nothing else."""
    try:
        return os.listdir(folder) == [events.FILE]
    except OSError:
        return False


def kept(folder: Path) -> list[events.Event]:
    """The events a tombstone keeps of the job in `folder` (read before it goes): its newest
    KEEP, each read back as `events` reads any (bounded, a torn or foreign line skipped)."""
    return events.read(folder)[-KEEP:]


def leave(folder: Path, record: list[events.Event], freed: int) -> bool:
    """The tombstone at `folder` (removed just before): a private folder with the record and a
    `cleaned` event. False where something else took the name meanwhile (a new job of a
    reused id), which is then left alone."""
    try:
        os.mkdir(folder, 0o700)
    except OSError:
        return False
    lines = b"".join(events.line(e.kind, e.fields, e.at) for e in record)
    try:
        fd = os.open(folder / events.FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(lines)
    except OSError:
        return False
    return events.append(folder, "cleaned", freed=freed)
