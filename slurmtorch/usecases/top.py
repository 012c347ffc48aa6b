"""`top`: a job's ranks as they last sampled themselves, the slowest first, and how the job stands.

The ranks sample themselves (bootstrap.live); this reads their samples from the job's folder,
asks Slurm how the job stands (one squeue call) and says it as `top`'s table, or, once the
job ended, its end line. The front end redraws what comes back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from slurmtorch.errors import SubmitError, typed
from slurmtorch.rankfiles import LiveSample
from slurmtorch.submit.edge import queries
from slurmtorch.submit.follow import live
from slurmtorch.submit.jobfolder.jobstatus import JobStatus
from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.submit.jobfolder.story import Story
from slurmtorch.usecases import records, story


@dataclass(frozen=True)
class LiveView:
    """A job's (or trial's) ranks as they last sampled themselves, and how the job stands;
    `notes`: the samples skipped, and why (live.read_samples)."""

    job_id: str
    folder: Path
    samples: dict[int, LiveSample]
    status: JobStatus
    notes: tuple[str, ...] = ()
    starts: tuple[dict[int, LiveSample], ...] = ()  # every start's samples (a requeue or restart: a new one)
    story: Story = Story()

    def lines(self, now: float | None = None) -> list[str]:
        """`top`'s table: the job's state, then a line a rank (the slowest first); once the job
        ended its end line over every start (mean step, slowest rank, node-hours)."""
        now = time.time() if now is None else now
        head = f"job {self.job_id} {self.status.describe()}"
        if self.status.done:
            return [head, *story.ended_live_lines(list(self.starts), self.story.spans(now), now)]
        if not self.samples:
            return [head, "no rank has sampled itself yet" if self.status.state == "RUNNING" else "no rank running yet"]
        return [head, *live.top_lines(self.samples, now)]

    def record(self) -> dict:
        """`top --json`: the ranks and the table once, with the job's report (docs/json.md)."""
        rep = story.report(self.job_id, self.folder, self.status)
        return records.top(self.job_id, self.status, self.samples, self.lines(), rep)


def live_view(job_id: str) -> LiveView:
    """JOBID or JOBID_K (a trial): its folder checked as at submission (jobdir.checked), its
    ranks' latest samples (bootstrap.live) and its status (one squeue call)."""
    base, _, trial = job_id.partition("_")
    jobdir.check_job_id(base)
    if trial and not trial.isdigit():
        raise SubmitError(f"invalid trial in {job_id!r}", tip="JOBID_K, e.g. 1234_0")
    folder = jobdir.checked(jobdir.trial_dir(base, int(trial)) if trial else jobdir.job_dir(base))
    if not folder.is_dir():
        raise SubmitError(f"no job folder {folder}", tip="was the job submitted by slurmtorch with this SLURMTORCH_HOME?")
    story.not_cleaned(job_id, folder)
    if not trial and jobdir.read_trials(folder) is not None:
        raise SubmitError(f"job {job_id} is an array job: say which trial", tip=typed(f"top {job_id}_0"))
    status = queries.job_status(job_id, jobdir.jobs_root())
    notes: list[str] = []
    starts = live.read_starts(folder, notes.append)
    return LiveView(job_id, folder, starts[-1] if starts else {}, status, tuple(notes), tuple(starts), story.of(folder))
