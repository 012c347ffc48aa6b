"""`slurmtorch site init`, pure: what a cluster says of itself -> a starting site file.

The text of `scontrol show node`, `scontrol show partition` (one line or several per
record), `scontrol show config` and `srun --mpi=list` becomes YAML for `site-configs/`: nodes grouped into node
types by what a job can see of them (CPUs, sockets/cores/threads, memory, GRES, features),
each partition with its node type and limits, the cluster's MaxArraySize, srun's MPI plugin. What a login node cannot
know (the fabric and its interfaces, the modules a job loads) gets the safest value the
schema allows and a `# CHECK:` comment: plain sockets (fabric: ethernet), no interface
named, unless the nodes' features name the fabric. No program is run here: the scheduler
edge runs them (`edge.queries.cluster_self_description`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import hostlist

from slurmtorch.errors import SiteError
from slurmtorch.submit.sites.model import NO_MPI_OPTION, SLURM_MAX_ARRAY_SIZE, parse_time

# A record's key: `NodeName=` / `PartitionName=` and the CamelCase keys after it; a word
# without one continues the value before it (OS=Linux 6.8.0 #1 SMP, Reason=Not responding).
_FIELD_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)=(.*)$", re.S)
_PLAIN_KEY_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
# YAML 1.1 words a plain key would be read as (a partition named `on` must stay a string).
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}
_GPU_MODEL_RE = re.compile(r"[^a-z0-9_.-]+")

# Node features that name the fabric (features are the admin's words: these are the common ones).
FABRIC_FEATURES = {
    "ib": "infiniband", "infiniband": "infiniband", "edr": "infiniband", "hdr": "infiniband",
    "hdr100": "infiniband", "ndr": "infiniband", "ndr200": "infiniband", "xdr": "infiniband",
    "roce": "roce", "slingshot": "slingshot", "ss11": "slingshot", "efa": "efa",
}
SAFE_FABRIC = "ethernet"
# srun's MPI plugins, best first: PMIx (Open MPI 5 needs it under srun; most MPIs and
# containers speak it), then PMI-2; with neither, `none`: plain srun, the cluster's MpiDefault.
_MPI_PREFERENCE = ("pmix", "pmi2")


@dataclass(frozen=True)
class Hardware:
    """What makes two nodes the same node type for a job."""

    cpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_mb: int
    gres: str
    features: tuple[str, ...]

    @property
    def gpus(self) -> int:
        return sum(count for name, _, count in gres_entries(self.gres) if name == "gpu")

    @property
    def gpu_model(self) -> str | None:
        models = sorted({kind for name, kind, _ in gres_entries(self.gres) if name == "gpu" and kind})
        return models[0] if len(models) == 1 else None


@dataclass(frozen=True)
class NodeType:
    name: str
    hardware: Hardware
    nodes: tuple[str, ...]


def records(text: str, key: str) -> list[dict[str, str]]:
    """scontrol's records (`key` starts each, e.g. NodeName), one line or several per record."""
    out: list[dict[str, str]] = []
    last: str | None = None
    for word in text.split():
        m = _FIELD_RE.match(word)
        if m and m.group(1) == key:
            out.append({key: m.group(2)})
            last = key
        elif not out:
            continue  # anything before the first record (a banner, a warning)
        elif m:
            out[-1][m.group(1)] = m.group(2)
            last = m.group(1)
        elif last is not None:
            out[-1][last] += " " + word
    return out


def gres_entries(gres: str) -> list[tuple[str, str | None, int]]:
    """(name, type, count) of each GRES: `gpu:a100:4(S:0-1),shard:8` -> gpu/a100/4, shard/None/8."""
    text = re.sub(r"\([^)]*\)", "", gres or "")
    out = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        if entry in ("(null)", "N/A"):
            continue
        parts = entry.split(":")
        number = _count(parts[-1], f"Gres={gres}") if len(parts) > 1 else None
        count = 1 if number is None else number
        kind = parts[1] if len(parts) > 2 or (len(parts) == 2 and number is None) else None
        out.append((parts[0], kind, count))
    return out


_COUNT_RE = re.compile(r"[0-9]+")


def _count(text: str, said: str) -> int | None:
    """A count scontrol printed (ASCII digits), or None for a word (UNLIMITED, N/A); one too long
    for any count Slurm keeps (int() refuses over 4300 digits) is a SiteError naming `said`."""
    if not _COUNT_RE.fullmatch(text):
        return None
    if len(text) > 18:
        raise SiteError(f"scontrol said {_comment(said)[:60]}... ({len(text)} digits): not a count slurmtorch can use",
                        tip="please report it with the output of scontrol show node/partition")
    return int(text)


def _int(record: dict[str, str], *keys: str) -> int:
    for k in keys:
        v = _count(record.get(k, ""), f"{k}={record.get(k, '')}")
        if v is not None:
            return v
    return 0


def hardware(node: dict[str, str]) -> Hardware:
    """A node's record as its node type's key. CPUs are Slurm's (hardware threads where
    ThreadsPerCore > 1: what --cpus-per-task counts); CPUEfctv leaves out specialized cores."""
    features = node.get("AvailableFeatures", node.get("Features", ""))
    gres = node.get("Gres", "")
    return Hardware(
        cpus=_int(node, "CPUEfctv", "CPUTot"), sockets=_int(node, "Sockets"),
        cores_per_socket=_int(node, "CoresPerSocket"), threads_per_core=_int(node, "ThreadsPerCore"),
        memory_mb=_int(node, "RealMemory"), gres="" if gres in ("(null)", "N/A") else re.sub(r"\([^)]*\)", "", gres),
        features=tuple(sorted(f for f in features.split(",") if f and f != "(null)")))


def node_types(nodes: list[dict[str, str]]) -> list[NodeType]:
    """Nodes grouped by `Hardware`, named for their GPU model (or gpu, cpu); the most numerous
    group takes the plain name (a100), a smaller one with the same the next (a100-2)."""
    groups: dict[Hardware, list[str]] = {}
    for node in nodes:
        groups.setdefault(hardware(node), []).append(node["NodeName"])
    out, taken = [], set()
    for hw, names in sorted(groups.items(), key=lambda g: -len(g[1])):  # stable: ties in scontrol's order
        base = _GPU_MODEL_RE.sub("-", hw.gpu_model.lower()).strip("-") if hw.gpu_model else ""
        base = base or ("gpu" if hw.gpus else "cpu")
        name, i = base, 1
        while name in taken:
            i += 1
            name = f"{base}-{i}"
        taken.add(name)
        out.append(NodeType(name, hw, tuple(names)))
    return out


def mpi_plugins(text: str) -> list[str]:
    """srun --mpi=list's plugins: `MPI plugin types are...` then one per line (older srun
    prefixes each with `srun: `), and `specific pmix plugin versions available: pmix_v4,...`."""
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip().removeprefix("srun:").strip()
        if "versions available:" in line:
            words = line.split(":", 1)[1].replace(",", " ").split()
        elif re.fullmatch(r"[a-z][a-z0-9_]*", line):
            words = [line]
        else:
            continue
        out += [w for w in words if w not in out]
    return out


def choose_mpi(plugins: list[str]) -> str | None:
    for want in _MPI_PREFERENCE:
        if want in plugins:
            return want
        versions = [p for p in plugins if re.fullmatch(want + r"_v\d+", p)]
        if versions:
            return max(versions, key=lambda p: int(p.rsplit("_v", 1)[1]))  # pmix_v10 after pmix_v9
    return None


def fabric_of(features: tuple[str, ...]) -> str | None:
    named = {FABRIC_FEATURES[f.lower()] for f in features if f.lower() in FABRIC_FEATURES}
    return named.pop() if len(named) == 1 else None


def _key(name: str) -> str:
    return name if _PLAIN_KEY_RE.fullmatch(name) and name.lower() not in _YAML_WORDS else json.dumps(name)


def _str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a YAML double-quoted scalar


def _comment(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)


def _hostlist(names: tuple[str, ...]) -> str:
    try:
        return hostlist.collect_hostlist(list(names))
    except hostlist.BadHostlist:
        return ",".join(names)


def _node_type_lines(nt: NodeType) -> list[str]:
    hw = nt.hardware
    fabric = fabric_of(hw.features)
    lines = [f"  # {_comment(_hostlist(nt.nodes))}: {len(nt.nodes)} node"
             f"{'s' if len(nt.nodes) != 1 else ''}; Sockets={hw.sockets} CoresPerSocket={hw.cores_per_socket} "
             f"ThreadsPerCore={hw.threads_per_core} RealMemory={hw.memory_mb} Gres={_comment(hw.gres) or '(none)'} "
             f"Features={_comment(','.join(hw.features)) or '(none)'}",
             f"  {_key(nt.name)}:", f"    gpus: {hw.gpus}"]
    if hw.gpu_model:
        lines.append(f"    gpu_model: {_str(hw.gpu_model)}")
    threads = "  # hardware threads, as Slurm counts CPUs" if hw.threads_per_core > 1 else ""
    lines.append(f"    cpus: {hw.cpus}{threads}")
    if hw.memory_mb >= 1024:
        lines.append(f"    memory_gb: {hw.memory_mb // 1024}")
    else:  # Slurm's RealMemory default is 1 (MB): a memory_gb of 0 would refuse every --mem
        lines.append(f"    # memory_gb left out: RealMemory={hw.memory_mb} (MB) is not the node's memory")
    if fabric in ("infiniband", "roce"):
        lines += [f"    # CHECK: fabric {fabric} from the nodes' features; with rdma and no hcas: NCCL and UCX use",
                  "    # every active HCA (name them in hcas: to choose)", f"    fabric: {fabric}", "    rdma: true"]
    elif fabric:
        lines += [f"    # CHECK: fabric {fabric} from the nodes' features: its NCCL network plugin must be on",
                  "    # the nodes (`slurmtorch site show` prints what the fabric sets)", f"    fabric: {fabric}"]
    else:
        lines += ["    # CHECK: the fabric cannot be seen from the login node: ethernet (TCP sockets, no RDMA) works",
                  "    # everywhere but slowly; set infiniband/roce (rdma: true), slingshot, efa or gcp-gib",
                  f"    fabric: {SAFE_FABRIC}"]
    lines += ["    # CHECK: interfaces: the fabric's IP interfaces for NCCL and Gloo (ib0, hsn0, ...); without it",
              "    # they use the interface the host name resolves to, often a management network",
              "    # interfaces: [ib0]"]
    return lines


def _time(text: str | None) -> str | None:
    """A Slurm time limit as the site takes it, or None (NONE, absent, or not a time)."""
    try:
        seconds = parse_time(text or "")
    except ValueError:
        return None
    return "UNLIMITED" if seconds == float("inf") else text


def _partition_lines(part: dict[str, str], types: list[NodeType]) -> tuple[list[str], bool]:
    """The partition's entry (and its CHECK lines), and whether it has one: not when scontrol
    listed none of its nodes."""
    name = part["PartitionName"]
    try:
        members = set(hostlist.expand_hostlist(part.get("Nodes", ""))) - {"(null)"}
    except hostlist.BadHostlist:
        members = set()
    present = [(nt, sum(n in members for n in nt.nodes)) for nt in types]
    present = [(nt, n) for nt, n in present if n]
    if not present:
        return [f"  # CHECK: partition {_comment(name)} left out: none of its nodes "
                f"({_comment(part.get('Nodes', ''))}) were listed by scontrol show node"], False
    # A job sized for the smallest node type fits on every node of the partition.
    nt = min(present, key=lambda p: (p[0].hardware.gpus, p[0].hardware.cpus, p[0].hardware.memory_mb))[0]
    lines = []
    if len(present) > 1:
        lines.append(f"  # CHECK: {_comment(name)} has several node types ("
                     + ", ".join(f"{t.name}: {n} nodes" for t, n in present)
                     + f"); {nt.name}, the smallest, fits on every node (for the others: an entry each, "
                       "with a constraint)")
    if part.get("State", "UP") != "UP":
        lines.append(f"  # CHECK: State={_comment(part['State'])} when this was written")
    max_nodes = part.get("MaxNodes", "")
    max_time, default_time = _time(part.get("MaxTime")), _time(part.get("DefaultTime"))
    if max_time is None:
        lines.append(f"  # CHECK: MaxTime={_comment(part.get('MaxTime', ''))} not read: UNLIMITED written")
    if default_time is not None and parse_time(default_time) > parse_time(max_time or "UNLIMITED"):
        default_time = None
    most = _count(max_nodes, f'MaxNodes={max_nodes}') or len(members)
    least = _count(part.get("MinNodes", ""), f"MinNodes={part.get('MinNodes', '')}") or 0
    if least > most:
        lines.append(f"  # CHECK: MinNodes={least} above MaxNodes={most}: min_nodes left out")
    lines += [f"  {_key(name)}:", f"    max_nodes: {most}",
              *([f"    min_nodes: {least}  # MinNodes: smaller jobs are refused before sbatch"]
                if 1 < least <= most else []),
              f"    max_time: {_str(max_time or 'UNLIMITED')}",
              f"    node_type: {_key(nt.name)}"]
    if default_time not in (None, "UNLIMITED"):
        lines.append(f"    default_time: {_str(default_time)}")
    if part.get("Default") == "YES":
        lines.append("    default: true")
    return lines, True


def config_value(text: str, key: str) -> str | None:
    """`scontrol show config`'s value of `key` (`Key = Value` lines; the first, the controller's own)."""
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            return value.strip()
    return None


def _array_lines(config_text: str) -> list[str]:
    """max_array_size as `scontrol show config` says (--array and --sweep take indices below it)."""
    said = config_value(config_text, "MaxArraySize")
    count = _count(said, f"MaxArraySize={said}") if said is not None else None
    if count is None:
        return ["# CHECK: MaxArraySize not read (scontrol show config said nothing): Slurm's default, 1001, applies"]
    if count > SLURM_MAX_ARRAY_SIZE:
        return [f"# CHECK: MaxArraySize = {count} is past Slurm's own limit ({SLURM_MAX_ARRAY_SIZE}): left out"]
    return [f"max_array_size: {count}  # scontrol show config: MaxArraySize"]


def site_yaml(node_text: str, partition_text: str, mpi_text: str, config_text: str = "", *,
              name: str | None = None, title: str | None = None) -> str:
    """The starting site file for this cluster, as YAML text with `# CHECK:` comments; `name`
    is written as the site's name, `title` (the file's name) only into its description;
    `config_text` is `scontrol show config`'s (MaxArraySize)."""
    nodes = records(node_text, "NodeName")
    parts = records(partition_text, "PartitionName")
    if not nodes or not parts:
        raise SiteError(f"scontrol listed no {'nodes' if not nodes else 'partitions'}: nothing to write a site from",
                        tip="run this where scontrol reaches the cluster's controller (scontrol ping)")
    # A node whose record gives no CPU count (FUTURE, not yet registered) says nothing of its type.
    unknown = tuple(n["NodeName"] for n in nodes if not hardware(n).cpus)
    types = node_types([n for n in nodes if hardware(n).cpus])
    if not types:
        raise SiteError("scontrol gave no node's CPU count: nothing to write a site from",
                        tip="run this once the nodes have registered (scontrol show node: CPUTot)")
    plugins = mpi_plugins(mpi_text)
    mpi = choose_mpi(plugins)
    lines = ["# Written by `slurmtorch site init` from scontrol show node, show partition, show config and "
             "srun --mpi=list.",
             "# Check every line marked CHECK:, then `slurmtorch site validate` this file and run",
             "# `slurmtorch doctor --allocation` in an allocation of each partition.",
             *([f"name: {_str(name)}"] if name else []),
             f"description: {_str((name or title or 'this cluster') + ': written by slurmtorch site init')}",
             "launcher: srun"]
    if mpi:
        lines += [f"# srun --mpi=list: {', '.join(plugins)}", f"srun_mpi: {mpi}"]
    else:
        lines += ["# CHECK: srun --mpi=list named neither pmix nor pmi2: plain srun, the cluster's MpiDefault",
                  f"srun_mpi: {NO_MPI_OPTION}"]
    lines += _array_lines(config_text)
    lines += ["# CHECK: modules: the environment modules every job loads (compilers, CUDA, NCCL, MPI), e.g.",
              "# modules: [cuda/12.4, nccl/2.21]", "", "node_types:"]
    if unknown:
        lines.append(f"  # CHECK: {_comment(_hostlist(unknown))} left out: scontrol gave no CPU count")
    for nt in types:
        lines += _node_type_lines(nt)
    lines += ["", "partitions:"]
    if not any(p.get("Default") == "YES" for p in parts):
        lines.append("  # CHECK: no partition is Slurm's default: jobs must name one (-p), or mark one default: true")
    kept, seen = 0, set()
    for part in parts:
        if part["PartitionName"] in seen:  # scontrol lists each once; a second would be a duplicate key
            continue
        seen.add(part["PartitionName"])
        entry, has_one = _partition_lines(part, types)
        lines += entry
        kept += has_one
    if not kept:
        raise SiteError("no partition of scontrol's has a node it listed: nothing to write a site from",
                        tip="compare scontrol show partition (Nodes=) with scontrol show node")
    return "\n".join(lines) + "\n"
