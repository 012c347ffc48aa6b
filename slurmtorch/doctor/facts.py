"""What the node checks look at, and the one edge that reads it off this node.

`gather_node_facts` looks at the node once (the jobs' interpreter's torch and MPI
library, `srun --mpi=list`, /sys, /proc and /dev, the host name, the locked-memory
limit, the NCCL network plugins on the job's LD_LIBRARY_PATH) and returns a frozen
`NodeFacts`; the checks (`doctor.node`, `doctor.rdma`) are pure functions of it. A missing
piece is a fact, never an exception: a node without torch or srun is exactly what the
doctor reports.

torch and mpi4py are probed in a child process of the site's `python` (the interpreter
the jobs use, not necessarily this one), so a broken build cannot take the doctor down.
"""

from __future__ import annotations

import glob
import json
import os
import re
import resource
import socket
from collections.abc import Mapping
from dataclasses import dataclass

import slurmtorch
from slurmtorch.bootstrap import rendezvous
from slurmtorch.errors import SubmitError
from slurmtorch.submit.edge import runner


@dataclass(frozen=True)
class TorchFacts:
    """What the jobs' interpreter's torch offers; version None when it cannot be imported."""

    version: str | None = None
    error: str = ""
    cuda: str | None = None  # torch.version.cuda: None on a CPU (or ROCm) build
    gpus: int = 0  # torch.cuda.device_count() (0 without CUDA or ROCm)
    gloo: bool = False
    nccl: bool = False
    mpi: bool = False
    hip: str | None = None  # torch.version.hip: a ROCm build (its "nccl" backend is RCCL)


@dataclass(frozen=True)
class MpiFacts:
    """The MPI library mpi4py loads; library None when it loads none (mpi4py: its version where
    it is installed even so)."""

    library: str | None = None  # MPI_Get_library_version(), first line
    mpi4py: str | None = None
    error: str = ""


@dataclass(frozen=True)
class Interface:
    name: str
    ipv4: str | None
    speed_mbps: int | None = None  # /sys/class/net/NAME/speed; None when unknown


@dataclass(frozen=True)
class Port:
    """One RDMA port: /sys/class/infiniband/DEV/ports/N."""

    device: str
    port: int
    state: str  # e.g. "4: ACTIVE"
    link_layer: str = ""  # InfiniBand | Ethernet
    gid_types: tuple[tuple[int, str], ...] = ()  # (index, "RoCE v2" | "IB/RoCE v1") of the GIDs in use


@dataclass(frozen=True)
class RdmaFacts:
    """What an RDMA fabric needs of a node (doctor.rdma reads them)."""

    ports: tuple[Port, ...] = ()
    memlock: int | None = None  # RLIMIT_MEMLOCK's soft limit in bytes; None: unlimited
    peermem: bool = False  # the nvidia_peermem module is loaded
    nvidia_open: bool = False  # NVIDIA's open kernel modules (DMA-BUF for GPUDirect RDMA)
    kernel: str = ""  # uname -r
    cxi_devices: tuple[str, ...] = ()  # /sys/class/cxi (HPE Slingshot 11 NICs)
    net_plugins: tuple[str, ...] = ()  # lib{nccl,rccl}-net*.so on the job's LD_LIBRARY_PATH


@dataclass(frozen=True)
class NodeFacts:
    """Everything the node checks look at, gathered once by `gather_node_facts`."""

    hostname: str
    python: str
    python_error: str = ""  # the interpreter could not run the probe at all
    torch: TorchFacts = TorchFacts(error="not probed")
    mpi: MpiFacts = MpiFacts(error="not probed")
    gpu_devices: int = 0  # /dev/nvidiaN present
    amd_gpus: int = 0  # DRM render nodes of AMD GPUs (each MI250X GCD is one)
    ib_devices: tuple[str, ...] = ()
    interfaces: tuple[Interface, ...] = ()
    host_address: str | None = None  # what the host name resolves to
    srun_plugins: tuple[str, ...] | None = None  # `srun --mpi=list`; None: no srun here
    srun_error: str = ""
    slurm_version: tuple[int, int] | None = None  # `srun --version`: (major, minor), e.g. (24, 11)
    environ: tuple[tuple[str, str], ...] = ()  # the current environment (for "already set")
    rdma: RdmaFacts = RdmaFacts()


# --------------------------------------------------------------------------- the probe

# Marker of the probe's one output line (the interpreter may print warnings too).
PROBE_MARK = "SLURMTORCH_DOCTOR "

# Runs in the jobs' interpreter with the site's environment: torch and MPI facts as one
# JSON line. The MPI library comes from `slurmtorch.bootstrap.mpi.library_version` (the
# one module that imports mpi4py; no MPI_Init, so no MPI world or process manager is
# needed). The probe loads the doctor's own copy of the slurmtorch package (that package
# alone, not the doctor's site-packages), so it works whether or not the jobs' interpreter
# has slurmtorch, and mpi4py and torch are still that interpreter's.
_PROBE = r"""
import importlib.util, json, os, sys
os.environ.update(json.loads(sys.argv[1]))
out = {}
try:
    import torch
    import torch.distributed as dist
    ok = dist.is_available()
    hip = getattr(torch.version, "hip", None)
    out["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda, "hip": hip,
                    "gpus": torch.cuda.device_count() if torch.version.cuda or hip else 0,
                    "gloo": ok and dist.is_gloo_available(), "nccl": ok and dist.is_nccl_available(),
                    "mpi": ok and dist.is_mpi_available()}
except Exception as e:
    out["torch_error"] = type(e).__name__ + ": " + str(e)
try:
    import mpi4py
    out["mpi4py"] = mpi4py.__version__  # installed, whether or not it finds an MPI library
except Exception:
    pass
try:
    spec = importlib.util.spec_from_file_location("slurmtorch", sys.argv[2],
                                                  submodule_search_locations=[os.path.dirname(sys.argv[2])])
    sys.modules["slurmtorch"] = package = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(package)
    from slurmtorch.bootstrap import mpi
    library, version = mpi.library_version()
    out["mpi"] = {"library": library, "mpi4py": version}
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
                if m else MpiFacts(error=data.get("mpi_error", "unknown"), mpi4py=data.get("mpi4py"))
            return torch, mpi
    return None


def parse_srun_plugins(text: str) -> tuple[str, ...]:
    """The plugin names in `srun --mpi=list` output (one per line, or 22.05's `specific ...: a, b`)."""
    names = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("specific ") and ":" in line:
            names += [n.strip() for n in line.split(":", 1)[1].split(",") if n.strip()]
        elif line and re.fullmatch(r"(srun: )?[a-z][a-z0-9_]*", line):
            names.append(line.split()[-1])
    return tuple(dict.fromkeys(names))


def parse_slurm_version(text: str) -> tuple[int, int] | None:
    """(24, 11) from `srun --version` ("slurm 24.11.5", Debian's "slurm-wlm 24.11.5")."""
    m = re.search(r"\bslurm(?:-wlm)?\s+(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


# --------------------------------------------------------------------------- the edge


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def interface_speed(name: str) -> int | None:
    """/sys/class/net/NAME/speed in Mb/s; None when unknown (-1 on a link that is down)."""
    speed = _read(f"/sys/class/net/{name}/speed")
    return int(speed) if speed and speed.lstrip("-").isdigit() else None


def gather_interfaces() -> tuple[Interface, ...]:
    return tuple(Interface(name, rendezvous.interface_address(name), interface_speed(name))
                 for _, name in socket.if_nameindex())


def probe_interpreter(python: str, env: Mapping[str, str], timeout: float) -> tuple[str, TorchFacts, MpiFacts]:
    """(error, torch, mpi) from the probe run by `python` with the site's environment."""
    try:
        proc = runner.run([python, "-c", _PROBE, json.dumps(dict(env)), slurmtorch.__file__],
                             timeout=timeout, check=False)
    except SubmitError as e:
        return e.message, TorchFacts(error="not probed"), MpiFacts(error="not probed")
    parsed = parse_probe(proc.stdout)
    if parsed is None:
        error = f"exit {proc.returncode}: {_last_line(proc.stderr) or _last_line(proc.stdout) or 'no output'}"
        return error, TorchFacts(error="not probed"), MpiFacts(error="not probed")
    return "", *parsed


def srun_plugins() -> tuple[tuple[str, ...] | None, str]:
    """(plugins, error): srun's --mpi plugins, or None and why srun cannot tell."""
    try:
        proc = runner.run(["srun", "--mpi=list"], timeout=30, check=False)
    except SubmitError as e:
        return None, e.message
    text = proc.stdout + proc.stderr  # Slurm 22.05 prints the list on stderr
    if proc.returncode != 0:
        return None, f"srun --mpi=list exit {proc.returncode}: {_last_line(text)}"
    return parse_srun_plugins(text), ""


def slurm_version() -> tuple[int, int] | None:
    """This srun's Slurm version, or None without a usable srun."""
    try:
        proc = runner.run(["srun", "--version"], timeout=30, check=False)
    except SubmitError:
        return None
    return parse_slurm_version(proc.stdout + proc.stderr) if proc.returncode == 0 else None


def _ports() -> tuple[Port, ...]:
    ports = []
    for path in sorted(glob.glob("/sys/class/infiniband/*/ports/*")):
        device, port = path.split("/")[4], path.rsplit("/", 1)[1]
        if not port.isdigit():
            continue
        types = []
        for entry in sorted(glob.glob(f"{path}/gid_attrs/types/*"), key=lambda p: int(p.rsplit("/", 1)[1])):
            kind = _read(entry)  # unreadable (EINVAL) for a GID slot not in use
            if kind:
                types.append((int(entry.rsplit("/", 1)[1]), kind))
        ports.append(Port(device, int(port), _read(f"{path}/state") or "", _read(f"{path}/link_layer") or "",
                          tuple(types)))
    return tuple(ports)


def _net_plugins(env: Mapping[str, str]) -> tuple[str, ...]:
    """NCCL/RCCL network plugins in the job's LD_LIBRARY_PATH folders (NCCL loads libnccl-net.so from there)."""
    folders = (env.get("LD_LIBRARY_PATH") or os.environ.get("LD_LIBRARY_PATH", "")).split(":")
    found = []
    for folder in dict.fromkeys(f for f in folders if f):
        found += sorted(glob.glob(os.path.join(folder, "lib*ccl-net*.so*")))
    return tuple(found)


def gather_rdma(env: Mapping[str, str]) -> RdmaFacts:
    """The RDMA part of the facts: ports, limits, modules, devices, plugins (never raises)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    try:
        cxi = tuple(sorted(os.listdir("/sys/class/cxi")))
    except OSError:
        cxi = ()
    driver = _read("/proc/driver/nvidia/version") or ""
    return RdmaFacts(ports=_ports(), memlock=None if soft == resource.RLIM_INFINITY else soft,
                     peermem=os.path.isdir("/sys/module/nvidia_peermem"), nvidia_open="Open Kernel Module" in driver,
                     kernel=os.uname().release, cxi_devices=cxi, net_plugins=_net_plugins(env))


def _amd_gpus() -> int:
    """AMD GPUs (GCDs) by their DRM render nodes: PCI vendor 0x1002."""
    return sum(1 for path in glob.glob("/sys/class/drm/renderD*/device/vendor") if _read(path) == "0x1002")


def gather_node_facts(python: str, env: Mapping[str, str], timeout: float = 60) -> NodeFacts:
    """The side-effecting edge: look at this node. Never raises for a missing piece."""
    hostname = socket.gethostname()
    python_error, torch, mpi = probe_interpreter(python, env, timeout)
    plugins, srun_error = srun_plugins()
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
                     gpu_devices=gpu_devices, amd_gpus=_amd_gpus(), ib_devices=ib, interfaces=gather_interfaces(),
                     host_address=host_address, srun_plugins=plugins, srun_error=srun_error,
                     slurm_version=slurm_version() if plugins is not None else None,
                     environ=tuple(os.environ.items()), rdma=gather_rdma(env))
