"""Role job where one worker fails: the parameter server would serve forever, the master
keeps training. The job must still end promptly, naming the failed role.
`role_fail.py kill`: the worker is killed by SIGKILL instead, and says nothing."""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

role = os.environ["SLURMTORCH_ROLE"]
if role == "ps":
    time.sleep(600)  # a server that runs until the job stops it
    sys.exit(0)
t = torch.ones(1)
dist.all_reduce(t)  # everyone up and in the group
if role == "worker" and sys.argv[1:] == ["kill"]:
    os.kill(os.getpid(), signal.SIGKILL)
if role == "worker":
    sys.exit(4)
for _ in range(300):  # the master trains on by itself until the job stops it: no collective with the
    t = t * 1.0        # failed worker, whose loss would fail it too and race the worker's exit to be named
    time.sleep(0.2)
