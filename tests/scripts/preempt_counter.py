"""Counts to TOTAL with a checkpoint, survives preemption: `preempt_counter.py CKPT TOTAL [STEP_S]`.

Each step all_reduces a one from every rank into the counter (so it grows by WORLD_SIZE).
On the preemption signal rank 0's hook writes {"step", "value"} to CKPT; the job is
requeued and the next run resumes from it. The end prints `final value V steps S`.
Only rank 0 sleeps between steps: every other rank spends the step waiting for it inside
all_reduce, where Python runs no signal handler, as a rank waiting on a slower peer does.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from slurmtorch.bootstrap import preempt

ckpt, total = sys.argv[1], int(sys.argv[2])
step_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.2
rank, world = dist.get_rank(), dist.get_world_size()

state = {"step": 0, "value": 0}
if os.path.exists(ckpt):
    with open(ckpt) as f:
        state = json.load(f)
print(f"rank {rank} restart {preempt.restart_count()} resuming at step {state['step']} "
      f"value {state['value']}", flush=True)


@preempt.on_preempt
def save():
    if rank == 0:
        snapshot = state  # one object: a step's update is a single assignment
        with open(ckpt + ".tmp", "w") as f:
            json.dump(snapshot, f)
        os.replace(ckpt + ".tmp", ckpt)
        print(f"checkpointed step {snapshot['step']} value {snapshot['value']}", flush=True)


while state["step"] < total:
    t = torch.ones(1)
    dist.all_reduce(t)
    state = {"step": state["step"] + 1, "value": state["value"] + int(t.item())}
    print(f"step {state['step']}", flush=True)
    if rank == 0:
        time.sleep(step_s)
print(f"final value {state['value']} steps {state['step']} restart {preempt.restart_count()}", flush=True)
