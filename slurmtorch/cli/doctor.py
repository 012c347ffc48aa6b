"""`slurmtorch doctor`: check this node, or (--allocation) the whole allocation, against the site."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from slurmtorch.cli._common import cluster_option, on_cluster


def doctor(
    ctx: typer.Context,
    site: Optional[str] = typer.Option(None, "--site", help="site name or path (default: $SLURMTORCH_SITE, else the job's own site; where Slurm is not, local)"),
    node_type: Optional[str] = typer.Option(None, "--node-type", help="node type to check against (default: the partition's)"),
    partition: Optional[str] = typer.Option(None, "--partition", "-p", help="partition whose node type applies"),
    preset: Optional[str] = typer.Option(None, "--preset", help="preset whose environment applies"),
    allocation: bool = typer.Option(False, "--allocation",
                                    help="inside salloc/sbatch: launch one rank per node (srun) and check the "
                                         "layout, MASTER_ADDR reachability and all_reduce bandwidth"),
    ntasks_per_node: Optional[int] = typer.Option(None, "--ntasks-per-node", show_default=False,
                                                  help="ranks per node for --allocation (default: the "
                                                       "allocation's tasks per node, else 1)"),
    max_bytes: int = typer.Option(16 << 20, "--max-bytes", help="largest all_reduce message for --allocation"),
    timeout: int = typer.Option(120, "--timeout", help="seconds for the whole --allocation step"),
    cluster: Optional[str] = cluster_option(),
) -> int:
    """Check torch, GPUs, InfiniBand, interfaces, MPI/PMIx and the site's environment here.

    Every line is ok, warn or fail with its fix; the exit code is 1 if anything failed.
    With --cluster: on that cluster's login host, with its site.
    """
    remote = on_cluster(ctx, cluster, site=True)
    if remote is not None:
        return remote
    from slurmtorch.usecases import doctor as checking  # lazy: `slurmtorch --help` must not import yaml or the checks

    return checking.check(site, node_type, partition, preset, allocation, ntasks_per_node, max_bytes, timeout,
                          sys.stdout, sys.stderr)
