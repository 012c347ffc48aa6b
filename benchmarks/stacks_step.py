"""The stacks benchmark's training loop: STEPS timed steps (a small matmul and an all_reduce);
prints `step_s <median seconds>` from rank 0. Run under the bootstrap."""
import statistics
import sys
import time

import torch
import torch.distributed as dist

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
w, x = torch.randn(256, 256), torch.randn(64, 256)
times = []
for _ in range(steps + 10):
    t = time.perf_counter()
    y = x @ w
    dist.all_reduce(y)
    times.append(time.perf_counter() - t)
if dist.get_rank() == 0:
    print(f"step_s {statistics.median(times[10:]):.9f}")
