"""How often slurmtorch asks the scheduler about a job it waits for (pure).

squeue(1), PERFORMANCE: every squeue is a remote procedure call to slurmctld, and many at
once degrade it for everyone; "Do not run squeue or other Slurm client commands that send
remote procedure calls to slurmctld from loops in shell scripts or other programs."
(https://slurm.schedmd.com/squeue.html#SECTION_PERFORMANCE). So `--wait`, `logs --follow`
and a Distributor's job follow a job mostly through its folder (the rank logs, the
batch script's `exit-code`), which costs the controller nothing, and ask the scheduler:

- at once when they start, then no sooner than MIN_S after the last call;
- every MIN_S x GROWTH^k seconds while the job's state stays the same, up to one call
  every MAX_S; a new state (PENDING -> RUNNING) starts the back-off again from MIN_S;
- earlier, though never sooner than MIN_S after the last call, when the folder shows the
  job started (`batch.out` appeared) or ended (`exit-code` written): `nudge`.

One squeue call answers every job this process waits for (`watch.Watch`). A job that
pends for 10 s and runs for 45 s cost 9 squeue calls on the testbed (tests/cli/
test_waiting.py counts a shorter one's); an hour of running costs about 125.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_S = 3.0
GROWTH = 1.5
MAX_S = 30.0


@dataclass
class Backoff:
    """When the next scheduler call for one job is due (monotonic seconds)."""

    last: float | None = None  # time of the last call
    delay: float = MIN_S  # wait after the last call while nothing changes
    nudged: bool = False  # the folder changed since the last call

    def due(self, now: float) -> bool:
        if self.last is None:
            return True
        return now - self.last >= (MIN_S if self.nudged else self.delay)

    def called(self, now: float, changed: bool) -> None:
        """A call was made at `now`; `changed`: it told a new state (the first always does)."""
        self.delay = MIN_S if changed or self.last is None else min(self.delay * GROWTH, MAX_S)
        self.last = now
        self.nudged = False

    def nudge(self) -> None:
        """The job's folder changed (it started or ended): look again as soon as allowed."""
        self.nudged = True

