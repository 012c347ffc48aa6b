"""Eight ranks all_reduce in a loop; one gets stuck at step 3: `stuck_rank.py MODE RANK`.

MODE: collective (it all_reduces with a group of two whose other member never joins: both
sides block in torch) |
loader (its data loader sleeps: it is stuck in its own code) | dead (its process vanishes
while its peers wait for it, as with a lost node: a forked child keeps its sockets open, so
no peer is told). Started by the bootstrap.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

mode, bad = sys.argv[1], int(sys.argv[2])
rank = dist.get_rank()
pair = dist.new_group([bad, (bad + 1) % dist.get_world_size()])


class Batches:
    def __init__(self):
        self.step = 0

    def __next__(self):
        self.step += 1
        if self.step == 3 and rank == bad and mode == "loader":
            print(f"FAULT {mode}", file=sys.stderr, flush=True)
            time.sleep(3600)  # the loader's stuck read
        return torch.ones(1)


def step(t):
    if rank == bad and batches.step == 3 and mode == "collective":
        print(f"FAULT {mode}", file=sys.stderr, flush=True)
        dist.all_reduce(t, group=pair)  # its partner is in the world's all_reduce, waiting for it
    if rank == bad and batches.step == 3 and mode == "dead":
        print(f"FAULT {mode}", file=sys.stderr, flush=True)
        if os.fork() == 0:  # the child holds the connections (not the rank's alive lock) and says nothing
            time.sleep(3600)
        os._exit(0)
    dist.all_reduce(t)


batches = Batches()
for _ in range(1000):
    step(next(batches))
    time.sleep(0.2)
