"""The live-view benchmark's training loop: STEPS timed DDP steps (forward, backward with its
all-reduce, optimizer step: every hook bootstrap.live sets fires); prints `step_s <median>`
from rank 0. Run under the bootstrap."""
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
model = DDP(torch.nn.Linear(256, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.001)
x = torch.randn(64, 256)
time.sleep(1.5)  # the sampler hooks torch at its first sample after torch.optim is imported
times = []
for _ in range(steps + 10):
    t = time.perf_counter()
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    times.append(time.perf_counter() - t)
if dist.get_rank() == 0:
    print(f"step_s {statistics.median(times[10:]):.9f}")
