"""Pure: which ranks stopped, from their heartbeat lines (bootstrap.heartbeat writes them,
`rankfiles.parse_beat` reads one).

A rank is stuck when its main thread has not moved for the hang timeout. Stuck ranks
that stand inside torch wait for their peers (a collective, DDP's backward); a stuck rank
in its own code is what they wait for: hung. A rank whose heartbeat is no longer written
has stopped altogether (frozen, or gone with its node). Nobody is named while nobody
waits: ranks that all work in their own code for a while (an evaluation, a checkpoint)
are not hung.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurmtorch.rankfiles import Beat, parse_beat

__all__ = ["Beat", "parse_beat", "interval_for", "hung_ranks", "all_waiting"]


def interval_for(timeout: float) -> float:
    """How often ranks beat: a fifth of the timeout, between 0.5 and 5 s."""
    return min(5.0, max(0.5, timeout / 5))


def hung_ranks(beats: Mapping[int, Beat], now: float, timeout: float) -> list[tuple[int, str, str]]:
    """(rank, host, why) of every rank that stopped or hung, by rank; [] when none can be named."""
    stale = max(timeout, 3 * interval_for(timeout))
    stopped = [(b.rank, b.host, f"stopped answering (no heartbeat for {now - b.written:.0f} s)")
               for b in beats.values() if now - b.written > stale]
    stuck = [b for b in beats.values() if now - b.written <= stale and now - b.unmoved_since > timeout]
    waiting = [b for b in stuck if b.place == "torch"]
    hung = []
    if waiting or stopped:
        peers = ", ".join(str(b.rank) for b in sorted(waiting, key=lambda b: b.rank))
        who = f"rank{'s' if len(waiting) > 1 else ''} {peers} waited" if waiting else ""
        hung = [(b.rank, b.host, f"hung: stuck in its own code for {now - b.unmoved_since:.0f} s"
                 + (f" while {who} for it" if who else ""))
                for b in stuck if b.place == "own"]
    return sorted(stopped + hung)


def all_waiting(beats: Mapping[int, Beat], ranks: int, now: float, timeout: float) -> float | None:
    """How long every one of `ranks` has stood still inside torch (a collective some rank
    never joins, or one they disagree on: nobody is in its own code to be named), once that
    is longer than `timeout`; else None."""
    stale = max(timeout, 3 * interval_for(timeout))
    if len(beats) < ranks or not beats:
        return None
    if any(now - b.written > stale or b.place != "torch" or now - b.unmoved_since <= timeout for b in beats.values()):
        return None
    return now - max(b.unmoved_since for b in beats.values())
