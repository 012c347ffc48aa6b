"""A Lightning Fabric script as its users write it; prints one INTEROP line per rank.

Interop test (tests/bootstrap/test_interop.py): run unchanged under `python -m slurmtorch.bootstrap`,
Fabric must see the rank and world size the bootstrap set.
"""

import argparse
import json
import os
import socket

import torch
from lightning.fabric import Fabric

parser = argparse.ArgumentParser()
parser.add_argument("--devices", type=int, default=1)
parser.add_argument("--num-nodes", type=int, default=1)
args = parser.parse_args()

fabric = Fabric(accelerator="cpu", strategy="ddp", devices=args.devices, num_nodes=args.num_nodes)
fabric.launch()
total = fabric.all_reduce(torch.tensor([float(fabric.global_rank + 1)]), reduce_op="sum")

record = {
    "framework": "fabric",
    "rank": fabric.global_rank, "world": fabric.world_size, "local_rank": fabric.local_rank,
    "node_rank": fabric.node_rank, "all_reduce": float(total.item()),
    "cluster_env": type(fabric.strategy.cluster_environment).__name__,
    "dist_rank": torch.distributed.get_rank(), "dist_world": torch.distributed.get_world_size(),
    "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID",
                                            "SLURM_NTASKS", "SLURMTORCH_SOURCE")},
    "host": socket.gethostname(),
}
os.write(1, ("INTEROP " + json.dumps(record) + "\n").encode())
