"""The site file's schema: one table drives validation, the JSON schema and the docs.

`validate` turns a merged site file into a `cluster.Site`, or raises a SiteError that
names the file, the key path, the line where YAML knows it, and what would have been
valid (the fix).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from slurmtorch.backends import BACKENDS
from slurmtorch.errors import SiteError
from slurmtorch.limits import MAX_ENV_STRING, fits_env
from slurmtorch.roles import ROLE_ORDER
from slurmtorch.submit.cluster import (CONTAINER_RUNTIMES, LAUNCHERS, MPI_PLUGINS, NAME_RE, NAME_TIP, Container,
                                       NodeType, Partition, Site, parse_time, valid_tip)
from slurmtorch.submit.fabric import FABRICS
from slurmtorch.submit.site_yaml import Marked, type_name, where

# One table drives validation, the JSON schema and the docs. Each entry:
# key -> (type, description). Types: "str", "int", "bool", "strlist", "strmap",
# "envmap", "directives", or a tuple of allowed strings, or a nested dict.
NODE_TYPE_SCHEMA: dict[str, Any] = {
    "gpus": ("int", "GPUs per node (0 for CPU nodes)"),
    "gpu_model": ("str", "GPU model, for humans (e.g. a100, h100)"),
    "cpus": ("int", "CPU cores per node usable by jobs"),
    "memory_gb": ("int", "memory per node in GB"),
    "fabric": (FABRICS, "interconnect between nodes"),
    "hcas": ("strlist", "RDMA devices (mlx5_0, ...): NCCL_IB_HCA (exact names) / UCX_NET_DEVICES"),
    "interfaces": ("strlist", "IP interfaces for NCCL (exact names) and Gloo bootstrap sockets"),
    "rdma": ("bool", "whether RDMA works on the fabric"),
    "gid_index": ("int", "RoCE GID index for NCCL_IB_GID_INDEX (default: NCCL >= 2.21 picks the RoCE v2 GID itself)"),
    "link_gbps": ("int", "link speed per node in Gb/s; `slurmtorch doctor --allocation` compares the measured "
                         "all_reduce bus bandwidth with it"),
    "env": ("envmap", "environment for jobs on this node type; overrides the fabric's, null removes"),
}
PARTITION_SCHEMA: dict[str, Any] = {
    "max_nodes": ("int", "most nodes one job may use"),
    "max_time": ("time", "longest time limit (Slurm format, e.g. 1-00:00:00)"),
    "node_type": ("str", "name of an entry in node_types"),
    "default": ("bool", "used when no --partition is given"),
    "default_time": ("time", "time limit when none is given"),
}
PRESET_SCHEMA: dict[str, Any] = {
    "partition": ("str", "partition name"),
    "nodes": ("int", "number of nodes"),
    "ntasks_per_node": ("int", "ranks per node"),
    "gpus_per_node": ("int", "GPUs per node"),
    "cpus_per_task": ("int", "CPUs per rank"),
    "time": ("time", "time limit"),
    "account": ("str", "Slurm account"),
    "qos": ("str", "Slurm QOS"),
    "backend": (BACKENDS, "torch.distributed backend"),
    "launcher": (LAUNCHERS, "how ranks are started"),
    "timeout": ("int", "process-group timeout in seconds"),
    "env": ("envmap", "extra environment"),
    "modules": ("strlist", "extra modules to load"),
    "directives": ("directives", "extra #SBATCH directives"),
    "requeue": ("bool", "let Slurm (and the preemption handler) requeue the job"),
    "signal": ("str", "preemption signal, [R:]SIG[@SECONDS] (e.g. USR1@60); implies requeue"),
}
CONTAINER_SCHEMA: dict[str, Any] = {
    "runtime": (CONTAINER_RUNTIMES, "pyxis (srun --container-image) or apptainer exec"),
    "image": ("str", "image reference or path"),
    "mounts": ("strlist", "bind mounts SRC:DST"),
    "roles": ("rolemap", "per-role images for role jobs (master, chief, worker, ps, evaluator: image); "
                         "roles not named use `image`"),
    "python": ("str", "interpreter inside the image, with slurmtorch installed (default: python3; the "
                      "site's `python` is the one on the host)"),
}
SITE_SCHEMA: dict[str, Any] = {
    "name": ("str", "site name (default: file name without .yaml)"),
    "extends": ("str", "name or path of a site this one is merged onto"),
    "description": ("str", "one line for `slurmtorch site list`"),
    "launcher": (LAUNCHERS, "how ranks are started"),
    "mpi_plugin": (MPI_PLUGINS, "srun --mpi plugin (pmix for Open MPI 5)"),
    "python": ("str", "interpreter on the compute nodes (default: the submitting one); in a container, "
                      "`container.python`"),
    "modules": ("strlist", "environment modules to load"),
    "container": (CONTAINER_SCHEMA, "container for every rank"),
    "directives": ("directives", "extra #SBATCH directives (name: value, or true for a flag)"),
    "prologue": ("strlist", "shell lines before the launch (trusted admin text)"),
    "epilogue": ("strlist", "shell lines after the launch (trusted admin text)"),
    "env": ("envmap", "environment for every job"),
    "timeout": ("int", "process-group timeout in seconds"),
    "templates": ("str", "folder with template overrides, relative to this file"),
    "node_types": ({"*": NODE_TYPE_SCHEMA}, "node types by name"),
    "partitions": ({"*": PARTITION_SCHEMA}, "partitions by name"),
    "presets": ({"*": PRESET_SCHEMA}, "named option defaults; `default` applies when none is named"),
}
REQUIRED = {
    "site": ("node_types", "partitions"),
    "node_type": ("gpus", "cpus", "fabric"),
    "partition": ("max_nodes", "max_time", "node_type"),
    "container": ("runtime", "image"),
}


def json_schema() -> dict[str, Any]:
    """A JSON schema (draft 2020-12) for site files, derived from the validation table."""

    def conv(spec: Any, desc: str | None = None, required: tuple[str, ...] = ()) -> dict:
        if isinstance(spec, dict):
            if set(spec) == {"*"}:
                (inner,) = spec.values()
                out: dict[str, Any] = {"type": "object", "additionalProperties": conv(inner)}
            else:
                out = {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {k: conv(v[0], v[1], _req_for(k)) for k, v in spec.items()},
                }
                if required:
                    out["required"] = list(required)
        elif isinstance(spec, tuple):
            out = {"enum": list(spec)}
        else:
            out = {
                "str": {"type": "string"},
                "int": {"type": "integer", "minimum": 0},
                "bool": {"type": "boolean"},
                "time": {"type": "string", "pattern": r"^(UNLIMITED|INFINITE|(\d+-)?\d+(:\d+){0,2})$"},
                "strlist": {"type": "array", "items": {"type": "string"}},
                "envmap": {
                    "type": "object",
                    "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                    "additionalProperties": {"type": ["string", "integer", "null"]},
                },
                "directives": {
                    "type": "object",
                    "additionalProperties": {"type": ["string", "integer", "boolean"]},
                },
                "rolemap": {
                    "type": "object",
                    "propertyNames": {"enum": list(ROLE_ORDER)},
                    "additionalProperties": {"type": "string"},
                },
            }[spec]
            out = dict(out)
        if desc:
            out["description"] = desc
        return out

    def _req_for(key: str) -> tuple[str, ...]:
        return {"container": REQUIRED["container"]}.get(key, ())

    schema = conv(SITE_SCHEMA, required=REQUIRED["site"])
    schema["properties"]["node_types"]["additionalProperties"]["required"] = list(REQUIRED["node_type"])
    schema["properties"]["partitions"]["additionalProperties"]["required"] = list(REQUIRED["partition"])
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://slurmtorch.invalid/site.schema.json",
        "title": "slurmtorch site config",
        **schema,
    }


class _Validator:
    """Checks one file's values against the schema; `fail` raises with file, line and key path."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, mapping, key, keypath: str, problem: str, tip: str | None = None):
        if not keypath.isprintable():  # a key with a newline: the error stays one line
            keypath = repr(keypath)
        raise SiteError(f"{where(mapping, key, self.path)}: {keypath}: {problem}", tip=tip)

    def check_keys(self, mapping: dict, schema: dict, keypath: str, required=()):
        for key in mapping:
            if key not in schema:
                kp = f"{keypath}.{key}" if keypath else str(key)
                self.fail(mapping, key, kp, "unknown key", valid_tip(str(key), list(schema), "keys here"))
        for key in required:
            if key not in mapping:
                place = f"{keypath}" if keypath else "top level"
                raise SiteError(
                    f"{self.path}: {place}: missing required key {key!r}",
                    tip=f"add `{key}:` ({schema[key][1]})",
                )

    def value(self, mapping, key, spec, keypath):
        v = mapping[key]
        if isinstance(spec, tuple):
            if v not in spec:
                self.fail(mapping, key, keypath, f"invalid value {v!r}", valid_tip(str(v), list(spec), "values"))
            return v
        if spec == "str":
            if not isinstance(v, str):
                self.fail(mapping, key, keypath, f"expected a string, got {type_name(v)}")
            return v
        if spec == "int":
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                self.fail(mapping, key, keypath, f"expected a non-negative integer, got {v!r}")
            return v
        if spec == "bool":
            if not isinstance(v, bool):
                self.fail(mapping, key, keypath, f"expected true or false, got {v!r}")
            return v
        if spec == "time":
            if isinstance(v, int) and not isinstance(v, bool):
                v = str(v)  # plain minutes
            if not isinstance(v, str):
                self.fail(mapping, key, keypath, f"expected a Slurm time string, got {type_name(v)}")
            try:
                parse_time(v)
            except ValueError as exc:
                why = f": {exc}" if str(exc) != v.strip() else ""
                self.fail(mapping, key, keypath, f"invalid time {v!r}{why}",
                          "Slurm formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (quote it in YAML)")
            return v
        if spec == "strlist":
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                self.fail(mapping, key, keypath, "expected a list of strings")
            return tuple(v)
        if spec in ("envmap", "rolemap", "directives"):
            return getattr(self, spec)(mapping, key, v, keypath)
        raise AssertionError(spec)

    def envmap(self, mapping, key, v, keypath):
        if not isinstance(v, dict):
            self.fail(mapping, key, keypath, f"expected a mapping NAME: value, got {type_name(v)}")
        out = []
        for name, val in v.items():
            kp = f"{keypath}.{name}"
            # The pattern text of shell's own check: re's cache compiles it once per run.
            if not isinstance(name, str) or not re.fullmatch(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                self.fail(v, name, kp, "invalid environment variable name",
                          "names are letters, digits and '_', not starting with a digit")
            if isinstance(val, bool) or not (val is None or isinstance(val, (str, int))):
                self.fail(v, name, kp, f"expected a string, got {type_name(val)}",
                          "quote values such as 'yes', 'true' or '1.0' in YAML")
            if val is not None and not fits_env(name, str(val)):
                self.fail(v, name, kp, f"{name}=... is {len(str(val).encode())} bytes; a variable may be at most "
                          f"{MAX_ENV_STRING} bytes with its name",
                          "Linux refuses to start a program with a longer one (execve's MAX_ARG_STRLEN); "
                          "put large data in a file and export its path")
            out.append((name, None if val is None else str(val)))
        return tuple(out)

    def rolemap(self, mapping, key, v, keypath):
        if not isinstance(v, dict):
            self.fail(mapping, key, keypath, f"expected a mapping role: image, got {type_name(v)}")
        out = []
        for name, val in v.items():
            kp = f"{keypath}.{name}"
            if name not in ROLE_ORDER:
                self.fail(v, name, kp, f"unknown role {name!r}", valid_tip(str(name), list(ROLE_ORDER), "roles"))
            if not isinstance(val, str) or not val or any(c in val for c in "\n\r\x00"):
                self.fail(v, name, kp, "expected an image reference (one line)")
            out.append((name, val))
        return tuple(out)

    def directives(self, mapping, key, v, keypath):
        if not isinstance(v, dict):
            self.fail(mapping, key, keypath, f"expected a mapping name: value, got {type_name(v)}")
        out = []
        for name, val in v.items():
            kp = f"{keypath}.{name}"
            if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9-]*", name):
                self.fail(v, name, kp, "invalid directive name", "use the long sbatch option without dashes, e.g. constraint")
            if val is False or val is None:
                continue
            if not isinstance(val, (str, int, bool)):
                self.fail(v, name, kp, f"expected a string, number or true, got {type_name(val)}")
            out.append((name, val if val is True else str(val)))
        return tuple(out)




def validate(raw: Marked, path: Path) -> Site:
    """A merged site file as a `Site`, or the SiteError of its first problem."""
    V = _Validator(path)
    V.check_keys(raw, SITE_SCHEMA, "", required=REQUIRED["site"])
    site: dict[str, Any] = {}
    for key, (spec, _desc) in SITE_SCHEMA.items():
        if key in ("node_types", "partitions", "presets", "container", "extends") or key not in raw:
            continue
        site[key] = V.value(raw, key, spec, key)

    node_types = _node_types(V, raw)
    partitions = _partitions(V, raw, [nt.name for nt in node_types])
    presets = _presets(V, raw, [p.name for p in partitions])
    container = _container(V, raw, site.get("launcher", "srun"))

    if "templates" in site and not os.path.isabs(site["templates"]):
        site["templates"] = str((path.parent / site["templates"]).resolve())
    if "templates" in site and not Path(site["templates"]).is_dir():
        V.fail(raw, "templates", "templates", f"folder {site['templates']} does not exist")

    name = site.pop("name", None) or path.stem
    if not NAME_RE.fullmatch(name):
        if "name" in raw:
            V.fail(raw, "name", "name", f"invalid site name {name!r}", f"site {NAME_TIP}")
        raise SiteError(f"invalid site name {name!r} (the name of site file {str(path)!r})",
                        tip=f"rename the file or set `name:`; site {NAME_TIP}")
    return Site(
        name=name,
        source=str(path),
        partitions=tuple(partitions),
        node_types=tuple(node_types),
        presets=tuple(presets),
        container=container,
        **site,
    )


def _node_types(V: _Validator, raw: Marked) -> list[NodeType]:
    node_types = []
    nts = raw["node_types"]
    if not isinstance(nts, dict) or not nts:
        V.fail(raw, "node_types", "node_types", "expected a non-empty mapping of node type names")
    for name, body in nts.items():
        kp = f"node_types.{name}"
        if not isinstance(body, dict):
            V.fail(nts, name, kp, f"expected a mapping, got {type_name(body)}")
        V.check_keys(body, NODE_TYPE_SCHEMA, kp, required=REQUIRED["node_type"])
        vals = {k: V.value(body, k, NODE_TYPE_SCHEMA[k][0], f"{kp}.{k}") for k in body}
        nt = NodeType(name=str(name), **vals)
        if nt.rdma and nt.fabric == "ethernet":
            V.fail(body, "rdma", f"{kp}.rdma", "ethernet has no RDMA", "use fabric: roce for RDMA over Ethernet, or rdma: false")
        if nt.rdma and not nt.hcas:
            V.fail(body, "rdma", f"{kp}.hcas", "an RDMA fabric needs its HCAs listed", "add hcas: [mlx5_0, ...] (see `ibv_devices`)")
        if nt.gid_index is not None and nt.fabric != "roce":
            V.fail(body, "gid_index", f"{kp}.gid_index", "gid_index only applies to fabric: roce")
        if nt.cpus < 1:
            V.fail(body, "cpus", f"{kp}.cpus", "a node type needs at least one CPU")
        node_types.append(nt)
    return node_types


def _partitions(V: _Validator, raw: Marked, nt_names: list[str]) -> list[Partition]:
    partitions = []
    parts = raw["partitions"]
    if not isinstance(parts, dict) or not parts:
        V.fail(raw, "partitions", "partitions", "expected a non-empty mapping of partition names")
    for name, body in parts.items():
        kp = f"partitions.{name}"
        if not isinstance(body, dict):
            V.fail(parts, name, kp, f"expected a mapping, got {type_name(body)}")
        V.check_keys(body, PARTITION_SCHEMA, kp, required=REQUIRED["partition"])
        vals = {k: V.value(body, k, PARTITION_SCHEMA[k][0], f"{kp}.{k}") for k in body}
        if vals["node_type"] not in nt_names:
            V.fail(body, "node_type", f"{kp}.node_type", f"no node type {vals['node_type']!r}",
                   valid_tip(vals["node_type"], nt_names, "node types"))
        if vals["max_nodes"] < 1:
            V.fail(body, "max_nodes", f"{kp}.max_nodes", "must be at least 1")
        if "default_time" in vals and parse_time(vals["default_time"]) > parse_time(vals["max_time"]):
            V.fail(body, "default_time", f"{kp}.default_time", "longer than max_time")
        partitions.append(Partition(name=str(name), **vals))
    defaults = [p.name for p in partitions if p.default]
    if len(defaults) > 1:
        raise SiteError(f"{V.path}: partitions: more than one default ({', '.join(defaults)})",
                        tip="mark exactly one partition default: true")
    return partitions


def _presets(V: _Validator, raw: Marked, partition_names: list[str]) -> list[tuple[str, tuple[tuple[str, Any], ...]]]:
    presets = []
    raw_presets = raw.get("presets") or {}
    if not isinstance(raw_presets, dict):
        V.fail(raw, "presets", "presets", "expected a mapping of preset names")
    for name, body in raw_presets.items():
        kp = f"presets.{name}"
        if not NAME_RE.fullmatch(str(name)):
            V.fail(raw_presets, name, kp, f"invalid preset name {str(name)!r}", f"preset {NAME_TIP}")
        if not isinstance(body, dict):
            V.fail(raw_presets, name, kp, f"expected a mapping, got {type_name(body)}")
        V.check_keys(body, PRESET_SCHEMA, kp)
        vals = {k: V.value(body, k, PRESET_SCHEMA[k][0], f"{kp}.{k}") for k in body}
        if "partition" in vals and vals["partition"] not in partition_names:
            V.fail(body, "partition", f"{kp}.partition", f"no partition {vals['partition']!r}",
                   valid_tip(vals["partition"], partition_names, "partitions"))
        presets.append((str(name), tuple(vals.items())))
    return presets


def _container(V: _Validator, raw: Marked, launcher: str) -> Container | None:
    if raw.get("container") is None:
        return None
    c = raw["container"]
    if not isinstance(c, dict):
        V.fail(raw, "container", "container", f"expected a mapping, got {type_name(c)}")
    V.check_keys(c, CONTAINER_SCHEMA, "container", required=REQUIRED["container"])
    container = Container(**{k: V.value(c, k, CONTAINER_SCHEMA[k][0], f"container.{k}") for k in c})
    if container.runtime == "pyxis" and launcher != "srun":
        V.fail(c, "runtime", "container.runtime", "pyxis containers need launcher: srun")
    return container
