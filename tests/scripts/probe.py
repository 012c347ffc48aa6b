"""Test probe: one JSON line per rank with its contract variables and an all_reduce.

Runs unchanged under the bootstrap (group ready) and under --no-init or plain torchrun
(it then calls init_process_group itself, like a torchrun script). Options:
--fail-rank R (raise on rank R), --exit-rank R --exit-code C (sys.exit(C) on rank R),
--hang-rank R (rank R sleeps forever, to test that the others do not). --init-timeout S
passes timeout=S seconds (or None) to that call, --pg-options passes gloo's pg_options, and --mesh
initialises through init_device_mesh instead (as FSDP2 scripts do).
"""

import argparse
import datetime
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
parser.add_argument("--init-timeout", default=None, help="seconds, or none for timeout=None")
parser.add_argument("--pg-options", action="store_true")
parser.add_argument("--mesh", action="store_true")
args, extra = parser.parse_known_args()

rank = int(os.environ["RANK"])
if rank == args.fail_rank:
    raise RuntimeError(f"probe told to fail on rank {rank}")
if rank == args.exit_rank:
    sys.exit(args.exit_code)

was_initialized = dist.is_initialized()
group_before = dist.distributed_c10d._get_default_group() if was_initialized else None
if args.mesh:
    from torch.distributed.device_mesh import init_device_mesh

    init_device_mesh("cpu", (int(os.environ["WORLD_SIZE"]),))
elif args.init_self or not was_initialized:
    options = {}
    if args.init_timeout is not None:
        options["timeout"] = None if args.init_timeout == "none" else datetime.timedelta(seconds=float(args.init_timeout))
    if args.pg_options:
        options["pg_options"] = dist.ProcessGroupGloo._Options()
    dist.init_process_group("gloo", **options)  # env://, as a torchrun script does

value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
hosts = [None] * dist.get_world_size()
dist.all_gather_object(hosts, socket.gethostname())
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "MASTER_ADDR", "MASTER_PORT", "SLURMTORCH_SOURCE", "CLUSTER_SPEC", "TF_CONFIG", "SLURMTORCH_TRIAL",
        "OMPI_MCA_btl")
record = {k: os.environ.get(k) for k in keys}
c10d = dist.distributed_c10d
record["group_replaced"] = was_initialized and c10d._get_default_group() is not group_before
try:  # the group's own timeout, and the port its store listens on (under every prefix)
    record["pg_timeout"] = c10d._get_default_group()._get_backend(torch.device("cpu")).options._timeout.total_seconds()
    store = c10d._get_default_store()
    record["store_timeout"] = store.timeout.total_seconds()
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    record["store_port"] = store.port
except Exception as exc:  # a torch without these private names: say so, do not fail
    record["pg_timeout"] = record["store_timeout"] = record["store_port"] = repr(exc)
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
