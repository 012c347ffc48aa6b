"""A script that calls slurmtorch.init() itself instead of being started by the bootstrap."""

import os

import torch
import torch.distributed as dist

import slurmtorch

info = slurmtorch.init(timeout=60)
assert slurmtorch.init() is info  # idempotent
dist.init_process_group("gloo")  # a torchrun habit: a no-op on our group
value = torch.tensor([float(info.rank + 1)])
dist.all_reduce(value)
print(f"INPROC rank {info.rank} world {info.world_size} env {os.environ['RANK']} sum {value.item()}", flush=True)
