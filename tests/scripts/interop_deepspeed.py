"""A DeepSpeed script's distributed setup as its users write it; one INTEROP line per rank."""

import json
import os
import socket

import deepspeed
import torch
from deepspeed import comm

deepspeed.init_distributed(dist_backend="gloo")
value = torch.tensor([float(comm.get_rank() + 1)])
comm.all_reduce(value)

record = {
    "framework": "deepspeed",
    "rank": comm.get_rank(), "world": comm.get_world_size(), "local_rank": comm.get_local_rank(),
    "all_reduce": float(value.item()),
    "dist_rank": torch.distributed.get_rank(), "dist_world": torch.distributed.get_world_size(),
    "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURMTORCH_SOURCE")},
    "host": socket.gethostname(),
}
os.write(1, ("INTEROP " + json.dumps(record) + "\n").encode())
