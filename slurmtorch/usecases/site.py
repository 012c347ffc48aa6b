"""`site`: the admin's site configs listed, shown, validated, their fabric editions compared,
the schema, and a first site file written from what a cluster says of itself (`init`).

Each returns what the front end prints (`Said`: stdout's text, stderr's lines, the exit
code); a bad site or path is a SiteError, as everywhere.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from slurmtorch import protocol, resources, shell
from slurmtorch.errors import SiteError, typed
from slurmtorch.submit import sites
from slurmtorch.inputs import file_problem
from slurmtorch.submit.sites.fabric import CURRENT_EDITION, EDITION_NOTES, EDITIONS


@dataclass
class Said:
    """What a `site` verb says: text for stdout, lines for stderr, its exit code."""

    out: str = ""
    err: list[str] = field(default_factory=list)
    code: int = 0


def listing() -> Said:
    """Every site on the search path: name, description, file."""
    lines = []
    for name, path in sorted(sites.available_sites().items()):
        try:
            desc = sites.load_site(path).description
        except SiteError as e:
            desc = f"(invalid: {e.message})"
        lines.append(f"{name}\t{desc}\t{path}\n")
    return Said("".join(lines))


def show(name: str) -> Said:
    """The merged, validated site, with each node type's network environment, as YAML."""
    import yaml  # lazy: only `site show` writes YAML

    return Said(yaml.safe_dump(sites.site_as_dict(sites.load_site(name)), sort_keys=False, default_flow_style=False))


def validate(path: str) -> Said:
    """A site file, or a site on the search path by name (as --site takes it), loaded and
    validated: every problem on its own lines and their count (exit non-zero), or ok and what
    to know of its pin to the fabric defaults' editions."""
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
        return Said(err=[e.render_all(), f"{len(e.problems)} problems in {path}"], code=e.exit_code)
    said = Said(err=[f"ok: {path}: site {site.name!r}, {len(site.partitions)} partitions, "
                     f"{len(site.node_types)} node types"])
    if site.fabric_defaults is not None and site.fabric_defaults < CURRENT_EDITION:
        said.err.append(f"note: pinned to edition {site.fabric_defaults} of the fabric defaults (the current one is "
                        f"{CURRENT_EDITION}); what a newer one changes in its jobs: slurmtorch site changes "
                        f"{shell.quote(path)}")
    # The bundled presets ship with the edition they were checked against: never noted.
    editioned = sorted({nt.fabric for nt in site.node_types} & set(EDITIONS[CURRENT_EDITION]))
    if site.fabric_defaults is None and editioned and not site.interfaces_only and not _bundled(site.source):
        said.err.append(f"note: not pinned: its jobs take the current edition ({CURRENT_EDITION}) of the "
                        f"{', '.join(editioned)} defaults, and a newer slurmtorch's changes; pin it with "
                        f"fabric_defaults: {CURRENT_EDITION} (slurmtorch site changes shows what each edition changes)")
    return said


def _bundled(source: str) -> bool:
    try:
        return Path(source).resolve().parent == resources.site_configs_dir().resolve()
    except FileNotFoundError:  # an install without the bundled presets
        return False


def changes(name: str, since: int | None) -> Said:
    """What each edition of the bundled fabric defaults changes in this site's jobs, from
    `since` (default: its pin, else 1) to the current one."""
    site = sites.load_site(name)
    first = since if since is not None else site.fabric_defaults or 1
    if first not in EDITIONS:
        raise SiteError(f"--from {first}: no such edition of the fabric defaults",
                        tip=f"editions: {', '.join(map(str, EDITIONS))}")
    pin = (f"pinned to edition {site.fabric_defaults}" if site.fabric_defaults is not None
           else f"not pinned: its jobs render with the current edition, {CURRENT_EDITION}")
    lines = [f"site {site.name} ({site.source}): {pin}; the current edition is {CURRENT_EDITION}"]
    for edition in range(first + 1, CURRENT_EDITION + 1):
        lines.append(f"edition {edition}: {EDITION_NOTES[edition]}")
        lines += [f"  {line}" for line in site.edition_changes(edition - 1, edition) or
                  ["no change to what this site renders"]]
    return Said("".join(f"{line}\n" for line in lines))


def schema() -> Said:
    """The JSON schema of site files."""
    from slurmtorch.submit.sites import schema as table  # lazy: the schema table, only for this

    return Said(json.dumps(table.json_schema(), indent=2) + "\n")


def init(path: str | None, name: str | None, force: bool) -> Said:
    """A first site file from what this cluster says of itself, validated in a scratch folder
    before it is written to `path` (whole, and only new unless `force`), or to stdout."""
    from slurmtorch.submit.edge import queries  # lazy: the edge, only init asks the cluster
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
    if target is not None:
        _write_new(target, text, force)
    # On the cluster's side of `--cluster NAME` (the verb runs on its login host), a PATH is
    # written there: said so, with the way to have it where the command was typed.
    there = os.environ.get(protocol.ON_CLUSTER, "")
    host = f"cluster {there}'s login host" if there != "1" else "the cluster's login host"
    where = (f"wrote {target.absolute()} on {host}, not here" if target is not None and there
             else f"wrote {target}" if target is not None else "site file above")
    said = Said(text if target is None else "",
                [f"{where}: site {site.name!r}, {len(site.partitions)} partitions, {len(site.node_types)} node "
                 f"types; {text.count('# CHECK:')} lines marked CHECK: for a person to decide"])
    if target is not None and there:
        said.err.append(f"tip: to have it here: {typed('site init')} > {shell.quote(target.name)}")
    return said


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
