"""Site configs: the admin's description of a cluster, found by name and loaded once.

A site is a YAML file (see `site-configs/` and `slurmtorch site schema`). It is found
by path or by name on a search path, may `extends:` another site (deep merge), and is
validated on load (`site_rules`, over `site_schema`'s table): every error names the file, the key path, the line
where YAML knows it, and what would have been valid. Everything downstream works on
the frozen `cluster.Site`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from slurmtorch import resources, shell
from slurmtorch.errors import SiteError, SpecError, typed
from slurmtorch.submit.sites.model import NAME_RE, NAME_TIP, Site, SrunRemoval, valid_tip
from slurmtorch.inputs import file_problem
from slurmtorch.submit.sites.rules import validate
from slurmtorch.submit.sites.safe_yaml import Marked, deep_merge, read_yaml, where


def search_path() -> list[Path]:
    """Folders searched for `<name>.yaml`, first match wins."""
    dirs: list[Path] = []
    for part in os.environ.get("SLURMTORCH_SITE_PATH", "").split(os.pathsep):
        if part:
            dirs.append(Path(part).expanduser())
    dirs.append(Path("/etc/slurmtorch/sites"))
    dirs.append(Path("~/.config/slurmtorch/sites").expanduser())
    try:
        dirs.append(resources.site_configs_dir())
    except FileNotFoundError:
        pass
    return dirs


def _looks_like_path(ref: str) -> bool:
    return os.sep in ref or ref.endswith((".yaml", ".yml")) or ref.startswith(".")


def find_site(ref: str) -> Path:
    """Resolve `--site`: an existing path, else a name on the search path."""
    if _looks_like_path(ref):
        p = Path(ref).expanduser()
        problem = file_problem(p)
        if problem is None:
            return p
        raise SiteError(f"site file {ref} {problem}", tip=f"pass an existing path or a site name ({typed('site list')})")
    if not NAME_RE.fullmatch(ref):
        raise SiteError(f"invalid site name {ref!r}", tip=f"site {NAME_TIP}")
    for d in search_path():
        for ext in (".yaml", ".yml"):
            p = d / f"{ref}{ext}"
            if p.is_file():
                return p
    names = sorted(available_sites())
    raise SiteError(
        f"unknown site {ref!r} (searched {', '.join(str(d) for d in search_path())})",
        tip=valid_tip(ref, names, "sites"),
    )


def available_sites() -> dict[str, Path]:
    """Every site name on the search path and the file it resolves to."""
    found: dict[str, Path] = {}
    for d in search_path():
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir()):
            if p.suffix in (".yaml", ".yml") and p.is_file():
                found.setdefault(p.stem, p)
    return found


def load_site(ref: str | os.PathLike) -> Site:
    """Find, merge (`extends:`) and validate a site by name or path."""
    path = find_site(str(ref)) if not isinstance(ref, Path) else ref
    return validate(_load_merged(path, chain=()), path)


def _load_merged(path: Path, chain: tuple[Path, ...]) -> Marked:
    """The site file at `path` merged over its `extends:` chain."""
    real = path.resolve()
    if real in chain:
        cycle = " -> ".join(str(p) for p in (*chain, real))
        raise SiteError(f"{path}: extends cycle: {cycle}")
    data = read_yaml(path)
    parent = data.get("extends")
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise SiteError(f"{where(data, 'extends', path)}: extends: expected a site name or path")
    if _looks_like_path(parent) and not os.path.isabs(parent):
        parent_path = path.parent / parent
        problem = file_problem(parent_path)
        if problem:
            raise SiteError(f"{where(data, 'extends', path)}: extends: site file {parent} {problem}")
    else:
        try:
            parent_path = find_site(parent)
        except SiteError as e:
            raise SiteError(f"{where(data, 'extends', path)}: extends: {e.message}", tip=e.tip) from None
    base = _load_merged(parent_path, chain=(*chain, real))
    base = Marked(base) if not isinstance(base, Marked) else base
    # A child's name/templates are its own; the rest is inherited.
    base.pop("name", None)
    merged = deep_merge(base, data)
    merged.pop("extends", None)
    if "templates" in data:
        merged["templates"] = str((path.parent / data["templates"]).resolve())
    elif "templates" in base:
        merged["templates"] = base["templates"]
    return merged


def site_as_dict(site: Site) -> dict[str, Any]:
    """A plain, JSON/YAML-friendly view of a merged site (for `site show`)."""
    out: dict[str, Any] = {
        "name": site.name,
        "source": site.source,
        "description": site.description,
        "launcher": site.launcher,
        "srun_mpi": site.srun_mpi,
        "omp_num_threads": site.omp_num_threads,
        "placement": site.placement,
        "max_array_size": site.max_array_size,
        "python": site.python,
        "timeout": site.timeout,
        "module_purge": site.module_purge,
        "module_use": list(site.module_use),
        "modules": list(site.modules),
        "env": _env(site.env),
        "prepend_path": _paths(site.prepend_path),
        "append_path": _paths(site.append_path),
        "directives": dict(site.directives),
        "required": list(site.required),
        "gpu_request": site.gpu_request,
        "refused_options": dict(site.refused_options),
        "mpirun": {"flavour": site.mpirun.flavour, "ranks_per_node": site.mpirun.ranks_per_node,
                   "cpu_bind": site.mpirun.cpu_bind, "depth": site.mpirun.depth, "gpu_order": site.mpirun.gpu_order},
        "srun_args": _srun(site.srun_args),
        "after_modules": list(site.after_modules),
        "prologue": list(site.prologue),
        "node_prologue": list(site.node_prologue),
        "epilogue": list(site.epilogue),
        "templates": site.templates,
        "fabric_defaults": site.fabric_defaults,
        "fabric_env": site.fabric_env,
        "container": _container(site.container),
        "node_types": {},
        "partitions": {},
        "presets": {name: {k: _preset_value(k, v) for k, v in body} for name, body in site.presets},
    }
    for nt in site.node_types:
        out["node_types"][nt.name] = {
            "gpus": nt.gpus, "gpu_model": nt.gpu_model, "gpu_vendor": nt.gpu_vendor, "cpus": nt.cpus,
            "memory_gb": nt.memory_gb, "fabric": nt.fabric,
            "hcas": list(nt.hcas) if nt.hcas or not nt.rdma else "auto", "interfaces": list(nt.interfaces),
            "fabric_host_suffix": nt.fabric_host_suffix, "gpu_request": nt.gpu_request, "modules": list(nt.modules),
            "rdma": nt.rdma, "link_gbps": nt.link_gbps, "network_env": _env(nt.network_env(site.fabric_defaults, site.interfaces_only)),
            "prepend_path": _paths(nt.prepend_path), "append_path": _paths(nt.append_path),
            "srun_args": _srun(nt.srun_args), "node_prologue": list(nt.node_prologue),
            "srun_mpi": nt.srun_mpi, "omp_num_threads": nt.omp_num_threads, "gpu_order": nt.gpu_order or "natural",
        }
    for p in site.partitions:
        out["partitions"][p.name] = {
            "max_nodes": p.max_nodes, "max_time": p.max_time, "node_type": p.node_type,
            "default": p.default, "default_time": p.default_time, "account": p.account, "qos": p.qos,
            "required": None if p.required is None else list(p.required), "directives": dict(p.directives),
            "srun_args": _srun(p.srun_args), "srun_mpi": p.srun_mpi, "omp_num_threads": p.omp_num_threads,
            "gpu_request": p.gpu_request,
            "gpu_request_in_effect": site.gpu_request_for(p, site.node_type(p.node_type)),
            "modules": list(p.modules), "env": _env(p.env), "prepend_path": _paths(p.prepend_path),
            "append_path": _paths(p.append_path),
            "refused_options": None if p.refused_options is None else dict(p.refused_options),
            "account_suffix": p.account_suffix, "account_pattern": p.account_pattern,
            "slurm_partition": p.slurm_name, "min_nodes": p.min_nodes, "max_node_minutes": p.max_node_minutes,
        }
    return out


def _env(env) -> dict[str, Any]:
    """An `env:` as written: a job-time value as {expand: VALUE}."""
    return {name: {"expand": str(v)} if isinstance(v, shell.JobTimeWord) else v for name, v in env}


def _srun(args) -> list:
    """srun_args as written: a removal as {--NAME: null}."""
    return [{str(a): None} if isinstance(a, SrunRemoval) else a for a in args]


def _paths(paths) -> dict[str, list[str]]:
    return {name: list(dirs) for name, dirs in paths}


def _container(c) -> dict[str, Any] | None:
    """A container as `site show` prints it."""
    if c is None:
        return None
    out = {"runtime": c.runtime, "image": c.image, "mounts": list(c.mounts), "python": c.interpreter}
    if c.roles:
        out["roles"] = dict(c.roles)
    if c.args:
        out["args"] = list(c.args)
    if not c.gpu_flag:
        out["gpu_flag"] = False
    for key in ("command", "subcommand", "entrypoint", "writable"):
        if getattr(c, key) is not None:
            out[key] = getattr(c, key)
    if c.annotations:
        out["annotations"] = dict(c.annotations)
    return out


def _preset_value(key: str, value: Any) -> Any:
    """A preset's value as `site show` prints it: mappings as mappings, lists as lists."""
    if key == "container":
        return _container(value)
    if key in ("prepend_path", "append_path"):
        return _paths(value)
    if key == "env":
        return _env(value)
    if key == "directives":
        return dict(value)
    if key == "srun_args":
        return _srun(value)
    return list(value) if isinstance(value, tuple) else value


def site_ref(site: str | None, fallback: str | None) -> str:
    """The site to load: --site, else $SLURMTORCH_SITE, else the verb's fallback."""
    ref = site or os.environ.get("SLURMTORCH_SITE") or fallback
    if not ref:
        raise SpecError("no site given", tip=f"pass --site NAME|PATH or set SLURMTORCH_SITE (see: {typed('site list')})")
    return ref
