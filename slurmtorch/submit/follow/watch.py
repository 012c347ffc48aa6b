"""The jobs this process waits for, asked of the scheduler together and politely.

`--wait`, `logs --follow` and every Distributor `Job` read a Slurm job's state through
one `Watch` (`WATCH`): each job keeps its own back-off (`polling.Backoff`) and the last
mark of its folder (`jobdir.progress_mark`: a change brings the next call forward); when
any job is due, one squeue call answers every due job of the same jobs folder
(`queries.statuses`). Between calls a job's last answer is given again, so a caller may
ask as often as it likes (a Distributor's `Job.wait` loop, several jobs in threads).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.submit.edge import queries
from slurmtorch.submit.edge.runner import Runner
from slurmtorch.submit.jobfolder.jobstatus import JobStatus
from slurmtorch.submit.follow.polling import Backoff


@dataclass
class _Entry:
    folder: Path
    backoff: Backoff = field(default_factory=Backoff)
    mark: tuple | None = None
    status: JobStatus | None = None


class Watch:
    """Job states for waiters: at most one scheduler call per due job, all due ones at once."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._jobs: dict[tuple[str, str], _Entry] = {}
        self._lock = threading.Lock()

    def status(self, job_id: str, root: Path | None = None, *, runner: Runner | None = None) -> JobStatus:
        """The job's (or array task `JOBID_K`'s) state: the last one known unless a call is due."""
        root = root or jobdir.jobs_root()
        key = (str(root), str(job_id))
        with self._lock:
            entry = self._jobs.get(key)
            if entry is None:
                entry = self._jobs[key] = _Entry(queries.job_folder(job_id, root))
            mark = jobdir.progress_mark(entry.folder)
            if entry.mark is not None and mark != entry.mark:
                entry.backoff.nudge()
            entry.mark = mark
            now = self._clock()
            if entry.status is not None and (entry.status.done or not entry.backoff.due(now)):
                return entry.status
            due = [k for k, e in self._jobs.items() if k[0] == key[0] and
                   (e.status is None or (not e.status.done and e.backoff.due(now)))]
            given: dict[str, Any] = {"runner": runner} if runner else {}
            fresh = queries.statuses([k[1] for k in due], root, **given)
            for k in due:
                e, new = self._jobs[k], fresh[k[1]]
                e.backoff.called(now, e.status is None or new.state != e.status.state)
                e.status = new
            assert entry.status is not None  # the entry was due (it passed the return above), so just set
            return entry.status

    def submitted(self, job_id: str, root: Path | None = None) -> None:
        """A job this process has just released: PENDING, and the controller has not looked
        at it yet (its reason would be None), so the first call waits MIN_S like any other."""
        root = root or jobdir.jobs_root()
        with self._lock:
            entry = self._jobs[(str(root), str(job_id))] = _Entry(queries.job_folder(job_id, root))
            entry.mark = jobdir.progress_mark(entry.folder)
            entry.status = JobStatus(str(job_id), "PENDING", source="sbatch")
            entry.backoff.called(self._clock(), True)

    def forget(self, job_id: str, root: Path | None = None) -> None:
        """Stop tracking a job (its waiter is done with it)."""
        with self._lock:
            self._jobs.pop((str(root or jobdir.jobs_root()), str(job_id)), None)


WATCH = Watch()
