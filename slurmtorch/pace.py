"""Which rank is slow, from the ranks' live samples (pure; the ranks and the submit side both ask).

A rank's pace is its time outside backward per step (what its peers wait for in backward's
all-reduce, bootstrap.live.Steps), else its step time; the slowest is said against the
median of all ranks' paces.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from slurmtorch.protocol import LiveSample


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
