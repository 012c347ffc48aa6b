"""A script written for IDRIS's Jean Zay, as their documentation shows it: idr_torch
(https://github.com/idriscnrs/idr_torch, pip `idr-torch`) tells it the rank and world size, and
it calls init_process_group with them itself. Prints one `IDR ...` line per rank."""

import json
import os

import idr_torch
import torch
import torch.distributed as dist

rank, size, local_rank, api = idr_torch.rank, idr_torch.size, idr_torch.local_rank, idr_torch.current_API
dist.init_process_group(backend="gloo", init_method="env://", world_size=size, rank=rank)
value = torch.tensor([1.0])
dist.all_reduce(value)
print("IDR " + json.dumps({"rank": rank, "size": size, "local_rank": local_rank, "api": str(api),
                           "local_size": idr_torch.local_world_size, "nodes": idr_torch.nnodes,
                           "dist_rank": dist.get_rank(), "dist_size": dist.get_world_size(), "sum": value.item(),
                           "env_rank": os.environ.get("RANK")}), flush=True)
