"""`slurmtorch site list|show|validate|changes|schema|init`: inspect the admin's site configs, or write a first one."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from slurmtorch.cli._common import cluster_option, on_cluster

app = typer.Typer(help="Inspect and validate site configs.", no_args_is_help=True, add_completion=False,
                  pretty_exceptions_show_locals=False, rich_markup_mode=None)


@app.command("list")
def list_sites(ctx: typer.Context, cluster: Optional[str] = cluster_option()) -> int:
    """Every site on the search path: name, description, file."""
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    from slurmtorch.usecases import site as sites  # lazy: `slurmtorch --help` must not import yaml

    return _said(sites.listing())


@app.command("show")
def show(ctx: typer.Context, name: str = typer.Argument(..., metavar="NAME|PATH"),
         cluster: Optional[str] = cluster_option()) -> int:
    """The merged, validated site, with each node type's network environment."""
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    from slurmtorch.usecases import site as sites  # lazy: `slurmtorch --help` must not import yaml

    return _said(sites.show(name))


@app.command("validate")
def validate(ctx: typer.Context, path: str = typer.Argument(..., metavar="NAME|PATH"),
             cluster: Optional[str] = cluster_option()) -> int:
    """Load and validate a site file, or a site on the search path by name (as --site takes
    it); every problem found, each on its own `error:` line (with its `tip:`), then how many.
    With --cluster: a site of the cluster's (its file, or its name there)."""
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    from slurmtorch.usecases import site as sites  # lazy: `slurmtorch --help` must not import yaml

    return _said(sites.validate(path))


@app.command("changes")
def changes(ctx: typer.Context, name: str = typer.Argument(..., metavar="NAME|PATH"),
            since: Optional[int] = typer.Option(None, "--from", metavar="N",
                                                help="the edition to compare from (default: the site's "
                                                     "fabric_defaults pin, else 1)"),
            cluster: Optional[str] = cluster_option()) -> int:
    """What each edition of slurmtorch's bundled fabric defaults changes in this site's jobs
    (exported variables, #SBATCH lines), from its pinned edition to the current one: read it
    before moving the site's `fabric_defaults:` pin."""
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    from slurmtorch.usecases import site as sites  # lazy: `slurmtorch --help` must not import yaml

    return _said(sites.changes(name, since))


@app.command("schema")
def json_schema() -> int:
    """The JSON schema of site files."""
    from slurmtorch.usecases import site as sites  # lazy: `slurmtorch --help` must not import yaml

    return _said(sites.schema())


@app.command("init")
def init(ctx: typer.Context,
         path: Optional[str] = typer.Argument(None, metavar="[PATH]", help="where to write it; - or none: stdout"),
         name: Optional[str] = typer.Option(None, "--name", metavar="NAME", help="the site's name (default: PATH's "
                                            "file name less its extension, as a site file is named)"),
         force: bool = typer.Option(False, "--force", help="replace PATH if it exists"),
         cluster: Optional[str] = cluster_option()) -> int:
    """A starting site file from what this cluster says of itself (scontrol show node, partition
    and config, srun --mpi=list): node types, partitions, MaxArraySize, srun's MPI plugin; the fabric, its
    interfaces and the modules marked `# CHECK:`. Validated before it is written to PATH (whole
    or not at all; an existing PATH is kept unless --force) or, without PATH or with -, to stdout."""
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    from slurmtorch.usecases import site as sites  # lazy: `slurmtorch --help` must not import yaml

    return _said(sites.init(path, name, force))


def _said(said) -> int:
    sys.stdout.write(said.out)
    for line in said.err:
        print(line, file=sys.stderr)
    return said.code
