"""A merged site file as a `cluster.Site`: each entry built, and the rules between keys.

`validate` walks the file once with a `site_values.Validator`, which notes every
problem and goes on: an entry with a problem is left out of the result (so no later
rule trips over it), its siblings are still checked, and references to it by name
(a partition's node type) still resolve. At the end one SiteError carries them all.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from slurmtorch.submit.sites.model import (GPU_FLAG_RUNTIMES, NAME_RE, NAME_TIP, SRUN_RUNTIMES, Container, MpiLaunch,
                                           SELF_PLACING_FLAVOURS, SLURM_MAX_ARRAY_SIZE, NodeType, Partition, Site,
                                           SrunRemoval, parse_time, valid_tip)
from slurmtorch.submit.sites.fabric import CURRENT_EDITION, EDITIONS, HCA_FABRICS, RDMA_ALWAYS, RDMA_NEVER
from slurmtorch.submit.sites.schema import (CONTAINER_SCHEMA, MPIRUN_SCHEMA, NODE_TYPE_SCHEMA, PARTITION_SCHEMA,
                                           PRESET_SCHEMA, REQUIRED, SITE_SCHEMA)
from slurmtorch.submit.sites.values import Stop, Validator
from slurmtorch.submit.sites.safe_yaml import Marked, type_name

_SUBTREES = ("node_types", "partitions", "presets", "container", "extends", "mpirun")



def validate(raw: Marked, path: Path) -> Site:
    """A merged site file as a `Site`, or one SiteError carrying every problem found."""
    V = Validator(path)
    site: dict[str, Any] = {}
    with V.section():
        V.check_keys(raw, SITE_SCHEMA, "", required=REQUIRED["site"])
    for key, (spec, _desc) in SITE_SCHEMA.items():
        if key not in _SUBTREES and key in raw:
            with V.section():
                site[key] = V.value(raw, key, spec, key)
    types = _entries(V, raw, "node_types", "node type", _node_type)
    parts = _entries(V, raw, "partitions", "partition", _partition)
    _one_default(V, raw, parts)
    _one_entry_per_qos(V, raw, parts)
    named = _presets(V, raw, site.get("launcher", "srun"))
    _srun_removals(V, raw, site, types, parts, named)
    _older_mpi_name(V, raw, site)
    if site.get("fabric_defaults") is not None and site["fabric_defaults"] not in EDITIONS:
        V.note(raw, "fabric_defaults", "fabric_defaults", f"no edition {site.pop('fabric_defaults')} of the fabric "
               f"defaults", f"editions: {', '.join(map(str, EDITIONS))} (the current one: {CURRENT_EDITION})")
    if site.get("max_array_size", 0) < 0:
        V.note(raw, "max_array_size", "max_array_size", f"{site.pop('max_array_size')} is below 0",
               "0 where the cluster runs no job arrays (MaxArraySize=0), else its `scontrol show config` MaxArraySize")
    if site.get("max_array_size", 0) > SLURM_MAX_ARRAY_SIZE:
        V.note(raw, "max_array_size", "max_array_size", f"{site.pop('max_array_size')} is past Slurm's own limit "
               f"on MaxArraySize", f"at most {SLURM_MAX_ARRAY_SIZE}, as the cluster's `scontrol show config` says")
    box = None
    with V.section():
        box = _container(V, raw, "container", site.get("launcher", "srun"))
    with V.section():
        site["mpirun"] = _mpirun(V, raw)
    with V.section():
        _templates(V, raw, site, path)
    with V.section():
        site["name"] = _name(V, raw, site, path)
    V.raise_problems()
    return Site(source=str(path), partitions=tuple(parts), node_types=tuple(types), presets=tuple(named),
                container=box, **site)


def _entries(V: Validator, raw: Marked, key: str, what: str, build) -> list:
    """Every entry of the mapping `key` built by `build(V, raw, name, body, kp)`; broken ones left out."""
    out: list = []
    if key not in raw:
        return out
    entries = raw[key]
    if not isinstance(entries, dict) or not entries:
        V.note(raw, key, key, f"expected a non-empty mapping of {what} names")
        return out
    for name, body in entries.items():
        kp = f"{key}.{name}"
        with V.section():
            if not isinstance(body, dict):
                V.fail(entries, name, kp, f"expected a mapping, got {type_name(body)}")
            built = build(V, raw, str(name), body, kp)
            if built is not None:
                out.append(built)
    return out


def _node_type(V: Validator, raw: Marked, name: str, body: dict, kp: str) -> NodeType | None:
    before = V.count()
    V.check_keys(body, NODE_TYPE_SCHEMA, kp, required=REQUIRED["node_type"])
    vals = V.values(body, NODE_TYPE_SCHEMA, kp)
    fabric, rdma = vals.get("fabric"), vals.get("rdma")
    if fabric in RDMA_NEVER and rdma:
        V.note(body, "rdma", f"{kp}.rdma", f"{fabric} has no RDMA",
               "use fabric: roce for RDMA over Ethernet, or rdma: false" if fabric == "ethernet" else "leave rdma out")
    if fabric in RDMA_ALWAYS and rdma is False:
        V.note(body, "rdma", f"{kp}.rdma", f"fabric {fabric} is RDMA by design",
               "leave rdma out; for plain sockets use fabric: ethernet")
    if fabric in RDMA_ALWAYS:
        vals["rdma"] = True
    # RDMA with no HCAs listed (or hcas: auto): NCCL and UCX use every active HCA themselves.
    if vals.get("hcas") and fabric in HCA_FABRICS and not rdma:
        V.note(body, "hcas", f"{kp}.hcas", "HCAs are only used with RDMA",
               "add rdma: true, or leave hcas out")
    suffix = vals.get("fabric_host_suffix")
    if suffix is not None and not re.fullmatch(r"[A-Za-z0-9.-]+", suffix):
        V.note(body, "fabric_host_suffix", f"{kp}.fabric_host_suffix",
               f"{suffix!r} cannot end a host name", "letters, digits, '-' and '.', e.g. fabric_host_suffix: i")
    if "gid_index" in vals and fabric != "roce":
        V.note(body, "gid_index", f"{kp}.gid_index", "gid_index only applies to fabric: roce")
    if vals.get("cpus") == 0:
        V.note(body, "cpus", f"{kp}.cpus", "a node type needs at least one CPU")
    return NodeType(name=name, **vals) if V.count() == before else None


def _partition(V: Validator, raw: Marked, name: str, body: dict, kp: str) -> Partition | None:
    before = V.count()
    V.check_keys(body, PARTITION_SCHEMA, kp, required=REQUIRED["partition"])
    vals = V.values(body, PARTITION_SCHEMA, kp)
    _refers(V, body, vals, "node_type", kp, raw.get("node_types"), "node type")
    for key in ("max_nodes", "min_nodes", "max_node_minutes"):
        if vals.get(key) == 0:
            V.note(body, key, f"{kp}.{key}", "must be at least 1")
    if vals.get("min_nodes", 0) > vals.get("max_nodes", vals.get("min_nodes", 0)):
        V.note(body, "min_nodes", f"{kp}.min_nodes", f"more than max_nodes ({vals['max_nodes']}): no job fits",
               "min_nodes and max_nodes as the partition's or QOS's MinNodes and MaxNodes say")
    suffix = vals.get("account_suffix")
    if suffix is not None and (not suffix or not re.fullmatch(r"[^\s'\"\\$`]+", suffix)):
        V.note(body, "account_suffix", f"{kp}.account_suffix", f"{suffix!r} cannot end a Slurm account",
               'e.g. account_suffix: "@h100"')
    if suffix is not None and "account_pattern" in vals:
        V.note(body, "account_pattern", f"{kp}.account_pattern", "both account_suffix and account_pattern",
               "keep one: the suffix for NAME@h100 forms, the pattern for anything else")
    slurm = vals.get("slurm_partition")
    if slurm is not None and not re.fullmatch(r"[A-Za-z0-9_.+-]+", slurm):
        V.note(body, "slurm_partition", f"{kp}.slurm_partition", f"{slurm!r} is not a Slurm partition name",
               "letters, digits, '_', '.', '+' and '-', e.g. slurm_partition: boost_usr_prod")
    if "default_time" in vals and "max_time" in vals and \
            parse_time(vals["default_time"]) > parse_time(vals["max_time"]):
        V.note(body, "default_time", f"{kp}.default_time", "longer than max_time")
    return Partition(name=name, **vals) if V.count() == before else None


def _refers(V: Validator, body: dict, vals: dict, key: str, kp: str, section: Any, what: str) -> None:
    """`key` names an entry of `section` (node_types, partitions), if that section is a mapping."""
    known = [str(n) for n in section] if isinstance(section, dict) else None
    if known is not None and key in vals and vals[key] not in known:
        V.note(body, key, f"{kp}.{key}", f"no {what} {vals[key]!r}", valid_tip(vals[key], known, f"{what}s"))


def _one_default(V: Validator, raw: Marked, parts: list[Partition]) -> None:
    defaults = [p.name for p in parts if p.default]
    if len(defaults) > 1:
        V.note_file("partitions", f"more than one default ({', '.join(defaults)})",
                    "mark exactly one partition default: true")


def _one_entry_per_qos(V: Validator, raw: Marked, parts: list[Partition]) -> None:
    """Entries that share a Slurm partition (`slurm_partition`) differ in their QOS: -p with -q
    picks one by it."""
    seen: dict[tuple[str, str | None], str] = {}
    for p in parts:
        key = (p.slurm_name, p.qos)
        if key in seen:
            V.note(raw["partitions"], p.name, f"partitions.{p.name}", f"Slurm partition {p.slurm_name!r} with QOS "
                   f"{p.qos!r} is already partitions.{seen[key]}",
                   "give each entry of one Slurm partition its own qos:, or merge the two")
        seen.setdefault(key, p.name)


def _srun_removals(V: Validator, raw: Marked, site: dict[str, Any], types: list[NodeType], parts: list[Partition],
                   named: list) -> None:
    """Each `{--NAME: null}` in srun_args names an option a layer before it sets: the site's come
    first (nothing to remove), a node type's remove the site's, a partition's the site's and its
    node type's, a preset's those of the site, any node type or any partition."""
    def options(*layers) -> set[str]:
        return {arg.partition("=")[0] for layer in layers for arg in layer if not isinstance(arg, SrunRemoval)}

    def check(mapping: Any, kp: str, args: tuple[str, ...], before: set[str], where: str) -> None:
        for i, arg in enumerate(args):
            if not isinstance(arg, SrunRemoval) or not arg:
                continue
            if not where:
                V.note(mapping, "srun_args", f"{kp}[{i}]", "the site's srun_args come first: there is nothing "
                       "before them to remove", "leave it out (a site that extends another replaces its list)")
            elif arg not in before:
                V.note(mapping, "srun_args", f"{kp}[{i}]", f"removes {arg}, which no layer before it sets ({where})",
                       "set there: " + (", ".join(sorted(before)) or "no srun option"))
    own = site.get("srun_args", ())
    check(raw, "srun_args", own, set(), "")
    by_type = {nt.name: nt for nt in types}
    for nt in types:
        check(raw["node_types"][nt.name], f"node_types.{nt.name}.srun_args", nt.srun_args, options(own), "site")
    for p in parts:
        nt_args = by_type[p.node_type].srun_args if p.node_type in by_type else ()
        check(raw["partitions"][p.name], f"partitions.{p.name}.srun_args", p.srun_args, options(own, nt_args),
              "site, node type")
    every = options(own, *(nt.srun_args for nt in types), *(p.srun_args for p in parts))
    for name, body in named:
        check(raw["presets"][name], f"presets.{name}.srun_args", dict(body).get("srun_args", ()), every,
              "site, node type, partition")


def _older_mpi_name(V: Validator, raw: Marked, site: dict[str, Any]) -> None:
    """`mpi_plugin`, the older name of the site's `srun_mpi`: read as it, never beside it."""
    if "mpi_plugin" in site and "srun_mpi" in raw:
        V.note(raw, "mpi_plugin", "mpi_plugin", "both mpi_plugin and srun_mpi are set",
               "keep srun_mpi (mpi_plugin is its older name)")
    if "mpi_plugin" in site:
        site.setdefault("srun_mpi", site.pop("mpi_plugin"))
    site.pop("mpi_plugin", None)


def _presets(V: Validator, raw: Marked, launcher: str) -> list[tuple[str, tuple[tuple[str, Any], ...]]]:
    out: list = []
    if raw.get("presets") is None:
        return out
    if not isinstance(raw["presets"], dict):
        V.note(raw, "presets", "presets", "expected a mapping of preset names")
        return out
    for name, body in raw["presets"].items():
        kp = f"presets.{name}"
        with V.section():
            if not NAME_RE.fullmatch(str(name)):
                V.fail(raw["presets"], name, kp, f"invalid preset name {str(name)!r}", f"preset {NAME_TIP}")
            if not isinstance(body, dict):
                V.fail(raw["presets"], name, kp, f"expected a mapping, got {type_name(body)}")
            before = V.count()
            V.check_keys(body, PRESET_SCHEMA, kp)
            vals = V.values(body, {k: v for k, v in PRESET_SCHEMA.items() if k != "container"}, kp)
            _refers(V, body, vals, "partition", kp, raw.get("partitions"), "partition")
            with V.section():
                box = _container(V, body, "container", vals.get("launcher", launcher), f"{kp}.container")
                if box is not None:
                    vals["container"] = box
            if V.count() == before:
                out.append((str(name), tuple(vals.items())))
    return out


def _container(V: Validator, raw: Marked, key: str, launcher: str, kp: str = "container") -> Container | None:
    """The container at raw[key] (the site's, or a preset's at `kp`), or None."""
    if raw.get(key) is None:
        return None
    c = raw[key]
    if not isinstance(c, dict):
        V.fail(raw, key, kp, f"expected a mapping, got {type_name(c)}")
    before = V.count()
    V.check_keys(c, CONTAINER_SCHEMA, kp, required=REQUIRED["container"])
    vals = V.values(c, CONTAINER_SCHEMA, kp)
    if "command" in vals and vals.get("runtime") not in (None, "apptainer"):
        V.note(c, "command", f"{kp}.command", f"command is apptainer's (apptainer or singularity), not "
               f"{vals.get('runtime')}'s", "leave command out, or use runtime: apptainer")
    if "subcommand" in vals and vals.get("runtime") not in (None, "apptainer"):
        V.note(c, "subcommand", f"{kp}.subcommand", f"subcommand is apptainer's (exec or run), not "
               f"{vals.get('runtime')}'s", "leave subcommand out, or use runtime: apptainer")
    if "gpu_flag" in vals and vals.get("runtime") not in (None, *GPU_FLAG_RUNTIMES):
        V.note(c, "gpu_flag", f"{kp}.gpu_flag", f"gpu_flag is apptainer's and podman-hpc's, not "
               f"{vals.get('runtime')}'s", "leave gpu_flag out: this runtime adds no GPU option of its own")
    if "$" in vals.get("image", "") and vals.get("runtime") not in (None, "apptainer"):
        V.note(c, "image", f"{kp}.image", f"{vals['runtime']} takes the image as a literal reference: "
               "no job-time variables", "write the image in full, or use runtime: apptainer")
    if vals.get("runtime") in SRUN_RUNTIMES and launcher == "mpirun":
        V.note(c, "runtime", f"{kp}.runtime", f"{vals['runtime']} containers start under srun, not mpirun",
               tip="use launcher: srun (or torchrun)")
    for edf_key in ("entrypoint", "writable", "annotations"):
        if edf_key in vals and vals.get("runtime") != "cscs-ce":
            V.note(c, edf_key, f"{kp}.{edf_key}", f"{edf_key} is an entry of CSCS's EDF: only runtime cscs-ce has it",
                   tip=f"leave {edf_key} out, or use runtime: cscs-ce")
    if V.count() != before:
        raise Stop
    return Container(**vals)


def _mpirun(V: Validator, raw: Marked) -> MpiLaunch:
    """The `mpirun:` block (how `slurmtorch mpirun` launches here), or Open MPI's defaults."""
    if raw.get("mpirun") is None:
        return MpiLaunch()
    m = raw["mpirun"]
    if not isinstance(m, dict):
        V.fail(raw, "mpirun", "mpirun", f"expected a mapping, got {type_name(m)}")
    before = V.count()
    V.check_keys(m, MPIRUN_SCHEMA, "mpirun")
    vals = V.values(m, MPIRUN_SCHEMA, "mpirun")
    for key in ("ranks_per_node", "depth"):
        if vals.get(key) == 0:
            V.note(m, key, f"mpirun.{key}", "must be at least 1")
    if vals.get("cpu_bind") == "depth" and "depth" not in vals and "depth" not in m:
        V.note(m, "cpu_bind", "mpirun.cpu_bind", "cpu_bind: depth binds each rank to `depth` CPUs, but depth "
               "is not set", "add depth: N (CPUs per rank; ALCF Polaris: 16 for 4 ranks per node)")
    if "depth" in vals and vals.get("cpu_bind") != "depth" and vals.get("flavour") not in SELF_PLACING_FLAVOURS:
        V.note(m, "depth", "mpirun.depth", "depth is the CPUs of cpu_bind: depth, which is not set",
               "add cpu_bind: depth, or leave depth out")
    if vals.get("flavour") in SELF_PLACING_FLAVOURS:
        for key in ("ranks_per_node", "cpu_bind", "depth"):
            if key in vals:
                V.note(m, key, f"mpirun.{key}", f"{vals['flavour']} places the ranks itself, from the Slurm job's "
                       "own layout", "leave it out: the job's #SBATCH -N/-n (or idev's) say where ranks run")
    if V.count() != before:
        raise Stop
    return MpiLaunch(**vals)


def _templates(V: Validator, raw: Marked, site: dict[str, Any], path: Path) -> None:
    if "templates" in site and not os.path.isabs(site["templates"]):
        site["templates"] = str((path.parent / site["templates"]).resolve())
    if "templates" in site and not Path(site["templates"]).is_dir():
        V.fail(raw, "templates", "templates", f"folder {site['templates']} does not exist")


def _name(V: Validator, raw: Marked, site: dict[str, Any], path: Path) -> str:
    name = site.pop("name", None) or path.stem
    if not NAME_RE.fullmatch(name):
        if "name" in raw:
            V.fail(raw, "name", "name", f"invalid site name {name!r}", f"site {NAME_TIP}")
        V.note_message(f"invalid site name {name!r} (the name of site file {str(path)!r})",
                       f"rename the file or set `name:`; site {NAME_TIP}")
        raise Stop
    return name
