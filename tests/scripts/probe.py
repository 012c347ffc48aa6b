"""Test probe: one JSON line per rank with its contract variables and an all_reduce.

Runs unchanged under the bootstrap (group ready) and under --no-init or plain torchrun
(it then calls init_process_group itself, like a torchrun script). Options:
--fail-rank R (raise on rank R), --exit-rank R --exit-code C (sys.exit(C) on rank R),
--hang-rank R (rank R sleeps forever, to test that the others do not).
"""

import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--fail-rank", type=int, default=-1)
parser.add_argument("--exit-rank", type=int, default=-1)
parser.add_argument("--exit-code", type=int, default=0)
parser.add_argument("--init-self", action="store_true", help="always call init_process_group")
args, extra = parser.parse_known_args()

rank = int(os.environ["RANK"])
if rank == args.fail_rank:
    raise RuntimeError(f"probe told to fail on rank {rank}")
if rank == args.exit_rank:
    sys.exit(args.exit_code)

was_initialized = dist.is_initialized()
if args.init_self or not was_initialized:
    dist.init_process_group("gloo")  # env://, as a torchrun script does

value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
hosts = [None] * dist.get_world_size()
dist.all_gather_object(hosts, socket.gethostname())
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "MASTER_ADDR", "MASTER_PORT", "SLURMTORCH_SOURCE", "CLUSTER_SPEC", "TF_CONFIG", "SLURMTORCH_TRIAL",
        "OMPI_MCA_btl")
record = {k: os.environ.get(k) for k in keys}
record.update(
    host=socket.gethostname(), dist_rank=dist.get_rank(), dist_world=dist.get_world_size(),
    all_reduce=value.item(), hosts=hosts, was_initialized=was_initialized, argv=sys.argv[1:],
    extra=extra, backend=str(dist.get_backend()), time=time.time(),
)
# One write(2) of less than PIPE_BUF bytes: lines from ranks sharing a pipe (torchrun) never interleave.
sys.stdout.flush()
os.write(1, ("PROBE " + json.dumps(record) + "\n").encode())
if not was_initialized:
    # Our own group: destroy it as a torchrun script must (torch 2.13's gloo threads
    # abort the process at interpreter exit otherwise). The bootstrap destroys its own.
    dist.destroy_process_group()
