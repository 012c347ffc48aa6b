"""A Hugging Face accelerate script as its users write it; prints one INTEROP line per rank."""

import json
import os
import socket

import torch
from accelerate import Accelerator

accelerator = Accelerator(cpu=True)
total = accelerator.reduce(torch.tensor([float(accelerator.process_index + 1)]), reduction="sum")

record = {
    "framework": "accelerate",
    "rank": accelerator.process_index, "world": accelerator.num_processes,
    "local_rank": accelerator.local_process_index, "all_reduce": float(total.item()),
    "distributed_type": str(accelerator.distributed_type),
    "dist_rank": torch.distributed.get_rank(), "dist_world": torch.distributed.get_world_size(),
    "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURMTORCH_SOURCE")},
    "host": socket.gethostname(),
}
os.write(1, ("INTEROP " + json.dumps(record) + "\n").encode())
