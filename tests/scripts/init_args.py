"""A ModelArts-style script: takes --init_method/--rank/--world_size and inits itself
with backend "cpu:gloo" (a different backend string than the bootstrap's "gloo")."""

import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--init_method")
parser.add_argument("--rank", type=int)
parser.add_argument("--world_size", type=int)
args = parser.parse_args()
dist.init_process_group("cpu:gloo", init_method=args.init_method, rank=args.rank, world_size=args.world_size)
value = torch.tensor([float(args.rank + 1)])
dist.all_reduce(value)
print(f"INIT_ARGS --init_method {args.init_method} --rank {args.rank} --world_size {args.world_size} "
      f"sum {value.item()} backend {dist.get_backend()}", flush=True)
