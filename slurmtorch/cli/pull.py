"""`slurmtorch pull JOBID [PATH]... --cluster NAME`: a job's files from a cluster, here."""

from __future__ import annotations

from typing import List, Optional

import typer

from slurmtorch.cli._common import cluster_option
from slurmtorch.errors import SpecError


def pull(
    job_id: str = typer.Argument(..., metavar="JOBID", show_default=False, help="the job"),
    paths: Optional[List[str]] = typer.Argument(None, metavar="[PATH]...", show_default=False,
                                                help="files or folders, relative to the folder the job was submitted "
                                                     "from (default: all it holds but the code)"),
    to: Optional[str] = typer.Option(None, "--to", metavar="DIR",
                                     help="where to put them (default: the folder the job was submitted from, if "
                                          "it was this host's; else here)"),
    cluster: Optional[str] = cluster_option(),
) -> int:
    """Bring what a job wrote on a cluster (its checkpoints, outputs/, wandb/: the relative
    files in the folder it was submitted from) back here, over the cluster's SSH connection.

    rsync: only what changed; never the code you sent (your copy here is the one you edit),
    never over a file that is newer here, nothing deleted.
    """
    from slurmtorch.remote import forward

    if not forward.elsewhere(cluster):
        raise SpecError("pull brings a job's files from a cluster: give --cluster NAME",
                        tip="on the cluster itself they are already in the folder the job was submitted from")
    from slurmtorch.remote import pull as pulling  # lazy: ssh's edge, only for this verb

    assert cluster is not None  # elsewhere() said so
    return pulling.pull(cluster, job_id, list(paths or []), to)
