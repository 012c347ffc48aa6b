"""`slurmtorch site list|show|validate|changes|schema|init`: inspect the admin's site configs, or write a first one."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from typing import Optional

import typer

from slurmtorch import protocol, resources, shell
from slurmtorch.cli._common import cluster_option, on_cluster
from slurmtorch.errors import SiteError, typed
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
    from slurmtorch.submit.sites.fabric import CURRENT_EDITION, EDITIONS

    if site.fabric_defaults is not None and site.fabric_defaults < CURRENT_EDITION:
        print(f"note: pinned to edition {site.fabric_defaults} of the fabric defaults (the current one is "
              f"{CURRENT_EDITION}); what a newer one changes in its jobs: slurmtorch site changes {shell.quote(path)}",
              file=sys.stderr)
    # The bundled presets ship with the edition they were checked against: never noted.
    editioned = sorted({nt.fabric for nt in site.node_types} & set(EDITIONS[CURRENT_EDITION]))
    if site.fabric_defaults is None and editioned and not site.interfaces_only and not _bundled(site.source):
        print(f"note: not pinned: its jobs take the current edition ({CURRENT_EDITION}) of the "
              f"{', '.join(editioned)} defaults, and a newer slurmtorch's changes; pin it with fabric_defaults: "
              f"{CURRENT_EDITION} (slurmtorch site changes shows what each edition changes)", file=sys.stderr)
    return 0


def _bundled(source: str) -> bool:
    try:
        return Path(source).resolve().parent == resources.site_configs_dir().resolve()
    except FileNotFoundError:  # an install without the bundled presets
        return False


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
    from slurmtorch.submit import sites  # lazy: as in list_sites
    from slurmtorch.submit.sites.fabric import CURRENT_EDITION, EDITION_NOTES, EDITIONS

    site = sites.load_site(name)
    first = since if since is not None else site.fabric_defaults or 1
    if first not in EDITIONS:
        raise SiteError(f"--from {first}: no such edition of the fabric defaults",
                        tip=f"editions: {', '.join(map(str, EDITIONS))}")
    pin = (f"pinned to edition {site.fabric_defaults}" if site.fabric_defaults is not None
           else f"not pinned: its jobs render with the current edition, {CURRENT_EDITION}")
    print(f"site {site.name} ({site.source}): {pin}; the current edition is {CURRENT_EDITION}")
    for edition in range(first + 1, CURRENT_EDITION + 1):
        print(f"edition {edition}: {EDITION_NOTES[edition]}")
        lines = site.edition_changes(edition - 1, edition)
        for line in lines or ["no change to what this site renders"]:
            print(f"  {line}")
    return 0


@app.command("schema")
def json_schema() -> int:
    """The JSON schema of site files."""
    from slurmtorch.submit.sites import schema  # lazy: as in list_sites (the schema table and its modules)

    print(json.dumps(schema.json_schema(), indent=2))
    return 0


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
    from slurmtorch.submit import sites  # lazy: as in list_sites
    from slurmtorch.submit.edge import queries
    from slurmtorch.submit.sites import discover
    from slurmtorch.submit.sites.model import NAME_RE, NAME_TIP

    target = None if path in (None, "-") else Path(path)
    if target is not None and target.exists() and not force:
        raise SiteError(f"{path} exists: site init writes only a new file", tip="pass --force to replace it")
    stem = name or (target.stem if target is not None else "site")
    if not NAME_RE.fullmatch(stem):
        raise SiteError(f"invalid site name {stem!r}" + ("" if name else f" (the name of {path})"),
                        tip=f"site {NAME_TIP}" + ("" if name else "; pass --name NAME or rename the file"))
    text = discover.site_yaml(*queries.cluster_self_description(), name=name,
                             title=target.stem if target is not None else None)
    with tempfile.TemporaryDirectory(prefix="slurmtorch-site-init-") as d:
        (Path(d) / f"{stem}.yaml").write_text(text)
        try:
            site = sites.load_site(Path(d) / f"{stem}.yaml")
        except SiteError as e:  # the cluster said something this writer has not met: say what, keep nothing
            raise SiteError(f"the site written from this cluster does not validate: {e.message}",
                            tip=e.tip or "please report it with the output of scontrol show node/partition") from None
    if target is None:
        sys.stdout.write(text)
    else:
        _write_new(target, text, force)
    # On the cluster's side of `--cluster NAME` (the verb runs on its login host), a PATH is
    # written there: said so, with the way to have it where the command was typed.
    there = os.environ.get(protocol.ON_CLUSTER, "")
    host = f"cluster {there}'s login host" if there != "1" else "the cluster's login host"
    where = (f"wrote {target.absolute()} on {host}, not here" if target is not None and there
             else f"wrote {target}" if target is not None else "site file above")
    print(f"{where}: site {site.name!r}, {len(site.partitions)} partitions, {len(site.node_types)} node types; "
          f"{text.count('# CHECK:')} lines marked CHECK: for a person to decide", file=sys.stderr)
    if target is not None and there:
        print(f"tip: to have it here: {typed('site init')} > {shell.quote(target.name)}", file=sys.stderr)
    return 0


def _write_new(target: Path, text: str, force: bool) -> None:
    """`text` as the file `target`, whole or not at all (a temporary beside it, then linked or
    renamed into place); an existing `target` is kept unless `force`."""
    if not target.parent.is_dir():
        raise SiteError(f"cannot write {target}: no folder {target.parent}")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        if force:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)  # refuses a target that appeared meanwhile: never overwritten
    except FileExistsError:
        raise SiteError(f"{target} exists: site init writes only a new file",
                        tip="pass --force to replace it") from None
    except OSError as e:
        raise SiteError(f"cannot write {target}: {e.strerror or e}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
