"""Site configs: the admin's description of a cluster, loaded and validated once.

A site is a YAML file (see `site-configs/` and `slurmtorch site schema`). It is found
by path or by name on a search path, may `extends:` another site (deep merge), and is
validated on load: every error names the file, the key path, the line where YAML knows
it, and what would have been valid. Everything downstream works on the frozen `Site`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from slurmtorch import resources
from slurmtorch.roles import ROLE_ORDER
from slurmtorch.backends import BACKENDS
from slurmtorch.errors import SiteError, SpecError

FABRICS = ("infiniband", "roce", "ethernet")
LAUNCHERS = ("srun", "mpirun", "torchrun")
MPI_PLUGINS = ("pmix", "pmi2", "none")
CONTAINER_RUNTIMES = ("pyxis", "apptainer")

# RoCE v2 over IPv4 is GID index 3 on a default Mellanox/NVIDIA config; NCCL's own
# default (0) is RoCE v1, which most switches do not route.
DEFAULT_ROCE_GID_INDEX = 3
# Process-group timeout. gloo's own default (30 min) would let one hung peer hold
# every node of the job that long; 10 min is torch's NCCL default.
DEFAULT_TIMEOUT_S = 600

# Site and preset names: they are typed on command lines and written into the
# script's provenance comment, where a newline would start a script line.
NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
NAME_TIP = "names are letters, digits, '.', '_' and '-'"
_TIME_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class NodeType:
    """What one node offers: GPUs, CPUs, memory and how it talks to its peers."""

    name: str
    gpus: int
    cpus: int
    fabric: str
    gpu_model: str | None = None
    memory_gb: int | None = None
    hcas: tuple[str, ...] = ()
    interfaces: tuple[str, ...] = ()
    rdma: bool = False
    gid_index: int | None = None
    link_gbps: int | None = None
    env: tuple[tuple[str, str | None], ...] = ()

    def network_env(self) -> tuple[tuple[str, str], ...]:
        """The fabric's network environment, with the admin's `env` applied on top.

        A key the admin sets to null removes what the fabric would have set.
        """
        derived = dict(fabric_env(self))
        for key, value in self.env:
            if value is None:
                derived.pop(key, None)
            else:
                derived[key] = value
        return tuple(derived.items())


@dataclass(frozen=True)
class Partition:
    """A Slurm partition as the admin allows it to be used."""

    name: str
    max_nodes: int
    max_time: str
    node_type: str
    default: bool = False
    default_time: str | None = None


@dataclass(frozen=True)
class Container:
    """A container every rank runs in (pyxis `srun --container-image` or apptainer)."""

    runtime: str
    image: str
    mounts: tuple[str, ...] = ()
    roles: tuple[tuple[str, str], ...] = ()  # per-role images of a role job (`--role`)
    python: str | None = None  # interpreter inside the image; None: python3

    @property
    def interpreter(self) -> str:
        """The python ranks run inside the image (the submitting one is not in it)."""
        return self.python or "python3"


@dataclass(frozen=True)
class Site:
    """A validated, merged site config."""

    name: str
    source: str
    partitions: tuple[Partition, ...]
    node_types: tuple[NodeType, ...]
    presets: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    description: str = ""
    launcher: str = "srun"
    mpi_plugin: str = "pmix"
    python: str | None = None
    modules: tuple[str, ...] = ()
    container: Container | None = None
    directives: tuple[tuple[str, str | bool], ...] = ()
    prologue: tuple[str, ...] = ()
    epilogue: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    timeout: int = DEFAULT_TIMEOUT_S
    templates: str | None = None

    def partition(self, name: str | None) -> Partition:
        """The named partition, or the default one."""

        if name is None:
            for p in self.partitions:
                if p.default:
                    return p
            if len(self.partitions) == 1:
                return self.partitions[0]
            raise SpecError(
                f"site {self.name!r} has no default partition",
                tip="pass --partition " + "|".join(p.name for p in self.partitions),
            )
        for p in self.partitions:
            if p.name == name:
                return p
        raise SpecError(
            f"unknown partition {name!r} on site {self.name!r}",
            tip=_valid_tip(name, [p.name for p in self.partitions], "partitions"),
        )

    def node_type(self, name: str) -> NodeType:
        for nt in self.node_types:
            if nt.name == name:
                return nt
        raise KeyError(name)  # validated on load: cannot happen for a partition's type

    def preset(self, name: str | None) -> dict[str, Any]:
        """The named preset's option defaults (`default` if it exists and none is named)."""

        presets = dict(self.presets)
        if name is None:
            return dict(presets.get("default", ()))
        if name not in presets:
            raise SpecError(
                f"unknown preset {name!r} on site {self.name!r}",
                tip=_valid_tip(name, list(presets), "presets"),
            )
        return dict(presets[name])


def fabric_env(nt: NodeType) -> tuple[tuple[str, str], ...]:
    """Network environment a node type's fabric implies (before admin overrides).

    RDMA fabrics name the HCAs for NCCL and UCX; anything else disables NCCL's IB
    transport (it would otherwise probe and may pick a wrong device) and pins the
    socket interface so NCCL and Gloo do not choose docker0 or a management NIC.
    """
    env: list[tuple[str, str]] = []
    ifnames = ",".join(nt.interfaces)
    if nt.fabric in ("infiniband", "roce") and nt.rdma:
        env.append(("NCCL_IB_HCA", ",".join(nt.hcas)))
        # UCX wants device:port; HCAs are usually listed without the port.
        env.append(("UCX_NET_DEVICES", ",".join(h if ":" in h else f"{h}:1" for h in nt.hcas)))
        if nt.fabric == "roce":
            gid = nt.gid_index if nt.gid_index is not None else DEFAULT_ROCE_GID_INDEX
            env.append(("NCCL_IB_GID_INDEX", str(gid)))
    else:
        env.append(("NCCL_IB_DISABLE", "1"))
    if ifnames:
        env.append(("NCCL_SOCKET_IFNAME", ifnames))
        env.append(("GLOO_SOCKET_IFNAME", ifnames))
    return tuple(env)


def parse_time(text: str) -> float:
    """Seconds in a Slurm time string (`M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`).

    `UNLIMITED`/`INFINITE` are infinite. Raises ValueError on anything else.
    """
    t = str(text).strip()
    if t.upper() in ("UNLIMITED", "INFINITE"):
        return float("inf")
    m = _TIME_RE.match(t)
    if not m:
        raise ValueError(t)
    days, a, b, c = m.groups()
    a_i, b_i, c_i = int(a), int(b or 0), int(c or 0)
    if days is not None:
        # D-H, D-H:M, D-H:M:S
        return int(days) * 86400 + a_i * 3600 + b_i * 60 + c_i
    if c is not None:
        return a_i * 3600 + b_i * 60 + c_i  # H:M:S
    if b is not None:
        return a_i * 60 + b_i  # M:S
    return a_i * 60  # M


# --------------------------------------------------------------------------- schema

# One table drives validation, the JSON schema and the docs. Each entry:
# key -> (type, description). Types: "str", "int", "bool", "strlist", "strmap",
# "envmap", "directives", or a tuple of allowed strings, or a nested dict.
_NODE_TYPE_SCHEMA: dict[str, Any] = {
    "gpus": ("int", "GPUs per node (0 for CPU nodes)"),
    "gpu_model": ("str", "GPU model, for humans (e.g. a100, h100)"),
    "cpus": ("int", "CPU cores per node usable by jobs"),
    "memory_gb": ("int", "memory per node in GB"),
    "fabric": (FABRICS, "interconnect between nodes"),
    "hcas": ("strlist", "RDMA devices (mlx5_0, ...) for NCCL_IB_HCA / UCX_NET_DEVICES"),
    "interfaces": ("strlist", "IP interfaces for NCCL/Gloo bootstrap sockets"),
    "rdma": ("bool", "whether RDMA works on the fabric"),
    "gid_index": ("int", "RoCE GID index for NCCL_IB_GID_INDEX (default 3: RoCE v2/IPv4)"),
    "link_gbps": ("int", "link speed per node in Gb/s; `slurmtorch doctor --allocation` compares the measured "
                         "all_reduce bus bandwidth with it"),
    "env": ("envmap", "environment for jobs on this node type; overrides the fabric's, null removes"),
}
_PARTITION_SCHEMA: dict[str, Any] = {
    "max_nodes": ("int", "most nodes one job may use"),
    "max_time": ("time", "longest time limit (Slurm format, e.g. 1-00:00:00)"),
    "node_type": ("str", "name of an entry in node_types"),
    "default": ("bool", "used when no --partition is given"),
    "default_time": ("time", "time limit when none is given"),
}
_PRESET_SCHEMA: dict[str, Any] = {
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
_CONTAINER_SCHEMA: dict[str, Any] = {
    "runtime": (CONTAINER_RUNTIMES, "pyxis (srun --container-image) or apptainer exec"),
    "image": ("str", "image reference or path"),
    "mounts": ("strlist", "bind mounts SRC:DST"),
    "roles": ("rolemap", "per-role images for role jobs (master, chief, worker, ps, evaluator: image); "
                         "roles not named use `image`"),
    "python": ("str", "interpreter inside the image, with slurmtorch installed (default: python3; the "
                      "site's `python` is the one on the host)"),
}
_SITE_SCHEMA: dict[str, Any] = {
    "name": ("str", "site name (default: file name without .yaml)"),
    "extends": ("str", "name or path of a site this one is merged onto"),
    "description": ("str", "one line for `slurmtorch site list`"),
    "launcher": (LAUNCHERS, "how ranks are started"),
    "mpi_plugin": (MPI_PLUGINS, "srun --mpi plugin (pmix for Open MPI 5)"),
    "python": ("str", "interpreter on the compute nodes (default: the submitting one); in a container, "
                      "`container.python`"),
    "modules": ("strlist", "environment modules to load"),
    "container": (_CONTAINER_SCHEMA, "container for every rank"),
    "directives": ("directives", "extra #SBATCH directives (name: value, or true for a flag)"),
    "prologue": ("strlist", "shell lines before the launch (trusted admin text)"),
    "epilogue": ("strlist", "shell lines after the launch (trusted admin text)"),
    "env": ("envmap", "environment for every job"),
    "timeout": ("int", "process-group timeout in seconds"),
    "templates": ("str", "folder with template overrides, relative to this file"),
    "node_types": ({"*": _NODE_TYPE_SCHEMA}, "node types by name"),
    "partitions": ({"*": _PARTITION_SCHEMA}, "partitions by name"),
    "presets": ({"*": _PRESET_SCHEMA}, "named option defaults; `default` applies when none is named"),
}
_REQUIRED = {
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
        return {"container": _REQUIRED["container"]}.get(key, ())

    schema = conv(_SITE_SCHEMA, required=_REQUIRED["site"])
    schema["properties"]["node_types"]["additionalProperties"]["required"] = list(_REQUIRED["node_type"])
    schema["properties"]["partitions"]["additionalProperties"]["required"] = list(_REQUIRED["partition"])
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://slurmtorch.invalid/site.schema.json",
        "title": "slurmtorch site config",
        **schema,
    }


# --------------------------------------------------------------------------- YAML with marks


class _Marked(dict):
    """A mapping that remembers where each key came from: (file, line)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.where: dict[Any, tuple[str, int | None]] = {}


def _plain_resolvers() -> dict[Any, list[tuple[str, re.Pattern]]]:
    """Implicit scalar types for site files: plain decimal ints and floats, bools, null, `<<`.

    PyYAML resolves YAML 1.1's other forms too, and silently: `time: 2:00:00` is the
    sexagesimal int 7200 (then read as minutes: five days), `0755` is 493, `0x1F` is 31
    and `1_000` is 1000; a date becomes a datetime. Here those stay the strings the
    admin typed, which is what a Slurm time, an env value or a directive wants.
    """
    keep = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:null", "tag:yaml.org,2002:merge")
    table: dict[Any, list[tuple[str, re.Pattern]]] = {}
    for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items():
        kept = [(tag, rx) for tag, rx in resolvers if tag in keep]
        if kept:
            table[first] = kept
    for tag, rx, firsts in (
        ("tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), "-+0123456789"),
        ("tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$"),
         "-+0123456789."),
    ):
        for first in firsts:
            table.setdefault(first, []).append((tag, rx))
    return table


class _SiteConstruction:
    """Loader mixin: plain scalar types, line numbers recorded, duplicate keys refused."""

    yaml_implicit_resolvers = _plain_resolvers()

    def construct_mapping(self, node, deep=False):
        self.flatten_mapping(node)
        out = _Marked()
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise SiteError(
                    f"{self.name}:{key_node.start_mark.line + 1}: a mapping key must be a plain value"
                ) from None
            if key in out and not getattr(key_node, "_merged", False):
                raise SiteError(
                    f"{self.name}:{key_node.start_mark.line + 1}: duplicate key {key!r}",
                    tip="each key may appear once per mapping",
                )
            out[key] = self.construct_object(value_node, deep=True)
            out.where[key] = (self.name, key_node.start_mark.line + 1)
        return out

    def flatten_mapping(self, node):
        # Keys brought in by `<<: *anchor` may be overridden without counting as duplicates.
        before = {id(k) for k, _ in node.value}
        super().flatten_mapping(node)
        for k, _ in node.value:
            if id(k) not in before:
                k._merged = True
        # An explicit key after a merged one wins; drop earlier merged duplicates.
        seen: dict[Any, int] = {}
        kept = []
        for k, v in reversed(node.value):
            # A complex key (a mapping or a list) has a list as its value: not hashable;
            # construct_mapping rejects it with a clear line right after.
            ident = k.value if isinstance(k, yaml.ScalarNode) else id(k)
            if ident in seen and getattr(k, "_merged", False):
                continue
            seen[ident] = 1
            kept.append((k, v))
        node.value = list(reversed(kept))


class _Loader(_SiteConstruction, yaml.SafeLoader):
    """The pure-Python loader: slower, but its syntax errors say the most."""


# libyaml's parser is ~20x faster on our files; its marks are the same, its messages
# terser, so a file it refuses is parsed again by _Loader for the error.
_CLoader = type("_CLoader", (_SiteConstruction, yaml.CSafeLoader), {}) if hasattr(yaml, "CSafeLoader") else None

for _cls in (_Loader, _CLoader):
    if _cls is not None:
        _cls.add_constructor("tag:yaml.org,2002:map", lambda loader, node: loader.construct_mapping(node))


def _read_yaml(path: Path) -> _Marked:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SiteError(f"cannot read site file {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise SiteError(f"{path}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})",
                        tip="save the site file as UTF-8") from None
    if _CLoader is not None:
        loader = _CLoader(text)
        loader.name = str(path)
        try:
            data = loader.get_single_data()
        except yaml.YAMLError:
            data = _parse_pure(text, path)
        finally:
            loader.dispose()
    else:
        data = _parse_pure(text, path)
    if data is None:
        data = _Marked()
    if not isinstance(data, dict):
        raise SiteError(f"{path}: a site file must be a mapping of keys, not {type(data).__name__}")
    return data


def _parse_pure(text: str, path: Path) -> Any:
    """Parse with the pure-Python loader; its YAML errors become one-line SiteErrors."""
    try:
        # The reader already refuses NUL and other non-printable characters here.
        loader = _Loader(text)
    except yaml.reader.ReaderError as e:
        raise SiteError(f"{path}: character {e.character:#06x} at offset {e.position} is not allowed in YAML",
                        tip="remove control characters from the site file") from None
    loader.name = str(path)
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise SiteError(
            f"{path}{line}: YAML syntax error: {e.problem or e.context}",
            tip="check indentation and quoting near that line",
        ) from None
    except yaml.YAMLError as e:
        raise SiteError(f"{path}: YAML error: {e}") from None
    finally:
        loader.dispose()


def _deep_merge(base: dict, over: dict) -> _Marked:
    """`over` merged onto `base`: mappings merge recursively, anything else is replaced."""
    out = _Marked()
    for src in (base, over):
        for key, value in src.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                value = _deep_merge(out[key], value)
            out[key] = value
            if isinstance(src, _Marked) and key in src.where:
                out.where[key] = src.where[key]
    return out


# --------------------------------------------------------------------------- finding


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
        if p.is_file():
            return p
        raise SiteError(f"site file {ref} does not exist", tip="pass an existing path or a site name (slurmtorch site list)")
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
        tip=_valid_tip(ref, names, "sites"),
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
    raw = _load_merged(path, chain=())
    return _validate(raw, path)


def _load_merged(path: Path, chain: tuple[Path, ...]) -> _Marked:
    real = path.resolve()
    if real in chain:
        cycle = " -> ".join(str(p) for p in (*chain, real))
        raise SiteError(f"{path}: extends cycle: {cycle}")
    data = _read_yaml(path)
    parent = data.get("extends")
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise SiteError(f"{_where(data, 'extends', path)}: extends: expected a site name or path")
    if _looks_like_path(parent) and not os.path.isabs(parent):
        parent_path = path.parent / parent
        if not parent_path.is_file():
            raise SiteError(f"{_where(data, 'extends', path)}: extends: site file {parent} does not exist")
    else:
        try:
            parent_path = find_site(parent)
        except SiteError as e:
            raise SiteError(f"{_where(data, 'extends', path)}: extends: {e.message}", tip=e.tip) from None
    base = _load_merged(parent_path, chain=(*chain, real))
    base = _Marked(base) if not isinstance(base, _Marked) else base
    # A child's name/templates are its own; the rest is inherited.
    base.pop("name", None)
    merged = _deep_merge(base, data)
    merged.pop("extends", None)
    if "templates" in data:
        merged["templates"] = str((path.parent / data["templates"]).resolve())
    elif "templates" in base:
        merged["templates"] = base["templates"]
    return merged


# --------------------------------------------------------------------------- validation


def _where(mapping: Any, key: Any, fallback: Path) -> str:
    if isinstance(mapping, _Marked) and key in mapping.where:
        file, line = mapping.where[key]
        return f"{file}:{line}" if line else file
    return str(fallback)


def _valid_tip(got: str, valid: list[str], what: str) -> str:
    import difflib  # only on the error path

    close = difflib.get_close_matches(str(got), valid, n=1)
    listing = ", ".join(repr(v) for v in valid) if valid else "(none)"
    if close:
        return f"did you mean {close[0]!r}? valid {what}: {listing}"
    return f"valid {what}: {listing}"


class _Validator:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, mapping, key, keypath: str, problem: str, tip: str | None = None):
        if not keypath.isprintable():  # a key with a newline: the error stays one line
            keypath = repr(keypath)
        raise SiteError(f"{_where(mapping, key, self.path)}: {keypath}: {problem}", tip=tip)

    def check_keys(self, mapping: dict, schema: dict, keypath: str, required=()):
        for key in mapping:
            if key not in schema:
                kp = f"{keypath}.{key}" if keypath else str(key)
                self.fail(mapping, key, kp, "unknown key", _valid_tip(str(key), list(schema), "keys here"))
        for key in required:
            if key not in mapping:
                where = f"{keypath}" if keypath else "top level"
                raise SiteError(
                    f"{self.path}: {where}: missing required key {key!r}",
                    tip=f"add `{key}:` ({schema[key][1]})",
                )

    def value(self, mapping, key, spec, keypath):
        v = mapping[key]
        if isinstance(spec, tuple):
            if v not in spec:
                self.fail(mapping, key, keypath, f"invalid value {v!r}", _valid_tip(str(v), list(spec), "values"))
            return v
        if spec == "str":
            if not isinstance(v, str):
                self.fail(mapping, key, keypath, f"expected a string, got {_tname(v)}")
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
                self.fail(mapping, key, keypath, f"expected a Slurm time string, got {_tname(v)}")
            try:
                parse_time(v)
            except ValueError:
                self.fail(mapping, key, keypath, f"invalid time {v!r}",
                          "Slurm formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (quote it in YAML)")
            return v
        if spec == "strlist":
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                self.fail(mapping, key, keypath, "expected a list of strings")
            return tuple(v)
        if spec == "envmap":
            if not isinstance(v, dict):
                self.fail(mapping, key, keypath, f"expected a mapping NAME: value, got {_tname(v)}")
            out = []
            for name, val in v.items():
                kp = f"{keypath}.{name}"
                if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                    self.fail(v, name, kp, "invalid environment variable name",
                              "names are letters, digits and '_', not starting with a digit")
                if isinstance(val, bool) or not (val is None or isinstance(val, (str, int))):
                    self.fail(v, name, kp, f"expected a string, got {_tname(val)}",
                              "quote values such as 'yes', 'true' or '1.0' in YAML")
                out.append((name, None if val is None else str(val)))
            return tuple(out)
        if spec == "rolemap":
            if not isinstance(v, dict):
                self.fail(mapping, key, keypath, f"expected a mapping role: image, got {_tname(v)}")
            out = []
            for name, val in v.items():
                kp = f"{keypath}.{name}"
                if name not in ROLE_ORDER:
                    self.fail(v, name, kp, f"unknown role {name!r}", _valid_tip(str(name), list(ROLE_ORDER), "roles"))
                if not isinstance(val, str) or not val or any(c in val for c in "\n\r\x00"):
                    self.fail(v, name, kp, "expected an image reference (one line)")
                out.append((name, val))
            return tuple(out)
        if spec == "directives":
            if not isinstance(v, dict):
                self.fail(mapping, key, keypath, f"expected a mapping name: value, got {_tname(v)}")
            out = []
            for name, val in v.items():
                kp = f"{keypath}.{name}"
                if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9-]*", name):
                    self.fail(v, name, kp, "invalid directive name", "use the long sbatch option without dashes, e.g. constraint")
                if val is False or val is None:
                    continue
                if not isinstance(val, (str, int, bool)):
                    self.fail(v, name, kp, f"expected a string, number or true, got {_tname(val)}")
                out.append((name, val if val is True else str(val)))
            return tuple(out)
        raise AssertionError(spec)


def _tname(v: Any) -> str:
    return {dict: "a mapping", _Marked: "a mapping", list: "a list", type(None): "null"}.get(type(v), type(v).__name__)


def _validate(raw: _Marked, path: Path) -> Site:
    V = _Validator(path)
    V.check_keys(raw, _SITE_SCHEMA, "", required=_REQUIRED["site"])
    site: dict[str, Any] = {}
    for key, (spec, _desc) in _SITE_SCHEMA.items():
        if key in ("node_types", "partitions", "presets", "container", "extends") or key not in raw:
            continue
        site[key] = V.value(raw, key, spec, key)

    node_types = []
    nts = raw["node_types"]
    if not isinstance(nts, dict) or not nts:
        V.fail(raw, "node_types", "node_types", "expected a non-empty mapping of node type names")
    for name, body in nts.items():
        kp = f"node_types.{name}"
        if not isinstance(body, dict):
            V.fail(nts, name, kp, f"expected a mapping, got {_tname(body)}")
        V.check_keys(body, _NODE_TYPE_SCHEMA, kp, required=_REQUIRED["node_type"])
        vals = {k: V.value(body, k, _NODE_TYPE_SCHEMA[k][0], f"{kp}.{k}") for k in body}
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
    nt_names = [nt.name for nt in node_types]

    partitions = []
    parts = raw["partitions"]
    if not isinstance(parts, dict) or not parts:
        V.fail(raw, "partitions", "partitions", "expected a non-empty mapping of partition names")
    for name, body in parts.items():
        kp = f"partitions.{name}"
        if not isinstance(body, dict):
            V.fail(parts, name, kp, f"expected a mapping, got {_tname(body)}")
        V.check_keys(body, _PARTITION_SCHEMA, kp, required=_REQUIRED["partition"])
        vals = {k: V.value(body, k, _PARTITION_SCHEMA[k][0], f"{kp}.{k}") for k in body}
        if vals["node_type"] not in nt_names:
            V.fail(body, "node_type", f"{kp}.node_type", f"no node type {vals['node_type']!r}",
                   _valid_tip(vals["node_type"], nt_names, "node types"))
        if vals["max_nodes"] < 1:
            V.fail(body, "max_nodes", f"{kp}.max_nodes", "must be at least 1")
        if "default_time" in vals and parse_time(vals["default_time"]) > parse_time(vals["max_time"]):
            V.fail(body, "default_time", f"{kp}.default_time", "longer than max_time")
        partitions.append(Partition(name=str(name), **vals))
    defaults = [p.name for p in partitions if p.default]
    if len(defaults) > 1:
        raise SiteError(f"{path}: partitions: more than one default ({', '.join(defaults)})", tip="mark exactly one partition default: true")

    presets = []
    raw_presets = raw.get("presets") or {}
    if not isinstance(raw_presets, dict):
        V.fail(raw, "presets", "presets", "expected a mapping of preset names")
    for name, body in raw_presets.items():
        kp = f"presets.{name}"
        if not NAME_RE.fullmatch(str(name)):
            V.fail(raw_presets, name, kp, f"invalid preset name {str(name)!r}", f"preset {NAME_TIP}")
        if not isinstance(body, dict):
            V.fail(raw_presets, name, kp, f"expected a mapping, got {_tname(body)}")
        V.check_keys(body, _PRESET_SCHEMA, kp)
        vals = {k: V.value(body, k, _PRESET_SCHEMA[k][0], f"{kp}.{k}") for k in body}
        if "partition" in vals and vals["partition"] not in [p.name for p in partitions]:
            V.fail(body, "partition", f"{kp}.partition", f"no partition {vals['partition']!r}",
                   _valid_tip(vals["partition"], [p.name for p in partitions], "partitions"))
        presets.append((str(name), tuple(vals.items())))

    container = None
    if raw.get("container") is not None:
        c = raw["container"]
        if not isinstance(c, dict):
            V.fail(raw, "container", "container", f"expected a mapping, got {_tname(c)}")
        V.check_keys(c, _CONTAINER_SCHEMA, "container", required=_REQUIRED["container"])
        container = Container(**{k: V.value(c, k, _CONTAINER_SCHEMA[k][0], f"container.{k}") for k in c})
        launcher = site.get("launcher", "srun")
        if container.runtime == "pyxis" and launcher != "srun":
            V.fail(c, "runtime", "container.runtime", "pyxis containers need launcher: srun")

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


def site_as_dict(site: Site) -> dict[str, Any]:
    """A plain, JSON/YAML-friendly view of a merged site (for `site show`)."""
    out: dict[str, Any] = {
        "name": site.name,
        "source": site.source,
        "description": site.description,
        "launcher": site.launcher,
        "mpi_plugin": site.mpi_plugin,
        "python": site.python,
        "timeout": site.timeout,
        "modules": list(site.modules),
        "env": dict(site.env),
        "directives": dict(site.directives),
        "prologue": list(site.prologue),
        "epilogue": list(site.epilogue),
        "templates": site.templates,
        "container": None if site.container is None else {
            "runtime": site.container.runtime, "image": site.container.image, "mounts": list(site.container.mounts),
            "python": site.container.interpreter,
            **({"roles": dict(site.container.roles)} if site.container.roles else {})},
        "node_types": {},
        "partitions": {},
        "presets": {name: dict(body) for name, body in site.presets},
    }
    for nt in site.node_types:
        out["node_types"][nt.name] = {
            "gpus": nt.gpus, "gpu_model": nt.gpu_model, "cpus": nt.cpus, "memory_gb": nt.memory_gb,
            "fabric": nt.fabric, "hcas": list(nt.hcas), "interfaces": list(nt.interfaces), "rdma": nt.rdma,
            "link_gbps": nt.link_gbps, "network_env": dict(nt.network_env()),
        }
    for p in site.partitions:
        out["partitions"][p.name] = {
            "max_nodes": p.max_nodes, "max_time": p.max_time, "node_type": p.node_type,
            "default": p.default, "default_time": p.default_time,
        }
    return out


def site_ref(site: str | None, fallback: str | None) -> str:
    """The site to load: --site, else $SLURMTORCH_SITE, else the verb's fallback."""
    ref = site or os.environ.get("SLURMTORCH_SITE") or fallback
    if not ref:
        raise SpecError("no site given", tip="pass --site NAME|PATH or set SLURMTORCH_SITE (see: slurmtorch site list)")
    return ref
