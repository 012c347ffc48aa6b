"""A job's story, folded from its record (`slurmtorch.events`): pure.

What every front end says of a job's life comes from here: when it was submitted, each
start of its batch script (a requeue makes a new one) and of its step (a restart under the
supervisor makes a new one), each failed start with its cause and what followed, each
requeue and who asked for it, how the job ended as Slurm last said (kept once Slurm forgets
it), and whether its folder was cleaned. Elapsed time and node-hours span every start.
`lines()` says what happened besides running, in the order it happened: a follower prints
each new one as it appears, and `status` prints them all.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import hostlist

from slurmtorch.events import Event

VERSION = 1  # of what `as_dict` gives (the "story" of every verb's --json)


@dataclass(frozen=True)
class Attempt:
    """One start of the batch script: Slurm's start (SLURM_RESTART_COUNT), where, how long."""

    attempt: int
    started: float
    nodes: str  # Slurm's node list, e.g. node[1-4]
    host: str  # the batch script's node
    ended: float | None = None
    code: int | None = None  # None: killed (requeued, cancelled, out of time), or still running

    @property
    def node_count(self) -> int:
        return _count(self.nodes)


@dataclass(frozen=True)
class Story:
    submitted: Event | None = None  # its name, nodes, launcher, max_restarts
    attempts: tuple[Attempt, ...] = ()
    launches: tuple[Event, ...] = ()  # the supervisor's starts of the step
    restarts: tuple[Event, ...] = ()  # failed starts, each with its cause and what followed
    requeues: tuple[Event, ...] = ()
    settled: Event | None = None  # Slurm's last word since the last start: state, exit code, elapsed, nodes
    cleaned: float | None = None
    notable: tuple[Event, ...] = ()  # requeues, failed starts, starts after the first, the cleaning: in order

    @property
    def restart_count(self) -> int:
        """Starts after the first: restarts on spares and requeues alike."""
        return max(len(self.launches) - 1, 0, len(self.attempts) - 1)

    @property
    def requeue_count(self) -> int:
        return max(len(self.requeues), len(self.attempts) - 1, 0)

    @property
    def name(self) -> str:
        return str(self.submitted.get("name") or "") if self.submitted is not None else ""

    def spans(self, now: float) -> list[tuple[float, float, int]]:
        """(start, end, nodes) of each start of the batch script; a start that left no end
        ends where a requeue was asked for it, else where the next began, else at Slurm's
        end, else now."""
        out = []
        for i, a in enumerate(self.attempts):
            following = self.attempts[i + 1].started if i + 1 < len(self.attempts) else None
            end = a.ended
            if end is None:
                asked = [e.at for e in self.requeues if e.at >= a.started and (following is None or e.at <= following)]
                end = min(asked) if asked else following
            if end is None and self.settled is not None:
                end = _number(self.settled.get("ended")) or self.settled.at
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
        if self.attempts and self.attempts[-1].nodes:
            return self.attempts[-1].nodes
        return str(self.settled.get("nodes") or "") if self.settled is not None else ""

    @property
    def restarts_spent(self) -> int:
        """Restarts the supervisor spent of --max-restarts (in the allocation or by a requeue)."""
        return sum(1 for e in self.restarts if e.get("action") in ("restart", "requeue"))

    def lines(self) -> list[str]:
        """What happened to it besides running, a line each, in the order it happened (pure):
        each failed start and what followed, each requeue with who asked and why, each start
        of the batch script after the first, and its folder's cleaning."""
        said: list[str] = []
        previous: Event | None = None
        requeued = False  # since the last start: someone of ours said who asked
        for e in self.notable:
            if e.kind == "restarting":
                said.append(_restart_line(e))
                requeued = requeued or e.get("action") == "requeue"
            elif e.kind == "requeued":
                if not (previous is not None and previous.kind == "restarting" and previous.get("action") == "requeue"):
                    why = f": {e.get('why')}" if e.get("why") else ""
                    said.append(f"requeued by {e.get('by') or 'someone'}{why}")
                requeued = True
            elif e.kind == "started":
                where = f" on {e.get('nodes')}" if e.get("nodes") else ""
                head = "" if requeued else "requeued (by Slurm or an operator: scontrol requeue, preemption); "
                said.append(f"{head}started again{where} (Slurm's restart {e.get('attempt', '?')})")
                requeued = False
            elif e.kind == "cleaned":
                said.append(cleaned_line(e.at))
            previous = e
        return said

    def as_dict(self, now: float) -> dict:
        """For `--json`: the schema's version, the starts, the restarts and requeues, the lines."""
        return {"version": VERSION, "submitted": self.submitted.at if self.submitted is not None else None,
                "restarts": self.restart_count, "requeues": self.requeue_count,
                "elapsed_s": _round(self.elapsed(now)), "node_hours": _round(self.node_hours(now), 4),
                "nodes": self.nodes,
                "attempts": [{"attempt": a.attempt, "started": a.started, "ended": a.ended, "nodes": a.nodes,
                              "host": a.host, "code": a.code} for a in self.attempts],
                "events": [{"kind": e.kind, "at": e.at, **e.fields} for e in self.notable],
                "lines": self.lines(), "cleaned": self.cleaned}


def fold(record: Sequence[Event]) -> Story:
    """The record's events, in the order written, as the story (pure). Slurm's word written
    before a later start (a job requeued after a reader saw it end) is history, not its end."""
    submitted, cleaned, settled = None, None, None
    attempts: list[Attempt] = []
    launches: list[Event] = []
    restarts: list[Event] = []
    requeues: list[Event] = []
    notable: list[Event] = []
    for e in record:
        if e.kind == "submitted":
            submitted = submitted or e
        elif e.kind == "started":
            attempts.append(Attempt(int(e.get("attempt", len(attempts))), e.at, str(e.get("nodes", "")),
                                    str(e.get("host", ""))))
            settled = None
            if len(attempts) > 1:
                notable.append(e)
        elif e.kind == "ended" and attempts and attempts[-1].ended is None:
            a = attempts[-1]
            attempts[-1] = Attempt(a.attempt, a.started, a.nodes, a.host, e.at, _int(e.get("code")))
        elif e.kind == "launched":
            launches.append(e)
        elif e.kind in ("restarting", "requeued"):
            (restarts if e.kind == "restarting" else requeues).append(e)
            notable.append(e)
        elif e.kind == "settled":
            settled = e
        elif e.kind == "cleaned" and cleaned is None:
            cleaned = e.at
            notable.append(e)
    return Story(submitted, tuple(attempts), tuple(launches), tuple(restarts), tuple(requeues), settled, cleaned,
                 tuple(notable))


def cleaned_line(at: float) -> str:
    """What every front end says of a job whose folder `slurmtorch clean` reduced to its record."""
    return f"its folder was cleaned at {when(at)} (slurmtorch clean): its logs and files are gone"


def _restart_line(e: Event) -> str:
    """A failed start and what followed, as the supervisor says it in batch.out."""
    excluded = e.get("excluded") or []
    blamed = f"; {', '.join(map(str, excluded))} excluded" if excluded else ""
    nodes = ",".join(map(str, e.get("nodes") or []))
    what = {"restart": f"restarted on {nodes}", "requeue": f"requeued without {nodes}",
            "give_up": "not restarted"}.get(str(e.get("action")), "")
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


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def when(at: float) -> str:
    """`2026-12-07 21:04`: a moment of a job's story, in local time."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))
