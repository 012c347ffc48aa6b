"""The batch node's word with Slurm about its own job: its fields, which of its nodes are
gone, requeueing it (without the nodes to keep out, shrunk to what is left) and cancelling
it. Runs scontrol, sinfo and scancel (the requeue through `slurmtorch.requeue`)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence

import hostlist

from slurmtorch import events, protocol
from slurmtorch import requeue as requeuing
from slurmtorch.errors import SubmitError
from slurmtorch.submit.batchnode.record import say
from slurmtorch.submit.batchnode.restarts import dead_nodes, requeue_size


def requeue(job: str, excluded: Sequence[str], layout: tuple[int, int, int] | None = None, why: str = "") -> bool:
    """Requeue the job without the excluded nodes (`slurmtorch.requeue`, the one path); True
    once Slurm has it (it then ends us). The requeue's TERM is ignored here: the update that
    excludes the nodes follows it, while the job is completing. With `layout` (Args.layout)
    a job that fewer usable nodes are left for than it held is shrunk to them, spares first
    (restarts.requeue_size): it would otherwise wait for ever for nodes it excludes.
    """
    # Everything the update needs is asked first: once the requeue is under way the job's
    # KILL may come within KillWait.
    nodes = sorted({*excluded, *requeuing.excluded_now(job)})
    size = _size(job, nodes, layout) if layout else ()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the requeue's TERM; its KILL ends us
    try:
        requeuing.requeue(job)
    except SubmitError as exc:
        say(f"error: {exc.message}")
        return False
    try:
        say(protocol.requeued_without_line(job, requeuing.exclude(job, nodes, extra=size)))
    except SubmitError as exc:
        say(f"warning: job {job} requeued, but excluding {','.join(nodes)} failed: {exc.message}")
    _noted(why, nodes)
    return True


def _noted(why: str, excluded: Sequence[str], by: str = "supervisor") -> None:
    """The requeue in the job's record (after the update: that has to land before the KILL)."""
    folder = os.environ.get(protocol.JOB_DIR)
    if folder:
        events.append(folder, "requeued", by=by, why=why, excluded=list(excluded),
                      attempt=int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0))


def _size(job: str, excluded: Sequence[str], layout: tuple[int, int, int]) -> tuple[str, ...]:
    """restarts.requeue_size for the nodes of the job's partition it could run on now: not
    excluded, not gone."""
    fields = job_fields(job)
    proc = subprocess.run(["sinfo", "-h", "-N", "-p", fields.get("Partition", ""), "-o", "%N %t"],
                          capture_output=True, text=True, timeout=60)
    states = dict(ln.split() for ln in proc.stdout.splitlines() if len(ln.split()) == 2)
    usable = len(states) - len(dead_nodes(list(states), set(states) - set(excluded), states))
    cpus = fields.get("CPUs/Task", "1")
    return requeue_size(*layout, usable, int(cpus) if cpus.isdigit() else 1)


def job_fields(job: str) -> dict[str, str]:
    """`scontrol -o show job JOB` as KEY -> value ({} when scontrol fails: ask again later)."""
    try:
        proc = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(token.partition("=")[::2] for token in proc.stdout.split()) if proc.returncode == 0 else {}


HET_NODELIST = "SLURM_JOB_NODELIST_HET_GROUP_{}"  # a heterogeneous job's component K's nodes, in its batch script


def heterogeneous(env: Mapping[str, str]) -> bool:
    """Whether this batch script is a heterogeneous job's: Slurm then lists each component's
    nodes on its own (HET_NODELIST), and the job's NodeList is the first component's."""
    return HET_NODELIST.format(0) in env


def dead_now(job: str, allocated: Sequence[str], listed: bool = True) -> tuple[str, ...]:
    """The job's nodes that Slurm says are gone (restarts.dead_nodes): no longer in the job's
    NodeList (a --no-kill job loses a failed node that way), or down or not answering.
    Not `listed`: a heterogeneous job, whose NodeList is its first component's; sinfo alone says."""
    fields = job_fields(job) if listed else {}
    job_nodes = hostlist.expand_hostlist(fields["NodeList"]) if fields.get("NodeList") else allocated
    try:
        proc = subprocess.run(["sinfo", "-h", "-N", "-n", ",".join(allocated), "-o", "%N %t"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        proc = None
    states = dict(ln.split() for ln in (proc.stdout if proc else "").splitlines() if len(ln.split()) == 2)
    return dead_nodes(allocated, job_nodes, states)


def cancel(job: str) -> None:
    """End the job (scancel): what is left to do when no restart is."""
    subprocess.run(["scancel", job], capture_output=True, text=True, timeout=60)


def requeue_alone(job: str, why: str = "", excluded: Sequence[str] = ()) -> bool:
    """`scontrol requeue JOB` and nothing after it, for the watcher (batchwatch.py): Slurm
    completes the requeue only once every step has ended, the watcher's own included, and
    takes ExcNodeList only after that (the testbed: an update 5 s later was still refused,
    `the DB index is being set`), so the watcher cannot set it. The node stays out all the
    same: restarts.json excludes it from every start, and a run that Slurm places on it is
    requeued again without it, by the supervisor (requeue)."""
    try:
        requeuing.requeue(job)
    except SubmitError as exc:
        say(f"error: {exc.message}")
        return False
    _noted(why, excluded, by="watcher")
    return True
