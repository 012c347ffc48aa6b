"""Print this rank's distributed environment and do one all_reduce.

    mpirun -n 2 python -m slurmtorch.bootstrap examples/probe.py
    srun -N2 --ntasks-per-node=2 --mpi=pmix python -m slurmtorch.bootstrap examples/probe.py
    torchrun --standalone --nproc-per-node 2 examples/probe.py
"""

import os
import socket

import torch
import torch.distributed as dist

if not dist.is_initialized():  # plain torchrun: initialise as any torchrun script would
    dist.init_process_group("gloo")

rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
env = " ".join(f"{k}={os.environ.get(k)}" for k in
               ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"))
print(f"{socket.gethostname()}: {env} all_reduce={value.item():g} (expected {world * (world + 1) // 2})", flush=True)
