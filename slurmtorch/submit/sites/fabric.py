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
# `fabric_env:` (site, preset): the fabric's whole environment (full), or only the names of its
# interfaces (interfaces-only) where the centre's own layer sets the rest: LUMI's bindings module
# and its images' aws-ofi-rccl, NERSC's shifter nccl-plugin module, CSCS's Container Engine hooks.
FULL, INTERFACES_ONLY = "full", "interfaces-only"
FABRIC_ENV_MODES = (FULL, INTERFACES_ONLY)
# RDMA through NCCL's own IB verbs transport: the HCAs are named (`hcas:`) when `rdma: true`.
HCA_FABRICS = frozenset({"infiniband", "roce"})
# RDMA through a network plugin (aws-ofi-nccl/-rccl, gIB): the fabric exists for it.
RDMA_ALWAYS = frozenset({"slingshot", "efa", "gcp-gib"})
RDMA_NEVER = frozenset({"ethernet"})

# Slingshot with the aws-ofi-nccl/-rccl plugin: the settings HPE's current guide
# (https://github.com/HewlettPackard/shs-ccl-docs/blob/main/nccl/nccl_tuning_guide.md, its
# "Essential Libfabric Environment Settings" and "Environment Settings for NCCL") shares with
# the centres' own documents: CSCS's docs/software/communication/nccl_env_vars in
# eth-cscs/cscs-docs ("should always be set"), NERSC's
# https://github.com/NERSC/nccl-ofi-plugin/blob/main/env_nccl.sh. Where they differ the
# default sets nothing and a centre's site says its value (site-configs/cscs-alps.yaml):
# HPE's alt_read rendezvous (FI_CXI_RDZV_PROTO, _EAGER_SIZE=0, _GET_MIN=0, which needs the job's
# --network=disable_rdzv_get), which CSCS, LUMI (LUMI-AI-Guide's job scripts) and NERSC do not
# set; FI_CXI_RX_MATCH_MODE (HPE hybrid, CSCS software) and FI_CXI_DEFAULT_TX_SIZE (HPE 2048,
# CSCS 32768). Not set either: FI_PROVIDER=cxi, which none of them sets (the plugin picks
# libfabric's provider itself; `slurmtorch doctor` checks the CXI devices and the plugin).
SLINGSHOT_ENV = (
    # CXI's registration of host buffers deadlocks with CUDA/HIP allocations: HPE's table
    # ("may cause deadlocks"), CSCS's nccl_env_vars, NERSC's env_nccl.sh.
    ("FI_CXI_DISABLE_HOST_REGISTER", "1"),
    # The memory-registration cache monitor: HPE's table and CSCS's (NERSC's env_nccl.sh
    # writes memhooks as "a short term workaround"; OLCF's Frontier uses kdreg2: a site's env).
    ("FI_MR_CACHE_MONITOR", "userfaultfd"),
    # The completion queue overflows at scale: HPE's table ("should be increased"), CSCS's.
    ("FI_CXI_DEFAULT_CQ_SIZE", "131072"),
    # GPUDirect RDMA up to the CPU's host bridge: HPE ("required to enable RDMA"), CSCS, NERSC.
    ("NCCL_NET_GDR_LEVEL", "PHB"),
    # Rings may cross NICs: HPE ("improve performance on large systems"), CSCS, NERSC.
    ("NCCL_CROSS_NIC", "1"),
    # NCCL stops when the plugin does not load instead of falling back to TCP sockets in
    # silence: HPE's NCCL table, CSCS ("applications will fail to start"), NERSC ("if you want
    # it to fail when plugin load unsuccesful"). HPE's ccl_env.sh warns against it on one-node
    # runs (network transport within the node, a needless VNI): fabric_env leaves it out there.
    ("NCCL_NET", "AWS Libfabric"),
)
# HPE's alt_read rendezvous, hybrid matching and transmit queue (the guide's table), which
# edition 2 set for every Slingshot job and which a site now sets where its centre documents
# them (OLCF's Frontier: site-configs/mi250x.yaml).
HPE_RENDEZVOUS_ENV = (
    ("FI_CXI_RDZV_PROTO", "alt_read"),
    ("FI_CXI_RX_MATCH_MODE", "hybrid"),
    ("FI_CXI_RDZV_EAGER_SIZE", "0"),
    ("FI_CXI_RDZV_GET_MIN", "0"),
    ("FI_CXI_DEFAULT_TX_SIZE", "2048"),
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


# Editions of the bundled defaults. A change to one is a new edition, never an edit of an old one
# (tests/submit/test_centre_documents.py fingerprints each): a site may pin the edition it was
# checked against (`fabric_defaults: N`) and render exactly so, and `slurmtorch site changes
# SITE` shows what each later edition changes in its jobs before the admin moves the pin.
# Only these tables are editioned; what follows from a site's own keys (hcas, interfaces) is not.
# Older editions' Slingshot tables, written out: SLINGSHOT_ENV may only ever grow a new edition.
_SLINGSHOT_1 = (("FI_CXI_DISABLE_HOST_REGISTER", "1"), ("FI_MR_CACHE_MONITOR", "userfaultfd"),
                ("FI_CXI_DEFAULT_CQ_SIZE", "131072"), ("NCCL_NET_GDR_LEVEL", "PHB"), ("NCCL_CROSS_NIC", "1"))
_SLINGSHOT_2 = (*_SLINGSHOT_1[:3], *HPE_RENDEZVOUS_ENV, *_SLINGSHOT_1[3:], ("NCCL_NET", "AWS Libfabric"))
EDITIONS: dict[int, dict[str, tuple[tuple[str, str], ...]]] = {
    # Until issue 25: what HPE's ccl_env.sh shared with NERSC, OLCF and ALCF; no NCCL_NET.
    1: {"slingshot": _SLINGSHOT_1, "slingshot-amd": SLINGSHOT_AMD_ENV, "efa": EFA_ENV, "gcp-gib": GCP_GIB_ENV},
    # Issue 25: HPE's whole table (with --network=disable_rdzv_get) and NCCL_NET.
    2: {"slingshot": _SLINGSHOT_2, "slingshot-amd": SLINGSHOT_AMD_ENV, "efa": EFA_ENV, "gcp-gib": GCP_GIB_ENV},
    # Issue 34: what HPE and the centres all document; the rendezvous is a site's to set.
    3: {"slingshot": SLINGSHOT_ENV, "slingshot-amd": SLINGSHOT_AMD_ENV, "efa": EFA_ENV, "gcp-gib": GCP_GIB_ENV},
}
CURRENT_EDITION = 3
EDITION_NOTES = {
    1: "HPE's ccl_env.sh, the part NERSC, OLCF and ALCF set too",
    2: "HPE's nccl_tuning_guide.md, its whole table: the alt_read rendezvous (with #SBATCH "
       "--network=disable_rdzv_get), hybrid matching, a 2048 transmit queue, NCCL_NET",
    3: "what HPE's guide, CSCS's nccl_env_vars and NERSC's env_nccl.sh all set: the rendezvous, matching "
       "and queue settings are a site's (CSCS, LUMI and NERSC set none of HPE's rendezvous)",
}


def fingerprint(edition: int) -> str:
    """A short digest of an edition's tables (a test pins each: an edition is never edited)."""
    import hashlib  # lazy: only the tests and `site changes` ask

    return hashlib.sha256(repr(sorted(EDITIONS[edition].items())).encode()).hexdigest()[:16]


def fabric_directives(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """#SBATCH lines the job's network environment needs (HPE: alt_read needs disable_rdzv_get)."""
    return RENDEZVOUS_DIRECTIVES if env.get("FI_CXI_RDZV_PROTO") == "alt_read" else ()


def fabric_env(nt: Any, one_node: bool = False, edition: int | None = None,
               interfaces_only: bool = False) -> tuple[tuple[str, str], ...]:
    """Network environment a node type's fabric implies (before admin overrides).

    IB and RoCE with RDMA name the HCAs for NCCL (exactly) and UCX; RoCE gets
    NCCL_IB_GID_INDEX only when the admin gives `gid_index` (NCCL >= 2.21 finds the RoCE
    v2 GID itself). Slingshot, EFA and gIB get their plugin's documented settings; on
    Slingshot a one-node job (`one_node`) leaves NCCL_NET out, as HPE's ccl_env.sh warns.
    Anything else disables NCCL's IB transport (it would otherwise probe and may pick a
    wrong device). Interfaces pin NCCL's and Gloo's sockets, so neither chooses docker0
    or a management NIC. `nt` is a `model.NodeType`; `edition` the
    edition of the bundled tables (EDITIONS; None: the current one); `interfaces_only`: the
    centre's own layer sets the rest (`fabric_env: interfaces-only`).
    """
    env = [] if interfaces_only else _library_env(nt, one_node, EDITIONS[edition or CURRENT_EDITION])
    if getattr(nt, "fabric_host_suffix", None):
        # The ranks' rendezvous address is the node's fabric name (bootstrap.rendezvous.site_address).
        env.append((FABRIC_HOST_SUFFIX, nt.fabric_host_suffix))
    if nt.interfaces:
        env.append(("NCCL_SOCKET_IFNAME", "=" + ",".join(nt.interfaces)))
        env.append(("GLOO_SOCKET_IFNAME", ",".join(nt.interfaces)))
    return tuple(env)


def _library_env(nt: Any, one_node: bool, tables: dict[str, tuple[tuple[str, str], ...]]) -> list[tuple[str, str]]:
    """What NCCL, libfabric and UCX read on this node type's fabric (`fabric_env`'s tables)."""
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
        env += [(k, v) for k, v in tables["slingshot"] if not (one_node and k == "NCCL_NET")]
        if getattr(nt, "gpu_vendor", "nvidia") == "amd":
            env += tables["slingshot-amd"]
    elif nt.fabric in ("efa", "gcp-gib"):
        env += tables[nt.fabric]
    else:
        env.append(("NCCL_IB_DISABLE", "1"))
    return env
