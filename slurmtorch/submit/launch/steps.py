"""The launch as data: a job's launch is a tuple of `Step`s, each what runs, on which nodes, with
which environment prefix, where its output goes and what its end means (pure).

One planner per launch shape builds the tuple (`submit/launch/launchplan.py`; Ray's in
`submit/launch/raycluster.py`), and one template loop renders it (`templates/_macros.sh.j2`'s `run`):
a new shape is a planner, not a branch in the template. This is TorchX's replicas and
NeMo-Run's groups, with our quoting (`scripttext`) kept: every word here is unquoted.
"""

from __future__ import annotations

from dataclasses import dataclass

# What a step's end means to the job.
JOB = "job"  # its code is the job's; the job waits for every such step; its failure stops the others
SERVICE = "service"  # serves the job steps (ps, evaluator): stopped once they end; its failure stops them
VITAL = "vital"  # a service the job cannot run without (a Ray node): its end, however it ends, stops the job
CHECK = "check"  # runs before the launch (the node prologue); its failure ends the job
CLEANUP = "cleanup"  # runs once the job steps have ended (Ray's stop on every node); its end means nothing


@dataclass(frozen=True)
class Step:
    """One program started on the allocation, by srun (or mpirun in it), unquoted."""

    name: str  # what the job's lines call it: `role worker`, `Ray head`, `ranks`
    argv: tuple[str, ...]  # what runs, after the launcher's options
    options: tuple[str, ...] = ()  # the launcher's: layout, binding, outputs (--output/--error), containers
    # Its nodes: (offset, count) of the script's ordered node list (`nodes`, one per role in role
    # order); None: the launcher's own choice (the allocation, or its --het-group's component).
    nodes: tuple[int, int] | None = None
    env: tuple[str, ...] = ()  # `env -u NAME... NAME=VALUE...` before the launcher: a component's node type
    end: str = JOB
    args: bool = True  # the program takes the script's arguments (a sweep trial's --NAME VALUE)
    launcher: str = "srun"  # or `"$mpirun"` (mpirun in an allocation, `slurmtorch mpirun`), found by the script
    stderr: str = ""  # a file in the job folder for the launcher's own lines (the node prologue's)
    logs: str = ""  # its output in the job folder, as a check's failure line names it

    def command(self) -> list[str]:
        """The step as one argv, for a step run from Python (the doctor's `--allocation`)."""
        if self.nodes is not None or self.launcher != "srun":
            raise ValueError(f"step {self.name!r} needs the batch script (its node list, its launcher)")
        return [*self.env, self.launcher, *self.options, *self.argv]
