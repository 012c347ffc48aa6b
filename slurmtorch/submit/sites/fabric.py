"""The network environment a node type's fabric implies, before the admin's overrides.

One mapping, from what the site says about the wires (fabric, RDMA, HCAs, interfaces,
GPU vendor) to what NCCL (RCCL on AMD GPUs reads the same NCCL_* names), libfabric,
UCX and Gloo read; the doctor checks the same variables on a node. Each fabric sets
only what its vendor documents (the comments cite where); an admin may override or
remove (null) any of them in the node type's `env:`.

Interface and device lists follow NCCL's syntax
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html): a leading `=`
makes NCCL_SOCKET_IFNAME and NCCL_IB_HCA match names exactly; without it each entry is a
prefix, and `mlx5_1` also selects mlx5_10 and mlx5_11. Gloo takes exact names already.
"""

from __future__ import annotations

from typing import Any

from slurmtorch.protocol import FABRIC_HOST_SUFFIX

FABRICS = ("infiniband", "roce", "ethernet", "slingshot", "efa", "gcp-gib")
# RDMA through NCCL's own IB verbs transport: the HCAs are named (`hcas:`) when `rdma: true`.
HCA_FABRICS = frozenset({"infiniband", "roce"})
# RDMA through a network plugin (aws-ofi-nccl/-rccl, gIB): the fabric exists for it.
RDMA_ALWAYS = frozenset({"slingshot", "efa", "gcp-gib"})
RDMA_NEVER = frozenset({"ethernet"})

# HPE's recommended NCCL/RCCL settings for Slingshot 11 with the aws-ofi-nccl/-rccl plugin
# (https://github.com/HewlettPackard/shs-ccl-docs/blob/main/ccl_env.sh), the subset the
# centres set too: NERSC (https://github.com/NERSC/nccl-ofi-plugin/blob/main/env_nccl.sh),
# OLCF (https://docs.olcf.ornl.gov/software/analytics/pytorch_frontier.html), ALCF Polaris.
# CXI's registration of host buffers deadlocks with CUDA/HIP allocations
# (DISABLE_HOST_REGISTER, the userfaultfd cache monitor), the default completion queue
# overflows at scale, rings may cross NICs, and GPUDirect RDMA is used up to the CPU's
# host bridge (PHB). Not set: FI_PROVIDER=cxi, which none of these documents sets (the
# plugin picks libfabric's provider itself; `slurmtorch doctor` checks the CXI devices and
# the plugin are there), HPE's FI_CXI_RDZV_* (they need `srun --network=disable_rdzv_get`: a site adds
# both, in env: and srun_args:), and NCCL_NET="AWS Libfabric" (HPE: not on one-node runs).
SLINGSHOT_ENV = (
    ("FI_CXI_DISABLE_HOST_REGISTER", "1"),
    ("FI_MR_CACHE_MONITOR", "userfaultfd"),
    ("FI_CXI_DEFAULT_CQ_SIZE", "131072"),
    ("NCCL_NET_GDR_LEVEL", "PHB"),
    ("NCCL_CROSS_NIC", "1"),
)
# RCCL on AMD GPUs over Slingshot (the same HPE file; OLCF's Frontier guide): GPU memory
# mapped as fine-grained PCIe memory, which the plugin's GPUDirect RDMA needs.
SLINGSHOT_AMD_ENV = (("HSA_FORCE_FINE_GRAIN_PCIE", "1"),)

# AWS EFA with the aws-ofi-nccl plugin: AWS's NCCL guide sets FI_EFA_USE_DEVICE_RDMA=1
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html); the plugin's
# own table (https://github.com/aws/aws-ofi-nccl/blob/master/doc/efa-env-var.md) says it and
# FI_PROVIDER=efa are needed only by older plugins and harmless on p4/p5, and the plugin
# sets its tuning (buffer and chunk sizes, the tuner) itself. The plugin's and libfabric's
# folders go on LD_LIBRARY_PATH with the node type's prepend_path.
EFA_ENV = (
    ("FI_PROVIDER", "efa"),
    ("FI_EFA_USE_DEVICE_RDMA", "1"),
)

# Google Cloud A3 Ultra / A4 with the gIB NCCL plugin (RDMA over RoCE on CX-7 NICs): the
# values of /usr/local/gib/scripts/set_nccl_env.sh as Google's Cluster Toolkit lists them
# (https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/main/examples/machine-learning/a3-ultragpu-8g/nemo-framework/Dockerfile:
# "Set the following to match what is in /usr/local/gib/scripts/set_nccl_env.sh"), less the
# machine's own tuner file (NCCL_TUNER_CONFIG_PATH: the node type's env). The plugin's
# folder (/usr/local/gib/lib64) goes on LD_LIBRARY_PATH with prepend_path.
GCP_GIB_ENV = (
    ("NCCL_NET", "gIB"),
    ("NCCL_CROSS_NIC", "0"),
    ("NCCL_NET_GDR_LEVEL", "PIX"),
    ("NCCL_P2P_NET_CHUNKSIZE", "131072"),
    ("NCCL_NVLS_CHUNKSIZE", "524288"),
    ("NCCL_IB_ADAPTIVE_ROUTING", "1"),
    ("NCCL_IB_QPS_PER_CONNECTION", "4"),
    ("NCCL_IB_TC", "52"),
    ("NCCL_IB_FIFO_TC", "84"),
)


def fabric_env(nt: Any) -> tuple[tuple[str, str], ...]:
    """Network environment a node type's fabric implies (before admin overrides).

    IB and RoCE with RDMA name the HCAs for NCCL (exactly) and UCX; RoCE gets
    NCCL_IB_GID_INDEX only when the admin gives `gid_index` (NCCL >= 2.21 finds the RoCE
    v2 GID itself). Slingshot, EFA and gIB get their plugin's documented settings.
    Anything else disables NCCL's IB transport (it would otherwise probe and may pick a
    wrong device). Interfaces pin NCCL's and Gloo's sockets, so neither chooses docker0
    or a management NIC. `nt` is a `cluster.NodeType`.
    """
    env: list[tuple[str, str]] = []
    if nt.fabric in HCA_FABRICS and nt.rdma:
        # No HCAs listed (hcas: auto): NCCL's IB transport and UCX use every active HCA
        # themselves, as JSC's, IDRIS's and TACC's sample scripts leave them.
        if nt.hcas:
            env.append(("NCCL_IB_HCA", "=" + ",".join(nt.hcas)))
            # UCX wants device:port; HCAs are usually listed without the port.
            env.append(("UCX_NET_DEVICES", ",".join(h if ":" in h else f"{h}:1" for h in nt.hcas)))
        if nt.fabric == "roce" and nt.gid_index is not None:
            env.append(("NCCL_IB_GID_INDEX", str(nt.gid_index)))
    elif nt.fabric == "slingshot":
        env += SLINGSHOT_ENV
        if getattr(nt, "gpu_vendor", "nvidia") == "amd":
            env += SLINGSHOT_AMD_ENV
    elif nt.fabric == "efa":
        env += EFA_ENV
    elif nt.fabric == "gcp-gib":
        env += GCP_GIB_ENV
    else:
        env.append(("NCCL_IB_DISABLE", "1"))
    if getattr(nt, "fabric_host_suffix", None):
        # The ranks' rendezvous address is the node's fabric name (bootstrap.rendezvous.site_address).
        env.append((FABRIC_HOST_SUFFIX, nt.fabric_host_suffix))
    if nt.interfaces:
        env.append(("NCCL_SOCKET_IFNAME", "=" + ",".join(nt.interfaces)))
        env.append(("GLOO_SOCKET_IFNAME", ",".join(nt.interfaces)))
    return tuple(env)
