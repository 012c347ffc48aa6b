"""`slurmtorch site list|show|validate|schema`: inspect the admin's site configs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typing import Optional

import typer

from slurmtorch.cli._common import cluster_option, on_cluster
from slurmtorch.errors import SiteError
from slurmtorch.submit.inputs import file_problem

app = typer.Typer(help="Inspect and validate site configs.", no_args_is_help=True, add_completion=False,
                  pretty_exceptions_show_locals=False, rich_markup_mode=None)


@app.command("list")
def list_sites(ctx: typer.Context, cluster: Optional[str] = cluster_option()) -> int:
    """Every site on the search path: name, description, file."""
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    from slurmtorch.submit import sites  # lazy: `slurmtorch --help` builds every verb and must not import yaml

    for name, path in sorted(sites.available_sites().items()):
        try:
            desc = sites.load_site(path).description
        except SiteError as e:
            desc = f"(invalid: {e.message})"
        print(f"{name}\t{desc}\t{path}")
    return 0


@app.command("show")
def show(ctx: typer.Context, name: str = typer.Argument(..., metavar="NAME|PATH"),
         cluster: Optional[str] = cluster_option()) -> int:
    """The merged, validated site, with each node type's network environment."""
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    import yaml  # lazy: as in list_sites

    from slurmtorch.submit import sites  # lazy: as in list_sites

    data = sites.site_as_dict(sites.load_site(name))
    sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    return 0


@app.command("validate")
def validate(ctx: typer.Context, path: str = typer.Argument(..., metavar="NAME|PATH"),
             cluster: Optional[str] = cluster_option()) -> int:
    """Load and validate a site file, or a site on the search path by name (as --site takes
    it); every problem found, each on its own `error:` line (with its `tip:`), then how many.
    With --cluster: a site of the cluster's (its file, or its name there)."""
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    from slurmtorch.submit import sites  # lazy: as in list_sites

    p = Path(path)
    if not p.exists() and "/" not in path:
        p = sites.available_sites().get(path, p)
        path = str(p)
    problem = file_problem(p)
    if problem:
        raise SiteError(f"site file {path} {problem}")
    try:
        site = sites.load_site(p)
    except SiteError as e:
        if len(e.problems) == 1:
            raise
        print(e.render_all(), file=sys.stderr)
        print(f"{len(e.problems)} problems in {path}", file=sys.stderr)
        return e.exit_code
    print(f"ok: {path}: site {site.name!r}, {len(site.partitions)} partitions, {len(site.node_types)} node types",
          file=sys.stderr)
    return 0


@app.command("schema")
def json_schema() -> int:
    """The JSON schema of site files."""
    from slurmtorch.submit.sites import schema  # lazy: as in list_sites (the schema table and its modules)

    print(json.dumps(schema.json_schema(), indent=2))
    return 0
