"""Pure: whom a failed step blames, and what the job does next (restart, requeue, give up).

`slurmtorch sbatch --max-restarts N --spare-nodes K` runs its step under the supervisor
(`supervisor.py`, the edge). After a step fails, the supervisor reads what the step left
(batch.out's new lines, the ranks' new stderr, their exit notes, the heartbeats) and asks
this module two questions:

- `blame`: was it the machine or the script? A node that was lost, a rank killed by a
  signal, a rank that stopped answering (hung, or its heartbeat stopped), or the peer that
  the others lost their connection to: the machine, and those nodes are suspect. An
  exception, an exit code, a script that returned early: the script. Nothing to go on
  (a step that never launched): unknown.
- `decide`: with the job's `RestartState`, what next. Suspect nodes are excluded; while
  the allocation still has enough healthy nodes (the spares), the step starts again on
  them at once; when it has not, the job is requeued with the suspects excluded. A
  failure of the script is retried once (it may have been the machine after all), and
  so is a node failure whose cause repeats on a new node (it follows the script, not the
  node); a second time ends the job with its cause. At most `max_restarts` in all.

The state survives requeues in the job folder (`restarts.json`, written by the edge), so
the counts, the excluded nodes and the history are those of the whole job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from slurmtorch.roles import RoleLayout
from slurmtorch.submit.jobfolder.failures import RankFailure

# Causes that say the machine failed, not the script (failures.parse_failures' wording).
_MACHINE_RE = re.compile(r"killed by a signal|lost with its node|hung|heartbeat stopped|Node failure|"
                         r"stopped answering", re.IGNORECASE)
_LAUNCH_RE = re.compile(r"never started: the step failed to launch")
_DIGITS_RE = re.compile(r"\d+")
# sinfo's short states (%t) of a node Slurm will give no new work: down, drained or failing,
# or not answering (`*`: its slurmd missed a ping; DOWN follows after SlurmdTimeout).
_DEAD_STATE_RE = re.compile(r"^(down|drain|fail)|\*$")


@dataclass(frozen=True)
class Verdict:
    """Why a step failed: `machine` (the suspect nodes), `slurm` (Slurm refused to create or
    launch the step: never the script's; the nodes it named are suspect), `script`, or `unknown`."""

    kind: str
    cause: str  # one line naming rank and host where known
    nodes: tuple[str, ...] = ()
    code: int = 1  # the exit code the job ends with if this is the last word
    lost: bool = False  # srun reported the node lost: the machine, whatever happened before


@dataclass(frozen=True)
class Event:
    """One failure and what was done about it, for `status` and `--wait`."""

    start: int  # which start of the job's step failed (0: the first)
    cause: str
    action: str  # restart | requeue | give_up
    nodes: tuple[str, ...] = ()  # restart: where it starts again; requeue: excluded
    excluded: tuple[str, ...] = ()  # nodes newly excluded by this failure
    at: float = 0.0  # time.time() when decided

    def line(self) -> str:
        blamed = f"; {', '.join(self.excluded)} excluded" if self.excluded else ""
        what = {"restart": f"restarted on {','.join(self.nodes)}",
                "requeue": f"requeued without {','.join(self.nodes)}",
                "give_up": "not restarted"}[self.action]
        return f"start {self.start} failed: {self.cause}{blamed}; {what}"


@dataclass(frozen=True)
class RestartState:
    """The job's restart history, across in-allocation restarts and requeues."""

    starts: int = 0  # step starts so far (restart_count() of the next start)
    restarts: int = 0  # restarts after failures (in the allocation or by requeue): <= max_restarts
    script_retries: int = 0  # restarts spent on a failure of the script (or unknown): at most 1
    excluded: tuple[str, ...] = ()
    last_cause: str = ""  # the previous failure's cause with its numbers out (repeat detection)
    events: tuple[Event, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        return {"starts": self.starts, "restarts": self.restarts, "script_retries": self.script_retries,
                "excluded": list(self.excluded), "last_cause": self.last_cause,
                "events": [{"start": e.start, "cause": e.cause, "action": e.action, "nodes": list(e.nodes),
                            "excluded": list(e.excluded), "at": e.at} for e in self.events]}

    @classmethod
    def from_dict(cls, data: Mapping) -> RestartState:
        events = tuple(Event(int(e["start"]), str(e["cause"]), str(e["action"]), tuple(e.get("nodes", ())),
                             tuple(e.get("excluded", ())), float(e.get("at", 0.0)))
                       for e in data.get("events", ()))
        return cls(starts=int(data.get("starts", 0)), restarts=int(data.get("restarts", 0)),
                   script_retries=int(data.get("script_retries", 0)), excluded=tuple(data.get("excluded", ())),
                   last_cause=str(data.get("last_cause", "")), events=events)


@dataclass(frozen=True)
class Plan:
    """What the job does next."""

    action: str  # restart | requeue | give_up
    nodes: tuple[str, ...]  # restart: the nodes of the next start; requeue: every excluded node
    state: RestartState  # the state to save (this failure counted and recorded)
    why: str  # one line for the log


def blame(failures: Sequence[RankFailure], lost_nodes: Iterable[str] = (), hung: Sequence[tuple[int, str, str]] = (),
          addresses: Mapping[str, str] | None = None, code: int = 1,
          refusal: tuple[str, tuple[str, ...]] | None = None, roles: RoleLayout | None = None) -> Verdict:
    """Pure: the verdict on one failed step.

    `failures` is `parse_failures` over what this step left; `lost_nodes` the nodes srun
    reported a node failure on; `hung` (rank, host, why) the ranks the supervisor found
    stopped (`heartbeat.hung_ranks`); `addresses` maps node addresses to names, for a rank
    named by its peer's address; `code` the step's exit code, kept unless a rank's is known;
    `refusal` srun's words and the nodes they name when Slurm did not start the step
    (`batchlines.step_refusal`); `roles` a role job's layout, by which a hung rank's role is named.
    """
    addresses = addresses or {}
    lost = tuple(sorted(set(lost_nodes)))
    if hung:
        nodes = tuple(sorted({host for _, host, _ in hung if host}))
        rank, host, why = hung[0]
        role = f" ({'%s %d' % roles.role_of(rank)})" if roles is not None and 0 <= rank < roles.total else ""
        return Verdict("machine", f"rank {rank}{role} on {host}: {why}", nodes, code)
    primary = [f for f in failures if f.primary]
    if lost:
        first = next((f for f in primary if f.host in lost), None)
        cause = first.line() if first else f"lost {', '.join(lost)} (srun: Node failure)"
        return Verdict("machine", cause, lost, code, lost=True)
    if refusal and not primary:
        why, nodes = refusal
        return Verdict("slurm", f"Slurm did not start the step: {why}", nodes, code)
    if not primary:
        if failures:
            return Verdict("unknown", failures[0].line() + " (and nobody said why)", (), code)
        return Verdict("unknown", f"the step exited {code} and no rank said why", (), code)
    machine = [f for f in primary if _MACHINE_RE.search(f.cause)]
    if machine:
        nodes = tuple(sorted({addresses.get(f.host, f.host) for f in machine if f.host}))
        first = machine[0]
        shown = replace(first, host=addresses.get(first.host, first.host))
        return Verdict("machine", shown.line(), tuple(n for n in nodes if n != "an unknown host"), code)
    first = primary[0]
    if _LAUNCH_RE.search(first.cause):
        return Verdict("unknown", first.line(), (), code)
    return Verdict("script", first.line(), (), first.code if first.code is not None else _exit_code_of(first.cause, code))


def _exit_code_of(cause: str, default: int) -> int:
    m = re.search(r"exited with (?:exit )?code (\d+)", cause)
    return int(m.group(1)) if m else default


def _shape(cause: str) -> str:
    """A cause with its numbers and host names out: the same failure on another node or rank."""
    text = re.sub(r"^rank \d+ on \S+: ", "", cause)
    return _DIGITS_RE.sub("#", text)


def dead_nodes(allocated: Sequence[str], job_nodes: Iterable[str], states: Mapping[str, str]) -> tuple[str, ...]:
    """Pure: the job's nodes that Slurm says are gone: taken out of the job (what a --no-kill
    job's failed node becomes: `job_nodes` is the job's NodeList now), or down, drained,
    failing or not answering (`states`: sinfo's %t by node). srun names only the nodes of
    its own step; a spare lost at the same moment is known to Slurm alone."""
    now = set(job_nodes)
    return tuple(n for n in allocated if n not in now or _DEAD_STATE_RE.search(states.get(n, "")))


Pool = tuple[tuple[str, ...], int]  # nodes to draw from, and how many of them one start uses


def place(pools: Sequence[Pool], excluded: Iterable[str]) -> tuple[str, ...] | None:
    """Pure: a start's nodes, each pool's first healthy ones, in pool order; None when a pool
    has too few. One pool: the job's nodes (its roles take their shares of them in role order);
    a heterogeneous job: one per role, its component's nodes (spares of the role's kind)."""
    out = set(excluded)
    nodes: list[str] = []
    for pool, need in pools:
        healthy = [n for n in pool if n not in out]
        if len(healthy) < need:
            return None
        nodes += healthy[:need]
    return tuple(nodes)


def short_role(pools: Sequence[Pool], excluded: Iterable[str], roles: Sequence[str]) -> str:
    """Pure: which role of a heterogeneous job (`roles`, one a pool) has fewer healthy nodes of its
    own kind than a start needs, and how many (`role master has 0 healthy nodes of its kind and
    needs 1`); '' when every role has enough, or the roles are not known."""
    short = _short_pool(pools, excluded, roles)
    if short is None:
        return ""
    role, healthy, need, _ = short
    return f"role {role} has {healthy} healthy node{'' if healthy == 1 else 's'} of its kind and needs {need}"


def _short_pool(pools: Sequence[Pool], excluded: Iterable[str],
                roles: Sequence[str]) -> tuple[str, int, int, int] | None:
    """(role, healthy nodes, nodes needed, spares held) of the first role short of nodes."""
    out = set(excluded)
    for (pool, need), role in zip(pools, roles):
        healthy = len([n for n in pool if n not in out])
        if healthy < need:
            return role, healthy, need, len(pool) - need
    return None


def decide(state: RestartState, verdict: Verdict, allocated: Sequence[str], need: int, max_restarts: int,
           now: float = 0.0, dead: Iterable[str] = (), in_place: bool = True,
           pools: Sequence[Pool] = (), requeue: bool = True, roles: Sequence[str] = ()) -> Plan:
    """Pure: what to do after a failed start, and the state that records it.

    `allocated` are the job's nodes in order (the batch host first), `need` the nodes one
    start uses, `dead` the nodes Slurm says are gone (`dead_nodes`): excluded whatever the
    verdict. Without `in_place` (the batch script is gone with its node) the job can only
    be requeued. The failed start is `state.starts - 1`. `pools` (default: the allocation,
    `need` of it) say where a start's nodes come from (`place`); without `requeue` (a
    heterogeneous job), a start that no longer fits ends the job; `roles` name its pools, for
    the line that says which role ran out of spares.
    """
    start = max(0, state.starts - 1)
    # A lost node is the machine's however often it happens; any other machine-looking
    # failure that comes back the same on new nodes follows the script.
    repeat = (verdict.kind == "machine" and not verdict.lost and bool(state.events)
              and _shape(verdict.cause) == state.last_cause)
    kind = "script" if repeat else verdict.kind
    blamed = verdict.nodes if kind in ("machine", "slurm") else ()
    newly = tuple(dict.fromkeys(n for n in (*blamed, *dead) if n not in state.excluded))
    excluded = state.excluded + newly
    base = replace(state, excluded=excluded, last_cause=_shape(verdict.cause))

    def end(why: str) -> Plan:
        event = Event(start, verdict.cause, "give_up", (), newly, now)
        return Plan("give_up", (), replace(base, events=state.events + (event,)), why)

    if state.restarts >= max_restarts:
        return end(f"no restarts left ({state.restarts} of {max_restarts} used)")
    if repeat:  # the restart on new nodes was its one retry
        return end("the same failure again on new nodes: it follows the script, not the machine")
    if kind not in ("machine", "slurm"):
        if state.script_retries >= 1:
            return end("it failed again after a restart: the script's failure, not the machine's")
        base = replace(base, script_retries=state.script_retries + 1)
    healthy = [n for n in allocated if n not in excluded]
    counted = replace(base, restarts=state.restarts + 1)
    nodes = place(pools or ((tuple(allocated), need),), excluded)
    if in_place and nodes is not None:
        event = Event(start, verdict.cause, "restart", nodes, newly, now)
        return Plan("restart", nodes, replace(counted, events=state.events + (event,)),
                    f"restart {counted.restarts} of {max_restarts}")
    if not requeue:
        return end(_not_requeued(in_place, pools, excluded, roles))
    event = Event(start, verdict.cause, "requeue", excluded, newly, now)
    short = f"{len(healthy)} healthy of the {need} nodes needed" if in_place else "no batch script left to restart in"
    return Plan("requeue", excluded, replace(counted, events=state.events + (event,)),
                f"restart {counted.restarts} of {max_restarts}: {short}; requeued without {','.join(excluded)}")


def _not_requeued(in_place: bool, pools: Sequence[Pool], excluded: Iterable[str], roles: Sequence[str]) -> str:
    """Why a heterogeneous job ends where another would be requeued: its batch script is gone,
    or a role has no spare of its kind left (which, and how to hold one more)."""
    if not in_place:
        return "its batch script went with its node, and a heterogeneous job is not requeued: the job is cancelled"
    short = _short_pool(pools, excluded, roles)
    if short is None:
        return "a role has no healthy spare of its kind left, and a heterogeneous job is not requeued"
    role, _, need, spares = short
    return (f"{short_role(pools, excluded, roles)}: no spare of its kind is left (--role {role}={need}:spare={spares + 1} "
            f"holds {'one' if not spares else 'one more'}), and a heterogeneous job is not requeued")


def requeue_size(nodes: int, ntasks: int, spares: int, usable: int, cpus_per_task: int = 1) -> tuple[str, ...]:
    """Pure: `scontrol update` fields that shrink a job being requeued to the `usable` nodes
    left (not excluded, not gone), spares first, never below the `nodes` a start needs; ()
    when it fits as it is. Tasks and CPUs follow: the script asks --ntasks-per-node, and a
    job of 3 tasks (12 CPUs) at 1 per node is never runnable on 2 (seen on the testbed)."""
    count = max(nodes, min(nodes + spares, usable))
    if count == nodes + spares:
        return ()
    tasks = count * -(-ntasks // nodes)
    return f"NumNodes={count}", f"NumTasks={tasks}", f"NumCPUs={tasks * cpus_per_task}"


def batch_node_lost(host: str) -> Verdict:
    """The watcher's verdict (batchwatch.py): the batch node is gone, and the batch script,
    the supervisor and rank 0 with it."""
    return Verdict("machine", f"the batch node {host} was lost (and the restart supervisor with it)", (host,),
                   lost=True)
