"""Waiting for a job: its output from the folder, its state from the Watch, and Ctrl-C.

`sbatch --wait` and `logs --follow` copy a job's logs from its folder as they grow (every
TICK_S: files only, nothing asked of the controller) while `watch.WATCH` asks the
scheduler at `polling`'s rate; a `StatusLine` shows the state. Ctrl-C leaves the job
running and says how to stop it (exit 130), or cancels it with `--cancel-on-interrupt`;
TERM and HUP (a batch system or a closed terminal ending the waiter) do the same, saying
so, and exit 143 and 129.
"""

from __future__ import annotations

import functools
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, cast

from slurmtorch import readback
from slurmtorch.errors import SlurmtorchError, typed
from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.submit.edge import queries, scancel
from slurmtorch.submit.interrupts import stops_as_interrupts
from slurmtorch.submit.jobfolder.jobstatus import JobStatus, exit_code_of
from slurmtorch.submit.follow.polling import Backoff
from slurmtorch.submit.jobfolder.report import failure_lines, last_line, sweep_table
from slurmtorch.submit.follow.statusline import StatusLine
from slurmtorch.submit.follow.storytail import StoryTail
from slurmtorch.submit.follow.tail import Prefixed, Tail, drain, last_lines_offset
from slurmtorch.submit.follow.watch import WATCH, Watch

TICK_S = 0.25


class StoppedWaiting(SlurmtorchError):
    """Ctrl-C (or TERM, HUP) while waiting: the job goes on (or was cancelled, if asked);
    exit 128 + the signal (130 for Ctrl-C)."""

    exit_code = 130

    def render(self) -> str:
        return f"slurmtorch: {self.message}"


def interrupted(job_id: str, status: JobStatus | None, cancel: bool, runner=None,
                root: Path | None = None, signum: int = signal.SIGINT) -> StoppedWaiting:
    """What Ctrl-C (or `signum`) on a waiter says: the job is still there and how to stop it,
    or (`cancel`) that it was cancelled. `status`: the job's last known one (None for an
    array job)."""
    stopped = _interrupted(job_id, status, cancel, runner, root)
    if signum != signal.SIGINT:
        stopped.message = f"stopped waiting ({signal.Signals(signum).name}): {stopped.message}"
    stopped.exit_code = 128 + signum
    return stopped


def _interrupted(job_id: str, status: JobStatus | None, cancel: bool, runner, root: Path | None) -> StoppedWaiting:
    if status is not None:  # a single job's last look may be up to MAX_S old: say what it does now
        try:
            status = queries.job_status(job_id, root, **({"runner": runner} if runner else {}))
        except SlurmtorchError:
            pass
    state = (status.state if status is not None else "queued or running").lower()
    if not cancel:
        return StoppedWaiting(f"job {job_id} is still {state}; {typed(f'cancel {job_id}')} stops it")
    try:
        scancel.cancel(job_id, **({"runner": runner} if runner else {}))
    except SlurmtorchError as exc:  # it ended meanwhile, say
        return StoppedWaiting(f"job {job_id} was not cancelled: {exc.message}")
    return StoppedWaiting(f"job {job_id} cancelled (it was {state}), as --cancel-on-interrupt asked")


def follow(job_id: str, paths: Sequence[tuple[Path, IO[str]]], root: Path | None = None, *,
           runner=None, watch: Watch = WATCH, err: IO[str] | None = None, live: bool | None = None,
           cancel_on_interrupt: bool = False, last: int | None = None) -> JobStatus:
    """Stream files while the job runs (from each one's `last` lines; None: from its start);
    return its final status (StoppedWaiting on Ctrl-C)."""
    stream = err or sys.stderr
    line = StatusLine(stream, str(job_id), live)
    tails = [Tail(p, out, line) for p, out in paths]
    if last is not None:
        for t in tails:
            t.offset = last_lines_offset(t.path, last)
    story = StoryTail(queries.job_folder(job_id, root), line.saying(lambda text: _say(stream, text)))
    status = None
    try:
        with stops_as_interrupts():
            while True:
                for t in tails:
                    t.pump()
                story.pump()
                status = watch.status(job_id, root, runner=runner)
                if status.done:
                    break
                line.show(status)
                time.sleep(TICK_S)
    except KeyboardInterrupt as stop:
        line.close()
        raise interrupted(job_id, status, cancel_on_interrupt, runner, root, _signum(stop)) from None
    line.close()
    drain(tails)
    story.pump()
    watch.forget(job_id, root)
    return status


def _say(stream: IO[str], text: str) -> None:
    """A line of the job's story (a requeue, a restart), said where the state line goes."""
    print(f"slurmtorch: {text}", file=stream, flush=True)


def wait(job_id: str, root: Path | None = None, *, out: IO[str] | None = None, err: IO[str] | None = None,
         logs: bool = True, **kw) -> JobStatus:
    """Block until the job ends, streaming rank 0's output (node 0's under torchrun; `logs`
    False: none, for `--json`, whose stdout holds the end alone)."""
    o, e = jobdir.rank_log_paths(jobdir.job_dir(job_id, root))
    return follow(job_id, [(o, out or sys.stdout), (e, err or sys.stderr)] if logs else [], root, err=err, **kw)


def trial_tails(folder: Path, out: IO[str], err: IO[str], line=None) -> dict[int, list[Tail]]:
    """Rank 0's output and errors (node 0's under torchrun) of every trial in an array job's
    folder, each line marked with its trial: `[trial 2] epoch 1 loss 0.5`."""
    tails: dict[int, list[Tail]] = {}
    for trial in sorted(t for p in folder.glob("trial-*") if (t := readback.numbered(p.name, "trial-")) is not None):
        o, e = jobdir.rank_log_paths(folder / f"trial-{trial}")
        marked = [cast(IO[str], Prefixed(stream, f"[trial {trial}] ")) for stream in (out, err)]  # write/flush/isatty
        tails[trial] = [Tail(o, marked[0], line), Tail(e, marked[1], line)]
    return tails


def wait_array(job_id: str, root: Path | None = None, *, runner=None, out: IO[str] | None = None,
               err: IO[str] | None = None, live: bool | None = None, cancel_on_interrupt: bool = False,
               clock=time.monotonic, logs: bool = True) -> int:
    """Block until every trial has ended, streaming each one's rank 0 (`trial_tails`) and
    reporting its end; 0 only if all succeeded.

    One squeue call answers every trial, at `polling`'s rate; a trial folder that shows a
    start or an end brings the next call forward. Ended trials are not asked about again.
    """
    err = err or sys.stderr
    line = StatusLine(err, job_id, live)
    tails = trial_tails(jobdir.job_dir(job_id, root), out or sys.stdout, err, line) if logs else {}
    reported: dict[int, JobStatus] = {}
    stories: dict[Path, StoryTail] = {}  # each trial's, once its folder is there: `trial 2: requeued ...`
    backoff, marks, trials, last = Backoff(), None, [], None
    kw = {"runner": runner} if runner else {}
    try:
        with stops_as_interrupts():
            while True:
                for trial, pair in tails.items():
                    if trial not in reported:
                        for tail in pair:
                            tail.pump()
                _pump_stories(stories, jobdir.job_dir(job_id, root), line, err)
                now_marks = [jobdir.progress_mark(p) for p in sorted(jobdir.job_dir(job_id, root).glob("trial-*"))]
                if marks is not None and now_marks != marks:
                    backoff.nudge()
                marks = now_marks
                if backoff.due(clock()):
                    trials = queries.array_status(job_id, root, known=reported, **kw)
                    summary = _summary(trials)
                    backoff.called(clock(), summary != last)
                    last = summary
                    for t in trials:
                        if t.trial not in reported and t.status.done:
                            reported[t.trial] = t.status
                            for tail in tails.get(t.trial, ()):  # its last lines before its end line
                                tail.pump()
                                tail.finish()
                            line.before_output()
                            _report_trial(job_id, t, root, err)
                    if len(reported) == len(trials):
                        break
                    line.say(summary, summary)
                time.sleep(TICK_S)
    except KeyboardInterrupt as stop:
        line.close()
        raise interrupted(job_id, None, cancel_on_interrupt, runner, root, _signum(stop)) from None
    line.close()
    drain([tail for pair in tails.values() for tail in pair])  # what landed a moment after the end
    failed = [t.trial for t in trials if exit_code_of(t.status) != 0]
    ends = {t.trial: last_line(jobdir.rank_log_paths(jobdir.trial_dir(job_id, t.trial, root), 0)[0]) for t in trials}
    for row in sweep_table(trials, ends):
        print(row, file=err)
    print(f"job {job_id}: {len(trials) - len(failed)} of {len(trials)} trials succeeded"
          + (f"; failed: {', '.join(map(str, failed))}" if failed else ""), file=err, flush=True)
    return 1 if failed else 0


def _pump_stories(stories: dict[Path, StoryTail], folder: Path, line: StatusLine, err: IO[str]) -> None:
    """Each trial's story lines not said yet, marked with its trial."""
    for trial in folder.glob("trial-*"):
        if trial not in stories:
            stories[trial] = StoryTail(trial, line.saying(functools.partial(_say_of, err, trial.name)))
        stories[trial].pump()


def _say_of(stream: IO[str], trial: str, text: str) -> None:
    _say(stream, f"{trial.replace('-', ' ')}: {text}")


def _signum(stop: KeyboardInterrupt) -> int:
    """The signal that stopped a wait: Ctrl-C's SIGINT, or the one a StopSignal carries."""
    return getattr(stop, "signum", signal.SIGINT)


def _summary(trials) -> str:
    """`trials: 2 running, 1 pending, 1 done` for the status line."""
    counts: dict[str, int] = {}
    for t in trials:
        word = "done" if t.status.done else t.status.state.lower()
        counts[word] = counts.get(word, 0) + 1
    return "trials: " + ", ".join(f"{n} {word}" for word, n in counts.items())


def _report_trial(job_id: str, t, root: Path | None, err: IO[str]) -> None:
    print(f"trial {t.trial} {t.status.state} (exit {exit_code_of(t.status)})", file=err, flush=True)
    if exit_code_of(t.status) != 0:
        for text in failure_lines(jobdir.trial_dir(job_id, t.trial, root)):
            print(f"slurmtorch: trial {t.trial}: {text}", file=err)
