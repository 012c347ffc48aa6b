"""`Chain`: jobs that run one after the other (train -> evaluate -> export), from Python.

    from slurmtorch import Chain

    chain = Chain([
        {"name": "train", "script": "train.py", "args": ["--epochs", "3"], "nodes": 2},
        {"name": "evaluate", "script": "eval.py", "site": "other-cluster"},
        {"name": "export", "script": "export.py", "after": "any"},
    ], site="mycluster")
    job = chain.submit()
    job.status()            # {"train": "RUNNING", "evaluate": "PENDING", "export": "PENDING"}
    job.wait()              # ChainFailed naming the part that failed, else None

    Chain.attach(job.job_ids["train"]).wait()   # the same chain, found by any part's id, from any process

A part is a mapping with a chain file's keys (`slurmtorch chain --help`: name, script or
module, args, site, after, snapshot, and the Distributor's keywords, which are
`slurmtorch sbatch`'s options), or a `Part`. The CLI's path (`usecases.chain`) with a
Python front: the same dependencies, the same all-or-nothing submission, the same report.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

from slurmtorch.errors import SlurmtorchError
from slurmtorch.submit.launch.chain import Part
from slurmtorch.usecases import chain as chains

__all__ = ["Chain", "ChainJob", "ChainFailed", "Part"]


class ChainFailed(SlurmtorchError):
    """A part of the chain did not complete: `part` (its name) and `job_id` say which, and
    `lines` the report (every part's end, that part's failure)."""

    exit_code = 1

    def __init__(self, message: str, *, part: str, job_id: str, lines: tuple[str, ...] = ()):
        super().__init__(message)
        self.part = part
        self.job_id = job_id
        self.lines = lines


class Chain:
    """Parts submitted each after the one before; `site`: every part's that names none
    (default $SLURMTORCH_SITE)."""

    def __init__(self, parts: Iterable[Part | Mapping[str, Any]], site: str | None = None):
        self.parts = chains.parts_given(list(parts), site)

    def __repr__(self) -> str:
        return f"Chain({' -> '.join(p.name for p in self.parts)})"

    def dry_run(self) -> str:
        """Every part's batch script, as `slurmtorch chain --dry-run` prints them."""
        return chains.dry_run_text(chains.dry_run(self.parts, (f"{self!r}.dry_run()",)))

    def submit(self) -> ChainJob:
        """Submit every part, all or nothing (a part refused cancels the parts already in)."""
        return ChainJob(chains.submit(self.parts, (f"{self!r}.submit()",)))

    @staticmethod
    def attach(job_id: str | int) -> ChainJob:
        """The chain that job `job_id` is a part of (any part's id), submitted earlier from
        any process (a notebook whose kernel died): status, wait and cancel as the ChainJob
        submit() returned. A bad id, or a job that is not part of a chain, is one
        SlurmtorchError line."""
        return ChainJob(chains.attach(str(job_id)))


class ChainJob:
    """A submitted chain: its parts' job ids, how they stand, waiting for its end, cancelling it."""

    def __init__(self, submitted: chains.SubmittedChain):
        self._submitted = submitted

    @property
    def job_ids(self) -> dict[str, str]:
        """Each part's Slurm job id, by part name, in order."""
        return {p.name: j for p, j in zip(self._submitted.parts, self._submitted.job_ids)}

    def __repr__(self) -> str:
        return "ChainJob(" + ", ".join(f"{name}={j}" for name, j in self.job_ids.items()) + ")"

    def status(self) -> dict[str, str]:
        """Each part's state, by part name (Slurm's words: PENDING, RUNNING, COMPLETED, ...)."""
        return {name: status.state for name, status in chains.statuses(self._submitted)}

    def wait(self) -> None:
        """Block until every part has ended, as `slurmtorch chain --wait` does: each part's
        rank 0 output and state, then the report on stderr. ChainFailed (naming the part and
        its job) unless every part completed."""
        ended = chains.follow(self._submitted, _say)
        for line in ended.lines:
            print(line, file=sys.stderr)
        if ended.failed is not None:
            job_id = self.job_ids[ended.failed]
            raise ChainFailed(f"chain failed at part {ended.failed!r} (job {job_id})", part=ended.failed,
                              job_id=job_id, lines=ended.lines)

    def cancel(self) -> list[str]:
        """Cancel every part still queued or running; the names of those cancelled."""
        return chains.cancel(self._submitted)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
