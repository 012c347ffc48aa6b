"""A job's story and its report, as every front end tells them: read from its folder and its
record (`events`), folded (`jobfolder.story`), said as lines and as `--json` data.

`status` (a job, the list, `--json`), `--wait` and `logs --follow`, `top`, `chain`, the
Distributor and `ClusterJob` call these, so a requeue, a restart, a failure and the end
line read the same wherever the user looks. Light: no YAML, no Jinja2 (`cli/jobs.py`
imports it at its top).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from slurmtorch import events, rankfiles
from slurmtorch.errors import SubmitError, typed
from slurmtorch.submit.follow import live
from slurmtorch.submit.jobfolder.jobstatus import JobStatus
from slurmtorch.submit.jobfolder import codecopy, jobdir, snapshot
from slurmtorch.submit.jobfolder.failures import RankFailure
from slurmtorch.submit.jobfolder.report import exit_code, failure_lines, restart_lines
from slurmtorch.submit.jobfolder.story import VERSION, Story, cleaned_line, fold, when

__all__ = ["VERSION", "Report", "of", "report", "ended_live_lines", "row"]


def of(folder: Path) -> Story:
    """The story of the job (or trial) in `folder`, from its record; an empty one where it has none."""
    return fold(events.read(folder))


@dataclass(frozen=True)
class Report:
    """What a job's folder and record say of it now: its state, the exit code a user expects
    (the failing rank's) and the job's own, the end line's words, its story's lines, the
    supervisor's restarts and a failure's report (`report.failure_lines`)."""

    job_id: str
    folder: Path
    status: JobStatus
    story: Story
    code: int | None = None  # once ended: the failing rank's, else the job's
    step_code: int | None = None  # once ended: the job's own (srun's 143 for a step it ended)
    failed: RankFailure | None = None
    restarts: tuple[str, ...] = ()  # `restarts: 1 of 3; excluded: node2`, a hung start's stacks
    failures: tuple[str, ...] = ()
    run: str | None = None  # the end line (`live.end_line`): steps and node-hours of every start

    @property
    def headline(self) -> str:
        """`job 42 FAILED (exit 1 from rank 2; the step exited 143)`: how it ended; its state while it runs."""
        if not self.status.done:
            return f"job {self.job_id} {self.status.describe()}"
        if self.failed is None:
            return f"job {self.job_id} {self.status.state} (exit {self.code})"
        context = f"; the step exited {self.step_code}" if self.step_code != self.code else ""
        return f"job {self.job_id} {self.status.state} (exit {self.code} from rank {self.failed.rank}{context})"

    def end_lines(self) -> tuple[str, ...]:
        """The end of `--wait`, `logs --follow` and a Distributor's run: the headline, then the
        restarts, the failure's report and the end line, each said by slurmtorch. The story's
        own lines (a requeue, a restart) were said as they happened."""
        return (self.headline, *(f"slurmtorch: {line}" for line in self.tail()))

    def tail(self) -> list[str]:
        return [*self.restarts, *self.failures, *([self.run] if self.run else [])]

    def status_lines(self) -> list[str]:
        """`slurmtorch status JOBID`: the status line, then what happened (the story), the
        restarts, and for an ended job its failure's report and the end line."""
        st = self.status
        extra: tuple[str, ...] = ()
        if self.failed is not None and self.step_code != self.code:
            extra = (f"step_exit_code={self.step_code}",)
        if self.code is not None:
            st = replace(st, exit_code=self.code)
        code = "" if self.story.cleaned is not None else f" {snapshot.summary(codecopy.read_record(self.folder))}"
        return [f"{st.line(extra)}{code}", *self.story.lines(), *self.tail()]

    def as_dict(self, now: float | None = None) -> dict:
        """`--json`'s words for the job: its state and exit codes, the failure's report, the end
        line, and its story (starts, restarts, requeues, elapsed, node-hours, lines)."""
        now = time.time() if now is None else now
        return {"version": VERSION, "job_id": self.job_id, "state": self.status.state,
                "exit_code": self.code, "step_exit_code": self.step_code,
                "failed_rank": self.failed.rank if self.failed is not None else None,
                "headline": self.headline, "restarts": self.story.restart_count,
                "failures": list(self.failures), "restart_lines": list(self.restarts), "run": self.run,
                "story": self.story.as_dict(now)}


def report(job_id: str, folder: Path, status: JobStatus, *, launcher_log: str = jobdir.BATCH_OUT,
           log: Callable[[RankFailure], str] | None = None, now: float | None = None) -> Report:
    """The report of job `job_id` (a trial's: `42_3`) in `folder` as it stands: `launcher_log`
    where srun's (a local run's: mpirun's) lines are, `log` the command that shows a failed
    rank's whole log (`report.failure_lines`)."""
    told = of(folder)
    restarts = tuple(restart_lines(folder, told))
    if not status.done:
        return Report(job_id, folder, status, told, restarts=restarts)
    code, failed, step = exit_code(folder, status, launcher_log)
    failures = tuple(failure_lines(folder, launcher_log=launcher_log, log=log)) if code != 0 else ()
    run = live.end_line(live.read_starts(folder), told.spans(time.time() if now is None else now))
    return Report(job_id, folder, status, told, code, step, failed, restarts, failures, run)


def ended_live_lines(starts: list[dict[int, rankfiles.LiveSample]], spans, now: float) -> list[str]:
    """`top` on an ended job: its end line over every start; ranks that sampled but never
    stepped (a run under a minute without an optimizer step) as their last samples."""
    end = live.end_line(starts, spans)
    if end:
        return [end]
    if not starts:
        return ["no rank sampled itself (SLURMTORCH_LIVE_S=0, or no rank started)"]
    last = starts[-1]
    return [f"no optimizer step seen: {len(last)} rank{'s' if len(last) != 1 else ''} sampled "
            f"{'themselves' if len(last) != 1 else 'itself'} ({'their' if len(last) != 1 else 'its'} last "
            f"sample{'s' if len(last) != 1 else ''} below)", *live.top_lines(last, now)]


def row(status: JobStatus, folder: Path, now: float) -> tuple[float | None, str, int, str]:
    """The status list's elapsed seconds (every start together, from the record; Slurm's span
    where the record has none), its nodes (Slurm's, else the record's), restarts, and `folder
    cleaned at ...` where `clean` left only its record ('' otherwise)."""
    told = of(folder)
    elapsed = told.elapsed(now) if told.attempts else status.elapsed(now)
    cleaned = f"folder cleaned at {when(told.cleaned)}" if told.cleaned is not None else ""
    return elapsed, status.nodes or told.nodes, told.restart_count, cleaned


def not_cleaned(job_id: str, folder: Path) -> None:
    """SubmitError, in one line, where `slurmtorch clean` left only the job's record."""
    told = of(folder)
    if told.cleaned is not None:
        raise SubmitError(f"job {job_id}: {cleaned_line(told.cleaned)}", tip=f"{typed(f'status {job_id}')} tells "
                                                                              "how it ran, from its record")
