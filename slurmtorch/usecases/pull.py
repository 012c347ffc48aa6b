"""A pull's cluster side (`slurmtorch pull --cluster`): what it needs to know of the job here.

The job's id checked, Slurm's word on it (`scontrol show job`: its WorkDir, its state) and the
code the laptop sent for it (its snapshot's manifest, read bounded), which a pull leaves
out. `remote/pullsource` checks the folder and answers the laptop.
"""

from __future__ import annotations

import json

from slurmtorch import readback
from slurmtorch.protocol import SNAPSHOT
from slurmtorch.submit.edge import queries
from slurmtorch.submit.jobfolder import jobdir

SNAPSHOT_MAX = 64 << 20  # as flightdump's cap: a manifest of the snapshot's limit fits


def job_fields(job_id: str) -> tuple[str, dict[str, str]]:
    """The job's id, checked, and Slurm's fields of it ({} once Slurm forgot it)."""
    job = jobdir.check_job_id(job_id)
    return job, queries.scontrol_job(job, multiline=True) or {}


def code_files(job: str) -> list[str]:
    """The code the laptop sent, relative to the working folder: the job's snapshot.json's
    manifest (read bounded; none without one: then nothing is left out for being code)."""
    try:
        folder = jobdir.checked(jobdir.job_dir(job))
        data = readback.read_bytes(folder / SNAPSHOT, SNAPSHOT_MAX)
        record = json.loads(data) if data else {}
    except (readback.NotRead, OSError, ValueError):
        return []
    if not isinstance(record, dict) or not isinstance(record.get("manifest"), list):
        return []
    inside = str(record.get("cwd") or "")
    code = [str(m[0]) for m in record["manifest"] if isinstance(m, list) and m]
    return [c[len(inside) + 1:] if inside else c for c in code if not inside or c.startswith(inside + "/")]
