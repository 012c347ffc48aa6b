"""Fabric probe: where this rank's world met, as one JSON line per rank.

Run as a rank (the bootstrap has its group up, or it calls init_process_group itself, as a
torchrun script does). Prints MASTER_ADDR/PORT, this node's address on eth0 (management)
and ib0 (fabric), and the TCP connections on this node (the whole network namespace: under
torchrun the store is the agent's, not the rank's) that end at MASTER_PORT: the store's
accepted ones on rank 0's node, each peer's own to it elsewhere. Then it waits at a
barrier, so every rank has looked before any rank ends and closes its connection.
"""

import json
import os
import socket
import subprocess

import torch.distributed as dist

if not dist.is_initialized():
    dist.init_process_group("gloo")  # env://, as a torchrun script does


def address(ifname: str) -> str | None:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", ifname], capture_output=True, text=True).stdout
    return out.split()[3].split("/")[0] if out.split() else None


def connections(port: str) -> list[dict[str, str]]:
    """Established TCP connections with MASTER_PORT at either end, as (local, peer) host:port."""
    out = subprocess.run(["ss", "-Htn", "state", "established"], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        local, peer = line.split()[-2:]
        # ss writes v4-mapped v6 sockets as [::ffff:198.18.0.139]:port
        local, peer = (a.replace("[::ffff:", "").replace("]", "") for a in (local, peer))
        if port in (local.rsplit(":", 1)[1], peer.rsplit(":", 1)[1]):
            found.append({"local": local, "peer": peer})
    return found


port = os.environ["MASTER_PORT"]
record = {"rank": dist.get_rank(), "host": socket.gethostname(), "MASTER_ADDR": os.environ["MASTER_ADDR"],
          "MASTER_PORT": port, "eth0": address("eth0"), "ib0": address("ib0"), "connections": connections(port)}
print("FABRIC " + json.dumps(record), flush=True)
dist.barrier()
