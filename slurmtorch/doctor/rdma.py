"""The checks an RDMA fabric needs of a node: pure functions of (facts, node type).

Each one a cheap look that explains a slow or failing first collective: the locked-memory
limit (RDMA pins buffers), GPUDirect RDMA (nvidia-peermem, or DMA-BUF), InfiniBand/RoCE
ports ACTIVE with a RoCE v2 GID, Slingshot's CXI devices, EFA devices, and the NCCL network
plugin a plugin fabric needs on LD_LIBRARY_PATH (NCCL falls back to TCP sockets without
it, silently). Facts come from `doctor.facts.gather_rdma`.
"""

from __future__ import annotations

import re

from slurmtorch.doctor.facts import NodeFacts, Port, RdmaFacts
from slurmtorch.doctor.checks import FAIL, OK, WARN, Check

# Fabrics whose RDMA runs through a network plugin, and where that plugin usually lives.
PLUGIN_HOMES = {
    "slingshot": "the centre's aws-ofi-nccl (aws-ofi-rccl on AMD GPUs) build, e.g. from its nccl or "
                 "rccl-net-plugin module (https://github.com/HewlettPackard/shs-ccl-docs)",
    "efa": "/opt/amazon/ofi-nccl/lib from the EFA installer "
           "(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html)",
    "gcp-gib": "/usr/local/gib/lib64 from Google's nccl-gib package",
}
# Linux's dma-buf import of GPU memory into an RDMA device (NCCL_DMABUF_ENABLE,
# https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html) needs Linux 5.12.
_DMABUF_KERNEL = (5, 12)


def rdma_checks(facts: NodeFacts, nt) -> list[Check]:
    """Every RDMA check that applies to the node type, in report order (none without RDMA)."""
    if not nt.rdma:
        return []
    r = facts.rdma
    out = [check_memlock(r)]
    if nt.fabric in ("infiniband", "roce"):
        out += check_ports(r, nt)
        if nt.gpus and nt.gpu_vendor == "nvidia":
            out.append(check_gpudirect(r))
    if nt.fabric == "slingshot":
        out.append(check_cxi(r, nt))
    if nt.fabric == "efa":
        out.append(check_efa(facts))
    if nt.fabric in PLUGIN_HOMES:
        out.append(check_net_plugin(r, nt))
    return out


def check_memlock(r: RdmaFacts) -> Check:
    """RDMA registers (pins) the buffers it sends from; a small `ulimit -l` fails that
    registration (ibv_reg_mr: Cannot allocate memory) at the first collective."""
    if r.memlock is None:
        return Check(OK, "locked memory (ulimit -l): unlimited")
    return Check(WARN, f"locked memory (ulimit -l) is {r.memlock // 1024} KiB; RDMA pins its buffers",
                 "set memlock unlimited for jobs (/etc/security/limits.conf, and slurmd started with "
                 "LimitMEMLOCK=infinity; PropagateResourceLimits carries the submit host's limit)")


def check_ports(r: RdmaFacts, nt) -> list[Check]:
    """Each HCA's port ACTIVE; on RoCE, a RoCE v2 GID to use (at gid_index when the site pins one).
    With hcas: auto, NCCL skips ports that are down: one ACTIVE port is what it needs."""
    if not nt.hcas:
        active = [p for p in r.ports if p.state.endswith("ACTIVE")]
        if r.ports and not active:
            return [Check(FAIL, "no RDMA port is ACTIVE (hcas: auto)",
                          "check the cables and the subnet manager (ibstat; on RoCE the switch ports)")]
        checks = [Check(OK, f"{p.device} port {p.port} ACTIVE ({p.link_layer or 'link layer unknown'})") for p in active]
        return checks + [_roce_gid(p, nt) for p in active if nt.fabric == "roce"]
    out = []
    for hca in nt.hcas:
        device, _, port = hca.partition(":")
        found = next((p for p in r.ports if p.device == device and p.port == int(port or 1)), None)
        if found is None:
            continue  # a missing device is check_infiniband's line
        if not found.state.endswith("ACTIVE"):
            out.append(Check(FAIL, f"{device} port {found.port} is {found.state or 'in an unknown state'}, not ACTIVE",
                             "check the cable and the subnet manager (ibstat; on RoCE the switch port)"))
            continue
        out.append(Check(OK, f"{device} port {found.port} ACTIVE ({found.link_layer or 'link layer unknown'})"))
        if nt.fabric == "roce":
            out.append(_roce_gid(found, nt))
    return out


def _roce_gid(port: Port, nt) -> Check:
    v2 = [i for i, kind in port.gid_types if kind.strip().lower() == "roce v2"]
    if nt.gid_index is not None:
        kind = dict(port.gid_types).get(nt.gid_index, "not in use")
        if nt.gid_index not in v2:
            return Check(FAIL, f"{port.device} GID {nt.gid_index} (the site's gid_index) is {kind}, not RoCE v2",
                         f"set node_types.{nt.name}.gid_index to one of {v2 or 'none'} (show_gids), or leave it "
                         "out: NCCL >= 2.21 picks a RoCE v2 GID itself")
        return Check(OK, f"{port.device} GID {nt.gid_index} is RoCE v2")
    if not v2:
        return Check(FAIL, f"{port.device} has no RoCE v2 GID (most switches do not route RoCE v1)",
                     "give the port an IPv4 address (the RoCE v2 GID follows it)")
    return Check(OK, f"{port.device} has RoCE v2 GIDs ({', '.join(map(str, v2))}); NCCL >= 2.21 picks one")


def check_gpudirect(r: RdmaFacts) -> Check:
    """GPU memory straight to the HCA: the nvidia-peermem module, or DMA-BUF (Linux >= 5.12
    with NVIDIA's open kernel modules); without either NCCL stages every message through host memory
    (https://docs.nvidia.com/cuda/gpudirect-rdma/)."""
    if r.peermem:
        return Check(OK, "GPUDirect RDMA: nvidia_peermem loaded")
    if r.nvidia_open and _kernel(r.kernel) >= _DMABUF_KERNEL:
        return Check(OK, f"GPUDirect RDMA: DMA-BUF (Linux {r.kernel}, NVIDIA open kernel modules)")
    return Check(WARN, "GPUDirect RDMA: nvidia_peermem is not loaded and DMA-BUF is not available "
                       f"(Linux {r.kernel or '?'}{', NVIDIA open kernel modules' if r.nvidia_open else ''}): "
                       "NCCL copies through host memory", "modprobe nvidia-peermem (at boot: /etc/modules-load.d)")


def check_cxi(r: RdmaFacts, nt) -> Check:
    """HPE Slingshot 11 NICs appear as /sys/class/cxi/cxiN (the cxi driver); libfabric's cxi
    provider, and so the plugin, needs them."""
    if not r.cxi_devices:
        return Check(FAIL, f"no CXI devices in /sys/class/cxi, but node type {nt.name!r} is on Slingshot",
                     "run the doctor on a compute node; the cxi driver (Slingshot host software) must be loaded")
    want = len(nt.interfaces)
    if want and len(r.cxi_devices) < want:
        return Check(WARN, f"{len(r.cxi_devices)} CXI devices ({', '.join(r.cxi_devices)}) for the {want} interfaces "
                           f"of node type {nt.name!r}", f"correct node_types.{nt.name}.interfaces, or check the NICs")
    return Check(OK, f"CXI devices: {', '.join(r.cxi_devices)}")


def check_efa(facts: NodeFacts) -> Check:
    """EFA devices are RDMA devices named rdmap* (`fi_info -p efa` lists the same)."""
    efa = [d for d in facts.ib_devices if d.startswith("rdmap")]
    if not efa:
        return Check(FAIL, "no EFA devices (rdmap* in /sys/class/infiniband)",
                     "launch the instances with EFA interfaces and install the EFA driver (efa_installer)")
    return Check(OK, f"{len(efa)} EFA devices ({', '.join(efa[:4])}{', ...' if len(efa) > 4 else ''})")


def check_net_plugin(r: RdmaFacts, nt) -> Check:
    """The NCCL/RCCL network plugin on the job's LD_LIBRARY_PATH; without it NCCL uses TCP sockets."""
    plugins = list(r.net_plugins)
    if nt.gpu_vendor == "amd":
        plugins = [p for p in plugins if "rccl-net" in p or "nccl-net" in p]
    if not plugins:
        return Check(FAIL, f"no NCCL network plugin (lib*ccl-net*.so) on the job's LD_LIBRARY_PATH for fabric "
                           f"{nt.fabric}: NCCL would fall back to TCP sockets",
                     f"put {PLUGIN_HOMES[nt.fabric]} on LD_LIBRARY_PATH (node_types.{nt.name}.prepend_path)")
    return Check(OK, f"NCCL network plugin: {', '.join(plugins[:3])}")


def _kernel(release: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", release)
    return (int(m[1]), int(m[2])) if m else (0, 0)
