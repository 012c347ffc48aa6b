"""The benchmark probe: init if nobody did, one all_reduce, teardown. Prints nothing on success.

PROBE_BACKEND=nccl (the NCCL section) reduces a CUDA tensor; the default is gloo on the CPU.
"""
import os

import torch
import torch.distributed as dist

if not dist.is_initialized():
    dist.init_process_group(os.environ.get("PROBE_BACKEND", "gloo"))
device = "cuda" if dist.get_backend() == "nccl" else "cpu"
t = torch.ones(1, device=device)
dist.all_reduce(t)
assert t.item() == dist.get_world_size(), t
dist.destroy_process_group()
