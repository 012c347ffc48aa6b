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

from collections.abc import Mapping
from typing import Any

from slurmtorch.protocol import FABRIC_HOST_SUFFIX

FABRICS = ("infiniband", "roce", "ethernet", "slingshot", "efa", "gcp-gib")
# RDMA through NCCL's own IB verbs transport: the HCAs are named (`hcas:`) when `rdma: true`.
HCA_FABRICS = frozenset({"infiniband", "roce"})
# RDMA through a network plugin (aws-ofi-nccl/-rccl, gIB): the fabric exists for it.
RDMA_ALWAYS = frozenset({"slingshot", "efa", "gcp-gib"})
RDMA_NEVER = frozenset({"ethernet"})

# HPE's "Essential Libfabric Environment Settings" and "Environment Settings for NCCL" for
# Slingshot with the aws-ofi-nccl/-rccl plugin, as its current guide lists them
# (https://github.com/HewlettPackard/shs-ccl-docs/blob/main/nccl/nccl_tuning_guide.md;
# ccl_env.sh in the same repository sources them). CXI's registration of host buffers
# deadlocks with CUDA/HIP allocations (DISABLE_HOST_REGISTER, the userfaultfd cache
# monitor), the default completion queue overflows at scale, the alt_read rendezvous with
# no eager data and no rendezvous get (which needs the job's `--network=disable_rdzv_get`:
# RENDEZVOUS_DIRECTIVES), hybrid matching that falls back to software when the NIC's match
# resources run out, a larger transmit queue; rings may cross NICs, GPUDirect RDMA up to
# the CPU's host bridge (PHB), and NCCL_NET="AWS Libfabric" so that NCCL stops when the
# plugin does not load instead of falling back to TCP sockets in silence (NERSC sets it
# too: https://github.com/NERSC/nccl-ofi-plugin/blob/main/env_nccl.sh; CSCS "should always
# be set": docs/software/communication/nccl_env_vars in eth-cscs/cscs-docs). HPE's
# ccl_env.sh warns against NCCL_NET on one-node runs (network transport within the node,
# a needless VNI): fabric_env leaves it out of a one-node job. Not set: FI_PROVIDER=cxi,
# which none of these documents sets (the plugin picks libfabric's provider itself;
# `slurmtorch doctor` checks the CXI devices and the plugin are there). A centre that
# documents other values sets them in the node type's env (site-configs/cscs-alps.yaml).
SLINGSHOT_ENV = (
    ("FI_CXI_DISABLE_HOST_REGISTER", "1"),
    ("FI_MR_CACHE_MONITOR", "userfaultfd"),
    ("FI_CXI_DEFAULT_CQ_SIZE", "131072"),
    ("FI_CXI_RDZV_PROTO", "alt_read"),
    ("FI_CXI_RX_MATCH_MODE", "hybrid"),
    ("FI_CXI_RDZV_EAGER_SIZE", "0"),
    ("FI_CXI_RDZV_GET_MIN", "0"),
    ("FI_CXI_DEFAULT_TX_SIZE", "2048"),
    ("NCCL_NET_GDR_LEVEL", "PHB"),
    ("NCCL_CROSS_NIC", "1"),
    ("NCCL_NET", "AWS Libfabric"),
)
# HPE's guide: the alt_read rendezvous needs the NIC's rdzv_get_en off, "on a per-job basis
# through a job scheduler like Slurm (--network=disable_rdzv_get)": an #SBATCH line for every
# job whose environment asks for alt_read (the fabric's, or a node type's as on Frontier),
# beneath the site's, partition's and preset's directives, which may change or remove it.
RENDEZVOUS_DIRECTIVES = (("network", "disable_rdzv_get"),)
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


def fabric_directives(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """#SBATCH lines the job's network environment needs (HPE: alt_read needs disable_rdzv_get)."""
    return RENDEZVOUS_DIRECTIVES if env.get("FI_CXI_RDZV_PROTO") == "alt_read" else ()


def fabric_env(nt: Any, one_node: bool = False) -> tuple[tuple[str, str], ...]:
    """Network environment a node type's fabric implies (before admin overrides).

    IB and RoCE with RDMA name the HCAs for NCCL (exactly) and UCX; RoCE gets
    NCCL_IB_GID_INDEX only when the admin gives `gid_index` (NCCL >= 2.21 finds the RoCE
    v2 GID itself). Slingshot, EFA and gIB get their plugin's documented settings; on
    Slingshot a one-node job (`one_node`) leaves NCCL_NET out, as HPE's ccl_env.sh warns.
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
        env += [(k, v) for k, v in SLINGSHOT_ENV if not (one_node and k == "NCCL_NET")]
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
