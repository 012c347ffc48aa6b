"""Distributor file-run helper: one JSON line per rank (argv, world, an all_reduce).

`--fail-rank R` raises on rank R, to show a file's traceback coming back too.
"""

import json
import socket
import sys

import torch
import torch.distributed as dist

rank, world = dist.get_rank(), dist.get_world_size()  # the group is ready before the file runs
if "--fail-rank" in sys.argv and rank == int(sys.argv[sys.argv.index("--fail-rank") + 1]):
    raise RuntimeError(f"dist_args told to fail on rank {rank}")
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
print(json.dumps({"rank": rank, "world": world, "sum": value.item(), "argv": sys.argv[1:],
                  "argv0": sys.argv[0], "name": __name__, "host": socket.gethostname()}), flush=True)
