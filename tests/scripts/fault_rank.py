"""A training-like loop in which one rank misbehaves: `fault_rank.py MODE RANK [STEPS]`.

MODE: none | exit (sys.exit(3)) | kill (SIGKILL itself) | raise (ValueError) | hang
(sleeps instead of joining the next collective) | return (leaves the loop: the script
ends with 0 while the others still all_reduce). Every other rank all_reduces each step.
Started by `python -m slurmtorch.bootstrap`, so the process group already exists.
"""
import os
import signal
import socket
import sys
import time

import torch
import torch.distributed as dist

mode, bad = sys.argv[1], int(sys.argv[2])
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
rank = dist.get_rank()
print(f"rank {rank} on {socket.gethostname()} started", flush=True)
t = torch.ones(1)
for step in range(steps):
    if step == 3 and rank == bad and mode != "none":
        print(f"FAULT {mode} at {time.time():.3f}", file=sys.stderr, flush=True)
        if mode == "exit":
            sys.exit(3)
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "raise":
            raise ValueError(f"bad batch at step {step}")
        if mode == "hang":
            time.sleep(3600)
        if mode == "return":
            break
    dist.all_reduce(t)
    time.sleep(0.2)
print(f"rank {rank} done", flush=True)
