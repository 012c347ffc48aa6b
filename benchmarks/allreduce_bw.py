"""gloo all_reduce bus bandwidth per message size, in whatever process group exists (or env://).

Rank 0 prints one JSON line: {"sizes": [...], "seconds": [...], "busbw_gbps": [...]}.
"""
import json
import os
import time

import torch
import torch.distributed as dist

if not dist.is_initialized():
    dist.init_process_group("gloo")
world = dist.get_world_size()
sizes = [int(s) for s in os.environ.get("BW_SIZES", "1024,16384,262144,4194304,67108864").split(",")]
out = {"sizes": sizes, "seconds": [], "busbw_gbps": []}
for size in sizes:
    t = torch.ones(size // 4, dtype=torch.float32)
    iters = max(3, min(200, (64 << 20) // size))
    dist.all_reduce(t)  # warm-up
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    dt = (time.perf_counter() - t0) / iters
    out["seconds"].append(dt)
    out["busbw_gbps"].append(size * 2 * (world - 1) / world / dt / 1e9)  # nccl-tests' bus bandwidth
if dist.get_rank() == 0:
    print(json.dumps(out), flush=True)
dist.destroy_process_group()
