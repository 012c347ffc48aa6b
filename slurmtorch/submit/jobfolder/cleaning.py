"""Which job folders `slurmtorch clean` removes: ended jobs' older than a cut-off.

A job folder (`$SLURMTORCH_HOME/jobs/<id>`: logs, the snapshot of the code, reports) is
kept until its user removes it; nothing removes one on its own, since `status`, `logs` and
a requeue read it. `clean` removes those the scheduler no longer lists as queued or running
(an array job: none of its tasks) whose newest file is older than the cut-off, and an older
folder of a reused id (`<id>.stale-*`). Never another user's folder, never one reached
through a link, never a job the scheduler still lists as active. Pure selection; the CLI
asks squeue and removes (pruning.remove).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from slurmtorch.errors import SpecError

DEFAULT_AGE = "30d"
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_NAME_RE = r"^(?P<id>[0-9]+)(?:\.stale-.*)?$"  # a job's folder, or an older one of a reused id


@dataclass(frozen=True)
class Stale:
    """A job folder that `clean` would remove: its job id, its newest file's age, its size."""

    folder: Path
    job_id: str
    age_s: float
    size: int


def parse_age(text: str) -> float:
    """`30d`, `12h`, `90m`, `0` (every ended job) -> seconds (pure)."""
    m = re.fullmatch(r"\s*([0-9]+)\s*([dhms]?)\s*", str(text))
    if not m:
        raise SpecError(f"--older-than {text!r} is not an age", tip="e.g. --older-than 30d (also 12h, 90m, 0)")
    return float(int(m.group(1)) * _UNITS[m.group(2) or "d"])


def active_ids(job_ids) -> set[str]:
    """The job ids of squeue's active rows (`123`, an array task `123_4` or `123_[5-9]`: 123)."""
    return {str(j).split("_", 1)[0] for j in job_ids}


def stale_folders(root: Path, older_than: float, now: float, active: set[str], uid: int) -> list[Stale]:
    """The folders under `root` (the jobs folder) that `clean` removes, oldest first."""
    found = []
    for entry in sorted(root.iterdir()) if root.is_dir() else ():
        m = re.match(_NAME_RE, entry.name)
        if not m or m.group("id") in active:
            continue
        try:
            st = os.lstat(entry)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:  # a link, a file, another user's
            continue
        newest, size = _newest_and_size(entry, st.st_mtime)
        if now - newest >= older_than:
            found.append(Stale(entry, m.group("id"), now - newest, size))
    return sorted(found, key=lambda s: -s.age_s)


def _newest_and_size(folder: Path, mtime: float) -> tuple[float, int]:
    """The newest modification time in a folder (a log a running job still writes) and its bytes."""
    newest, size = mtime, 0
    for parent, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            try:
                st = os.lstat(os.path.join(parent, name))
            except OSError:
                continue
            newest = max(newest, st.st_mtime)
            size += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return newest, size
