"""Deterministic DDP training that checkpoints every step and resumes: `resume_train.py STEPS [FAULT]`.

FAULT is MODE:RANK:STEP, acted on in the first start only (restart_count() == 0), except
`raise-all`, which raises on every rank in every start. MODE: hang (sleeps instead of the
step's collectives), raise (ValueError), raise-all, kill (SIGKILL itself), slow (0.3 s more
in each step from STEP on, outside backward: a straggler), none. Rank 0
saves model, optimizer and step to slurmtorch.checkpoint_dir() after every step; a start
with restart_count() > 0 resumes from there. At the end rank 0 prints `final <sha256>` of
the weights: the same whatever restarts happened (gloo sums two ranks' gradients exactly).
"""
import hashlib
import os
import signal
import socket
import sys
import time

import torch
import torch.distributed as dist

import slurmtorch

steps = int(sys.argv[1])
mode, bad, at = (sys.argv[2].split(":") + ["", ""])[:3] if len(sys.argv) > 2 else ("none", "0", "0")
bad, at = int(bad or 0), int(at or 0)
rank, restart = dist.get_rank(), slurmtorch.restart_count()
print(f"rank {rank} pid {os.getpid()} on {socket.gethostname()} start {restart}", flush=True)

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
ddp = torch.nn.parallel.DistributedDataParallel(model)
path = slurmtorch.checkpoint_dir() / "state.pt"
first = 0
if restart > 0 and path.exists():
    state = torch.load(path)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    first = state["step"]
    if rank == 0:
        print(f"resumed at step {first} (start {restart}) on {os.environ.get('SLURM_STEP_NODELIST', '?')} "
              f"at {time.time():.3f}", flush=True)

for step in range(first, steps):
    if step == at and (mode == "raise-all" or (restart == 0 and rank == bad)):
        print(f"FAULT {mode} at {time.time():.3f}", file=sys.stderr, flush=True)
        if mode in ("raise", "raise-all"):
            raise ValueError(f"bad batch at step {step}")
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "hang":
            time.sleep(3600)
    if mode == "slow" and restart == 0 and rank == bad and step >= at:
        if step == at:
            print(f"FAULT slow at {time.time():.3f}", file=sys.stderr, flush=True)
        time.sleep(0.3)
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 8, generator=g)
    loss = ((ddp(x) - x.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0:
        tmp = path.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1}, tmp)
        os.replace(tmp, path)
        print(f"step {step} saved", flush=True)
    time.sleep(0.3)

if rank == 0:
    digest = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in model.state_dict().values()))
    print(f"final {digest.hexdigest()}", flush=True)
