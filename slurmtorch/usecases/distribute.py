"""A `Distributor`'s job, once for the Python API and the cluster side of `cluster=`.

Its spec (`spec`): the CLI's `Options`, filled from the Distributor's settings, with the rank
layout planned on the partition and node type the options land on, every rank running
`runfn`; its run folder (`new_run`); and its start (`start`): the mpirun script run here in a
session of its own, or the batch script submitted, either way a handle that answers `Job`'s
questions (`handles`).
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurmtorch import protocol
from slurmtorch.submit.launch import spec as specmod
from slurmtorch.submit.launch.allocation import resolve_target
from slurmtorch.submit.jobfolder import jobdir, localrun
from slurmtorch.options import Options
from slurmtorch.submit.sites.model import NodeType, Partition, Site
from slurmtorch.submit.launch.jobrecord import job_record
from slurmtorch.submit.launch.spec import JobSpec
from slurmtorch.usecases import launch
from slurmtorch.usecases.handles import Handle, LocalHandle, SlurmHandle

# (preset, partition, node type) -> (nodes, ranks per node, GPUs per node): the Distributor's layout
Planner = Callable[[dict[str, Any], Partition, NodeType], tuple[int, int, int | None]]


def spec(site: Site, given: dict[str, Any], kind: str, plan: Planner | None, partition: str | None,
         **more: Any) -> JobSpec:
    """The spec of a Distributor's job: `given` (Options' fields by name) in this process's jobs
    folder; for a Slurm job the rank layout `plan` makes on the partition and node type the
    options land on; every rank running runfn, whose argv is its run folder alone (a preset's
    --local-rank-arg is for the scripts the CLI starts, not for it)."""
    given = {**given, "job_root": str(jobdir.jobs_root())}
    if kind == "mpirun" or plan is None:
        job = specmod.build_spec(site, Options.given(given, kind=kind, **more))
    else:
        preset, part, node = resolve_target(site, Options.given(given, partition=partition))
        nodes, per_node, gpus = plan(preset, part, node)
        job = specmod.build_spec(site, Options.given(given, kind=kind, partition=part.name, nodes=nodes,
                                                     ntasks_per_node=per_node, gpus_per_node=gpus, **more))
    return dataclasses.replace(job, local_rank_arg=None)


def new_run() -> tuple[str, Path]:
    """A new run's id (time and a random token) and its folder's place under $SLURMTORCH_HOME/distributor."""
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
    return run_id, jobdir.jobs_root().parent / "distributor" / run_id


def start(rendered: launch.RenderedJob, workdir: Path, run_id: str, say: Callable[[str], None]) -> Handle:
    """The job started: a local run's script here (its environment names the run folder), else
    the batch script submitted with its run folder in job.json; its handle."""
    job = rendered.spec
    if job.kind == "mpirun":
        env = launch.local_environment(rendered, localrun.environment(workdir), say)
        return LocalHandle.start(rendered.text, workdir, run_id, job.ntasks, env)
    sub = launch.submit(rendered, record={protocol.RUN_FOLDER: str(workdir)})
    return SlurmHandle(sub.job_id, sub.job_dir, rendered.root, jobdir.torchrun_layout(job_record(job)))

