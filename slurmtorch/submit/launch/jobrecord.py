"""What a job's folder records of its spec at submission: `job.json` (its launcher and
layout, which say how its logs are named) and, for an array, `trials.json` (every trial's
parameters), for `logs`, `status`, `--wait` and the Distributor."""

from __future__ import annotations

from slurmtorch.submit.launch.spec import JobSpec


def trials_record(spec: JobSpec) -> dict | None:
    """What `trials.json` in an array job's folder holds: the array and every trial's
    parameters (for `status` and `logs --trial`); None for a job without --array/--sweep."""
    if not spec.array:
        return None
    return {"array": spec.array, "sweep": [[n, list(v)] for n, v in spec.sweep],
            "trials": {str(t): dict(params) for t, params in spec.trials}}


def job_record(spec: JobSpec) -> dict:
    """What `job.json` in the job's folder holds: its launcher and layout, which say how its
    logs are named (torchrun: one per node), for `logs`, `--wait` and the Distributor."""
    record: dict = {"launcher": spec.launcher, "nodes": spec.nodes, "ntasks": spec.ntasks,
                    "ntasks_per_node": spec.ntasks_per_node}
    if spec.roles:  # the failure report names each rank's role
        record["roles"] = spec.role_layout.format()
    if spec.max_restarts:  # the story's restarts are counted against it
        record["max_restarts"] = spec.max_restarts
    return record
