"""Which job folders `slurmtorch clean` removes: those that provably ended and that nothing
still needs, older than a cut-off.

A job folder (`$SLURMTORCH_HOME/jobs/<id>`: logs, the snapshot of the code, reports) is
kept until its user removes it; nothing removes one on its own, since `status`, `logs` and
a requeue read it. `clean` lists the folders first (`list_folders`), then asks squeue which
jobs are queued or running, then picks (`select`): so a job submitted in between is either
listed by squeue or not listed as a folder (a submission renames its folder to the job id
only once sbatch has answered). It removes an ended job's folder, and an older folder of a
reused id (`<id>.stale-*`), whose newest file is older than the cut-off, except

- a Distributor job whose answer was never read (its run folder lacks `RUN_ENDED`):
  `Job.attach(id).result()` still needs job.json, as docs/python-api.md promises;
- every part of a chain (chain.json) while any of its parts is queued or running:
  `status` and `Chain.attach` read each part's folder;
- a submission not finished (`.submitting-*`): never touched, since nothing here can tell
  one under way from one killed before sbatch answered.

Never another user's folder, never one reached through a link. The reads are bounded (a
job can write its folder); the CLI asks squeue and removes (pruning.remove).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from slurmtorch import protocol
from slurmtorch.errors import SpecError
from slurmtorch.submit.jobfolder.tombstone import is_tombstone

DEFAULT_AGE = "30d"
MAX_DAYS = 36500  # a hundred years: any file is younger; more is a typo, said as one
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_NAME_RE = r"^(?P<id>[0-9]+)(?:\.stale-.*)?$"  # a job's folder, or an older one of a reused id
_SUBMITTING = ".submitting-"  # jobdir's temporary name of a folder whose sbatch has not answered
_RECORD_CAP = 1 << 20  # job.json and chain.json are a few hundred bytes; a job could write more

# Why a folder was kept, as the report line says it (in this order).
ACTIVE = "queued or running"
CHAIN = "of a chain with a part queued or running"
UNREAD = "with a Distributor answer never read"
SUBMITTING = "not submitted yet (.submitting-*)"
NEWER = "newer than {age}"
REASONS = (ACTIVE, CHAIN, UNREAD, SUBMITTING, NEWER)


@dataclass(frozen=True)
class Listed:
    """A job folder as listed before squeue is asked: its id, newest file's time, bytes,
    the job ids of its chain's parts (none: no chain), and whether it is a Distributor
    job whose answer was never read."""

    folder: Path
    job_id: str
    newest: float
    size: int
    chain: tuple[str, ...] = ()
    unread: bool = False


@dataclass(frozen=True)
class Stale:
    """A job folder that `clean` would remove: its job id, its newest file's age, its size."""

    folder: Path
    job_id: str
    age_s: float
    size: int


@dataclass(frozen=True)
class Choice:
    """What `clean` removes (oldest first) and how many folders it keeps, by reason."""

    removed: tuple[Stale, ...]
    kept: dict[str, int] = field(default_factory=dict)


def parse_age(text: str) -> float:
    """`30d`, `12h`, `90m`, `0` (every ended job) -> seconds (pure); at most MAX_DAYS."""
    m = re.fullmatch(r"\s*([0-9]+)\s*([dhms]?)\s*", str(text))
    if not m:
        raise SpecError(f"--older-than {_shown(text)} is not an age", tip="e.g. --older-than 30d (also 12h, 90m, 0)")
    digits = m.group(1).lstrip("0") or "0"
    if len(digits) > 12 or int(digits) * _UNITS[m.group(2) or "d"] > MAX_DAYS * 86400:  # int() of 5000 digits raises
        raise SpecError(f"--older-than {_shown(text)} is more than {MAX_DAYS} days",
                        tip="e.g. --older-than 30d (also 12h, 90m, 0)")
    return float(int(digits) * _UNITS[m.group(2) or "d"])


def _shown(text: str) -> str:
    """The value as typed, cut short: a line, not a page of digits."""
    text = str(text)
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"


def active_ids(job_ids) -> set[str]:
    """The job ids of squeue's active rows (`123`, an array task `123_4` or `123_[5-9]`: 123)."""
    return {str(j).split("_", 1)[0] for j in job_ids}


def list_folders(root: Path, uid: int) -> tuple[list[Listed], int]:
    """The job folders under `root` (the jobs folder) of user `uid`, none through a link,
    and how many submissions are not finished (`.submitting-*`, which are never listed)."""
    found, submitting = [], 0
    for entry in sorted(root.iterdir()) if root.is_dir() else ():
        m = re.match(_NAME_RE, entry.name)
        if not m:
            submitting += entry.name.startswith(_SUBMITTING)
            continue
        try:
            st = os.lstat(entry)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:  # a link, a file, another user's
            continue
        if is_tombstone(entry):  # what an earlier clean left: never cleaned again
            continue
        newest, size = _newest_and_size(entry, st.st_mtime)
        found.append(Listed(entry, m.group("id"), newest, size, _chain_ids(entry), _unread(entry)))
    return found, submitting


def select(listed: Iterable[Listed], older_than: float, now: float, active: set[str], submitting: int = 0) -> Choice:
    """What goes and what stays, and why (pure): `active` is squeue's answer, asked after
    the folders were listed."""
    removed, kept = [], Counter({SUBMITTING: submitting} if submitting else {})
    for f in listed:
        reason = (ACTIVE if f.job_id in active else CHAIN if active.intersection(f.chain) else
                  UNREAD if f.unread else NEWER if now - f.newest < older_than else None)
        if reason:
            kept[reason] += 1
        else:
            removed.append(Stale(f.folder, f.job_id, now - f.newest, f.size))
    return Choice(tuple(sorted(removed, key=lambda s: -s.age_s)), {r: kept[r] for r in REASONS if kept[r]})


def kept_line(kept: dict[str, int], age: str) -> str:
    """`2 queued or running, 1 newer than 30d` (pure): the folders kept, by reason."""
    return ", ".join(f"{n} {reason.format(age=age)}" for reason, n in kept.items())


def _chain_ids(folder: Path) -> tuple[str, ...]:
    """The job ids of the chain this folder's job is a part of (its chain.json), () if none
    or not readable as one."""
    record = _small_json(folder / protocol.CHAIN_RECORD)
    parts = record.get("parts") if isinstance(record, dict) else None
    return tuple(str(p["job_id"]) for p in parts if isinstance(p, dict) and str(p.get("job_id", "")).isdigit()) \
        if isinstance(parts, list) else ()


def _unread(folder: Path) -> bool:
    """A Distributor job (its job.json names a run folder) whose run folder is there and was
    never marked read (`Job.result` marks it, on whichever side reads it)."""
    record = _small_json(folder / protocol.JOB)
    run = record.get(protocol.RUN_FOLDER) if isinstance(record, dict) else None
    if not isinstance(run, str) or not os.path.isabs(run):
        return False
    try:
        if not stat.S_ISDIR(os.lstat(run).st_mode):
            return False
    except OSError:
        return False  # pruned or removed: nothing left to attach to
    return not os.path.lexists(os.path.join(run, protocol.RUN_ENDED))


def _small_json(path: Path) -> object:
    """A small JSON file a job could have written: a plain file (no link, no FIFO), at most
    _RECORD_CAP bytes; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = f.read(_RECORD_CAP + 1)
    try:
        return json.loads(data) if len(data) <= _RECORD_CAP else None
    except ValueError:
        return None


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
