"""A job's story, folded from its record (`slurmtorch.events`): pure.

What every front end says of a job's life comes from here: when it was submitted, each
start of its batch script (a requeue makes a new one) and of its step (a restart under the
supervisor makes a new one), each failed start with its cause and what followed, each
requeue and who asked for it, how the job ended as Slurm last said (kept once Slurm forgets
it), and whether its folder was cleaned. Elapsed time and node-hours span every start.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import hostlist

from slurmtorch.events import Event

VERSION = 1  # of what `as_dict` gives (`status --json`'s "story")


@dataclass(frozen=True)
class Attempt:
    """One start of the batch script: Slurm's start (SLURM_RESTART_COUNT), where, how long."""

    attempt: int
    started: float
    nodes: str  # Slurm's node list, e.g. node[1-4]
    host: str  # the batch script's node
    ended: float | None = None
    code: int | None = None

    @property
    def node_count(self) -> int:
        return _count(self.nodes)


@dataclass(frozen=True)
class Story:
    submitted: float | None = None
    attempts: tuple[Attempt, ...] = ()
    launches: tuple[Event, ...] = ()  # the supervisor's starts of the step
    restarts: tuple[Event, ...] = ()  # failed starts, each with its cause and what followed
    requeues: tuple[Event, ...] = ()
    settled: Event | None = None  # Slurm's last word: state, exit code, elapsed, nodes
    cleaned: float | None = None

    @property
    def restart_count(self) -> int:
        """Starts after the first: restarts on spares and requeues alike."""
        return max(len(self.launches) - 1, 0, len(self.attempts) - 1)

    @property
    def requeue_count(self) -> int:
        return max(len(self.requeues), len(self.attempts) - 1, 0)

    def spans(self, now: float) -> list[tuple[float, float, int]]:
        """(start, end, nodes) of each start of the batch script; a start that left no end
        ends where the next began, or at Slurm's end, or now."""
        out = []
        for i, a in enumerate(self.attempts):
            end = a.ended
            if end is None and i + 1 < len(self.attempts):
                end = self.attempts[i + 1].started
            if end is None and self.settled is not None:
                end = self.settled.get("ended") or self.settled.at
            out.append((a.started, max(a.started, end if end is not None else now), a.node_count))
        return out

    def elapsed(self, now: float) -> float | None:
        """Seconds the job ran, every start together; None before its first start."""
        spans = self.spans(now)
        return sum(end - start for start, end, _ in spans) if spans else None

    def node_hours(self, now: float) -> float | None:
        spans = self.spans(now)
        return sum((end - start) * nodes for start, end, nodes in spans) / 3600 if spans else None

    @property
    def nodes(self) -> str:
        """The nodes of its last start (or Slurm's word), '' when none is known."""
        if self.attempts:
            return self.attempts[-1].nodes
        return str(self.settled.get("nodes") or "") if self.settled is not None else ""

    def lines(self) -> list[str]:
        """What happened to it besides running, as lines (pure): each requeue with who asked
        and why, each failed start and what followed, and its folder's cleaning."""
        said = []
        for e in sorted((*self.requeues, *self.restarts), key=lambda e: e.at):
            if e.kind == "requeued":
                why = f": {e.get('why')}" if e.get("why") else ""
                said.append(f"requeued by {e.get('by') or 'someone'}{why}")
            elif e.get("action") != "requeue":  # a requeue's own line follows it
                said.append(_restart_line(e))
        if self.cleaned is not None:
            said.append(f"its folder was cleaned at {_clock(self.cleaned)} (slurmtorch clean): its logs are gone")
        return said

    def as_dict(self, now: float) -> dict:
        """For `--json`: the schema's version, the starts, the restarts and requeues."""
        return {"version": VERSION, "submitted": self.submitted, "restarts": self.restart_count,
                "requeues": self.requeue_count, "elapsed_s": _round(self.elapsed(now)),
                "node_hours": _round(self.node_hours(now), 4), "nodes": self.nodes,
                "attempts": [{"attempt": a.attempt, "started": a.started, "ended": a.ended, "nodes": a.nodes,
                              "host": a.host, "code": a.code} for a in self.attempts],
                "events": [{"kind": e.kind, "at": e.at, **e.fields} for e in (*self.requeues, *self.restarts)],
                "cleaned": self.cleaned}


def fold(record: Sequence[Event]) -> Story:
    """The record's events, in the order written, as the story (pure)."""
    submitted, cleaned, settled = None, None, None
    attempts: list[Attempt] = []
    launches, restarts, requeues = [], [], []
    for e in record:
        if e.kind == "submitted":
            submitted = e.at if submitted is None else submitted
        elif e.kind == "started":
            attempts.append(Attempt(int(e.get("attempt", len(attempts))), e.at, str(e.get("nodes", "")),
                                    str(e.get("host", ""))))
        elif e.kind == "ended" and attempts and attempts[-1].ended is None:
            a = attempts[-1]
            attempts[-1] = Attempt(a.attempt, a.started, a.nodes, a.host, e.at, _int(e.get("code")))
        elif e.kind == "launched":
            launches.append(e)
        elif e.kind == "restarting":
            restarts.append(e)
        elif e.kind == "requeued":
            requeues.append(e)
        elif e.kind == "settled":
            settled = e
        elif e.kind == "cleaned":
            cleaned = e.at
    return Story(submitted, tuple(attempts), tuple(launches), tuple(restarts), tuple(requeues), settled, cleaned)


def _restart_line(e: Event) -> str:
    excluded = e.get("excluded") or []
    blamed = f"; {', '.join(map(str, excluded))} excluded" if excluded else ""
    nodes = ",".join(map(str, e.get("nodes") or []))
    what = {"restart": f"restarted on {nodes}", "give_up": "not restarted"}.get(str(e.get("action")), "")
    return f"start {e.get('start')} failed: {e.get('cause')}{blamed}" + (f"; {what}" if what else "")


def _count(nodes: str) -> int:
    if not nodes:
        return 0
    try:
        return len(hostlist.expand_hostlist(nodes))
    except (hostlist.BadHostlist, ValueError):
        return 0


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))
