"""What batch.out says of a job as a whole, not of one rank (pure): Slurm ending it at its
time limit, the batch script's own failures (the restart supervisor killed, a --ray node
whose Ray died or never started, the first node's python without slurmtorch, the node
prologue), the part the latest start wrote, and Slurm refusing to
create or launch a step. `failures` reads the ranks' own words."""

from __future__ import annotations

import re

from slurmtorch import protocol
from slurmtorch.submit.jobfolder.failures import NO_SLURMTORCH_RE, SRUN_TASK_RE, expand_tasks

# Slurm refusing to create or launch a step (a node taken out of the job, one not answering):
# srun's words before any task ran.
_REFUSED_RE = re.compile(r"^srun: error: (?:Unable to create step for job \S+|Application launch failed"
                         r"|Task launch for \S+ failed on node (?P<node>[^\s:]+)): (?P<why>.+?)\s*$", re.MULTILINE)


# slurmstepd's line in batch.out (the batch step's, and srun's for its step) when Slurm ends a job at its
# time limit: `slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT 2026-01-05T10:00:00 DUE TO TIME LIMIT ***`.
_TIME_LIMIT_RE = re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO TIME LIMIT \*\*\*")


def ran_out_of_time(batch_out: str) -> bool:
    """Whether Slurm ended the job at its time limit (TIMEOUT), as slurmstepd said in batch.out."""
    return bool(_TIME_LIMIT_RE.search(batch_out))


def batch_failures(batch_out: str, prologue_err: str) -> list[str]:
    """What failed in the batch script itself: its python (which picks the port on the first
    node) without slurmtorch, the node prologue (`prologue_failures`), the restart supervisor
    killed (the ranks' own ends are its consequence), or a --ray job's node whose Ray died or
    never started (its step's exit is not a rank's)."""
    killed = protocol.SUPERVISOR_KILLED_RE.search(batch_out)
    if killed:
        return [f"the restart supervisor on the batch node was killed by {killed['signal']} (exit {killed['code']}); "
                "the job ended with it, and nothing restarted it"]
    died = [f"Ray {m['kind']} on {m['node']} {m['what']}: {m['why']}" for m in protocol.RAY_FAILED_RE.finditer(batch_out)]
    if died:
        return died
    if NO_SLURMTORCH_RE.search(batch_out):
        return ["the job's python on its first node has no slurmtorch (the site's `python:` must be an "
                "interpreter the compute nodes share with slurmtorch installed)"]
    return prologue_failures(batch_out, prologue_err)


def prologue_failures(batch_out: str, prologue_err: str) -> list[str]:
    """The node prologue's failure, if the batch script said it failed: one cause per node srun
    named (`node2: exited with exit code 1 (its output: node-prologue-1.out)`), else one line."""
    if protocol.PROLOGUE_FAILED not in batch_out:
        return []
    causes = []
    for ln in prologue_err.splitlines():
        m = SRUN_TASK_RE.match(ln)
        if m:
            for t in expand_tasks(m["tasks"]):
                causes.append(f"the node prologue on {m['host']}: {m['what'].lower()} (its output: "
                              f"node-prologue-{t}.out)")
    return causes or ["the node prologue failed before any node ran it (node-prologue.err says why)"]


def latest_start(text: str) -> str:
    """The part of a log that the latest start wrote: after the last restart line, if any.
    A restarted job's logs grow across its starts; an earlier start's failure is history."""
    last = None
    for last in protocol.START_RE.finditer(text):
        pass
    return text[last.end():] if last else text


def step_refusal(batch_out: str) -> tuple[str, tuple[str, ...]] | None:
    """srun's reason when Slurm did not create or launch the step, with the nodes it named
    (`Task launch for StepId=5.1 failed on node node3: ...`); None when it said no such thing."""
    found = list(_REFUSED_RE.finditer(batch_out))
    if not found:
        return None
    nodes = tuple(dict.fromkeys(m["node"] for m in found if m["node"]))
    return found[0]["why"], nodes

