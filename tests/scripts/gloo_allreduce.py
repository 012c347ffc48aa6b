"""A bare torch.distributed job for srun (no slurmtorch): proves the testbed carries gloo."""
import os
import socket

import torch
import torch.distributed as dist

rank = int(os.environ["SLURM_PROCID"])
world = int(os.environ["SLURM_NTASKS"])
dist.init_process_group(
    "gloo", init_method=os.environ["INIT_METHOD"], rank=rank, world_size=world,
    timeout=__import__("datetime").timedelta(seconds=60),
)
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
print(f"host={socket.gethostname()} rank={rank} sum={t.item():g}", flush=True)
dist.destroy_process_group()
