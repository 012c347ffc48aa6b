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
                                     help="where to put them (default: the folder this laptop submitted the job "
                                          "from; a job it did not submit needs --to)"),
    cluster: Optional[str] = cluster_option(),
) -> int:
    """Bring what a job wrote on a cluster (its checkpoints, outputs/, wandb/: the relative
    files in the folder it was submitted from) back here, over the cluster's SSH connection.

    This laptop picks where, from its own record of what it submitted: never what the job's
    files say. Only what differs travels; never the code you sent, a .git folder or a link.
    Never over a file of yours (one an earlier pull placed and you left alone gives way to
    the job's newer one), nothing deleted or turned into a link or folder, your modes kept;
    new dotfiles and executables are named, and so is every file kept.
    """
    from slurmtorch.remote import forward

    if not forward.elsewhere(cluster):
        raise SpecError("pull brings a job's files from a cluster: give --cluster NAME",
                        tip="on the cluster itself they are already in the folder the job was submitted from")
    from slurmtorch.remote import pull as pulling  # lazy: ssh's edge, only for this verb

    assert cluster is not None  # elsewhere() said so
    return pulling.pull(cluster, job_id, list(paths or []), to)
