"""One start of a job's step, watched while it runs: the ranks' heartbeats (`--hang-timeout`:
a stopped or hung rank ends the step, their stacks are taken) and their live samples
(`--replace-straggler`: a rank slower than the median in 3 rounds running ends it too).
What to do after the start ends is the supervisor's (batchnode/supervisor.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from slurmtorch import protocol, readback
from slurmtorch import requeue as requeuing
from slurmtorch.errors import SubmitError
from slurmtorch.pace import Streak
from slurmtorch.submit.batchnode.record import say
from slurmtorch.submit.edge.scancel import send_stacks_signal
from slurmtorch.submit.follow import stackrequest
from slurmtorch.submit.follow.live import read_samples
from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.submit.jobfolder.heartbeats import all_waiting, hung_ranks, interval_for, parse_beat

TERM_GRACE_S = 15.0  # after SIGTERM, how long srun gets to end the step before SIGKILL


def _beats(folder: Path) -> dict:
    beats = {}
    for p in (folder / protocol.HEARTBEATS).glob(protocol.heartbeat_name("*")):
        if p.name.endswith(".tmp"):
            continue
        beat = parse_beat(readback.text_or_empty(p, readback.SAMPLE, cut=None))
        if beat is not None:
            beats[beat.rank] = beat
    return beats


def clear_beats(folder: Path) -> None:
    for p in (folder / protocol.HEARTBEATS).glob(protocol.heartbeat_name("*")):
        p.unlink(missing_ok=True)


def _end(proc: subprocess.Popen, group: bool = False) -> None:
    """End a step: srun passes SIGTERM to its tasks and cancels the step; SIGKILL if it lingers.
    `group`: the script's launch, whose process group gets both (it traps TERM, waits for its sruns)."""
    if group:
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait()


def take_stacks(folder: Path, ntasks: int, start: int) -> None:
    """Every rank's stack, grouped, said in batch.out and kept (stacks/summary.txt) for
    `status` and `--wait`: where each rank stood when the step was found hung."""
    try:
        lines = stackrequest.summary(folder, ntasks, lambda: send_stacks_signal(requeuing.target(os.environ)))
    except SubmitError as exc:
        say(f"warning: asking the ranks for their stacks failed: {exc.message}")
        return
    for line in lines:
        say(f"stacks: {line}")
    try:
        jobdir.replace_private(folder / protocol.STACKS / protocol.SUMMARY, protocol.summary_text(start, lines))
    except OSError as exc:
        say(f"warning: cannot keep the stacks in {folder / protocol.STACKS}: {exc.strerror or exc}")


class Stragglers:
    """--replace-straggler: the ranks' live samples (SLURMTORCH_LIVE_S), looked at once a round
    (when every rank has written since the last look; what an earlier start wrote is not this
    start's), and the rank slower than the median by `margin` in 3 rounds running (pace.Streak)."""

    def __init__(self, folder: Path, margin: float, ntasks: int) -> None:
        self.folder, self.ntasks = folder, ntasks
        self.streak = Streak(margin)
        self.seen = time.time()

    def look(self) -> tuple[int, str, str] | None:
        """(rank, host, why) of a rank to replace, once its third slow round is seen."""
        samples = read_samples(self.folder)
        newest_of_all = min((s.written for s in samples.values()), default=0.0)  # every rank has written since
        if len(samples) < self.ntasks or newest_of_all <= self.seen:
            return None
        self.seen = newest_of_all
        found = self.streak.feed(samples)
        if found is None:
            return None
        sample, slow, median = found
        what = "time outside backward" if sample.own_s is not None else "step time"
        return (sample.rank, sample.host, f"a straggler: {slow / median:.2f}x the median {what} ({slow:.3g} s "
                                          f"against {median:.3g} s) in {self.streak.runs} samples running")


def run_step(argv: list[str], env: dict[str, str], folder: Path, hang_timeout: float | None,
             ntasks: int = 0, start: int = 0, straggler: float | None = None,
             group: bool = False) -> tuple[int, list[tuple[int, str, str]]]:
    """Run one start; (srun's exit code, the ranks found hung, stopped or, with `straggler`,
    slower than the others by that margin, if any). `group`: `argv` is the script's launch (its
    sruns), in a process group of their own that _end can take down whole."""
    proc = subprocess.Popen(argv, env=env, start_new_session=group)
    poll = interval_for(hang_timeout) if hang_timeout else 1.0
    hung: list[tuple[int, str, str]] = []
    said_waiting = False
    slow = Stragglers(folder, straggler, ntasks) if straggler else None
    while True:
        try:
            return proc.wait(timeout=poll), hung
        except subprocess.TimeoutExpired:
            pass
        replaced = slow.look() if slow is not None else None
        if replaced is not None:
            rank, host, why = replaced
            say(f"rank {rank} on {host}: {why}; ending the step to replace {host} (--replace-straggler)")
            _end(proc, group)
            return proc.returncode, [replaced]
        if hang_timeout:
            beats, now = _beats(folder), time.time()
            hung = hung_ranks(beats, now, hang_timeout)
            if hung:
                for rank, host, why in hung:
                    say(f"rank {rank} on {host}: {why}; ending the step")
                take_stacks(folder, ntasks, start)
                _end(proc, group)
                return proc.returncode, hung
            waited = all_waiting(beats, ntasks, now, hang_timeout) if not said_waiting else None
            if waited is not None:
                # No rank to blame and none to restart: say where they all stand, and let the
                # group's timeout end them (its report then says where each stood as it ended).
                say(f"all {ntasks} ranks have stood still in torch for {waited:.0f} s (a collective some rank "
                    "never joins, or one they disagree on); the step goes on until the group's timeout")
                take_stacks(folder, ntasks, start)
                said_waiting = True
