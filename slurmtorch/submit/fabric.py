"""The network environment a node type's fabric implies, before the admin's overrides.

One mapping, from what the site says about the wires (fabric, RDMA, HCAs, interfaces)
to what NCCL, UCX and Gloo read; the doctor checks the same variables on a node.

Interface and device lists follow NCCL's syntax
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html): a leading `=`
makes NCCL_SOCKET_IFNAME and NCCL_IB_HCA match names exactly; without it each entry is a
prefix, and `mlx5_1` also selects mlx5_10 and mlx5_11. Gloo takes exact names already.
"""

from __future__ import annotations

from typing import Any

FABRICS = ("infiniband", "roce", "ethernet")


def fabric_env(nt: Any) -> tuple[tuple[str, str], ...]:
    """Network environment a node type's fabric implies (before admin overrides).

    RDMA fabrics name the HCAs for NCCL (exactly) and UCX; RoCE gets NCCL_IB_GID_INDEX
    only when the admin gives `gid_index` (NCCL >= 2.21 finds the RoCE v2 GID itself).
    Anything else disables NCCL's IB transport (it would otherwise probe and may pick a
    wrong device). Interfaces pin NCCL's and Gloo's sockets, so neither chooses docker0 or
    a management NIC. `nt` is a `cluster.NodeType`.
    """
    env: list[tuple[str, str]] = []
    if nt.fabric in ("infiniband", "roce") and nt.rdma:
        env.append(("NCCL_IB_HCA", "=" + ",".join(nt.hcas)))
        # UCX wants device:port; HCAs are usually listed without the port.
        env.append(("UCX_NET_DEVICES", ",".join(h if ":" in h else f"{h}:1" for h in nt.hcas)))
        if nt.fabric == "roce" and nt.gid_index is not None:
            env.append(("NCCL_IB_GID_INDEX", str(nt.gid_index)))
    else:
        env.append(("NCCL_IB_DISABLE", "1"))
    if nt.interfaces:
        env.append(("NCCL_SOCKET_IFNAME", "=" + ",".join(nt.interfaces)))
        env.append(("GLOO_SOCKET_IFNAME", ",".join(nt.interfaces)))
    return tuple(env)
