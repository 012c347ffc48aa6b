"""The network environment a node type's fabric implies, before the admin's overrides.

One mapping, from what the site says about the wires (fabric, RDMA, HCAs, interfaces)
to what NCCL, UCX and Gloo read; the doctor checks the same variables on a node.
"""

from __future__ import annotations

from typing import Any

FABRICS = ("infiniband", "roce", "ethernet")

# RoCE v2 over IPv4 is GID index 3 on a default Mellanox/NVIDIA config; NCCL's own
# default (0) is RoCE v1, which most switches do not route.
DEFAULT_ROCE_GID_INDEX = 3


def fabric_env(nt: Any) -> tuple[tuple[str, str], ...]:
    """Network environment a node type's fabric implies (before admin overrides).

    RDMA fabrics name the HCAs for NCCL and UCX; anything else disables NCCL's IB
    transport (it would otherwise probe and may pick a wrong device) and pins the
    socket interface so NCCL and Gloo do not choose docker0 or a management NIC.
    `nt` is a `cluster.NodeType`.
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
