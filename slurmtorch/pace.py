"""Which rank is slow, from the ranks' live samples (pure; the ranks and the submit side both ask).

A rank's pace is its time outside backward per step (what its peers wait for in backward's
all-reduce, bootstrap.live.Steps), else its step time; the slowest is said against the
median of all ranks' paces. A `Streak` says when one rank stayed slower by a margin in
several looks running: rank 0 then names it (SLURMTORCH_STRAGGLER), and the restart
supervisor, when asked (--replace-straggler), hands its node to a spare.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from slurmtorch.rankfiles import LiveSample


def pace(s: LiveSample, recent: bool = True) -> float | None:
    """What names the slow rank: its time outside backward, else its step time, over the
    recent steps (or, `recent=False`, the whole run)."""
    if recent:
        return s.own_s if s.own_s is not None else s.step_s
    return s.own_mean_s if s.own_mean_s is not None else s.mean_step_s


def slowest(samples: Mapping[int, LiveSample], recent: bool = True) -> tuple[LiveSample, float, float] | None:
    """(the slowest rank's sample, its pace, the median of all ranks') over the recent steps
    (or, `recent=False`, the whole run); None unless two ranks were timed."""
    timed = [(s, t) for s in samples.values() if (t := pace(s, recent)) is not None]
    if len(timed) < 2:
        return None
    median = statistics.median(t for _, t in timed)
    sample, slow = max(timed, key=lambda st: (st[1], -st[0].rank))
    return sample, slow, median


class Streak:
    """Fed one look at the samples at a time: (the slow rank's sample, its pace, the median)
    on the look that makes `runs` looks running in which that rank was the slowest and over
    the median by `margin` (0.2: 20%); None on every other look."""

    def __init__(self, margin: float, runs: int = 3) -> None:
        self.margin, self.runs = margin, runs
        self.rank, self.count = -1, 0

    def feed(self, samples: Mapping[int, LiveSample]) -> tuple[LiveSample, float, float] | None:
        found = slowest(samples)
        if found is None or found[2] <= 0 or found[1] < (1 + self.margin) * found[2]:
            self.rank, self.count = -1, 0
            return None
        sample = found[0]
        self.rank, self.count = sample.rank, self.count + 1 if self.rank == sample.rank else 1
        return found if self.count == self.runs else None
