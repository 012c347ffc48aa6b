"""Distributed set-up as pytorch/examples' imagenet/main.py does it: `--dist-url --rank --world-size`
parsed from argv, then init_process_group(init_method=dist_url, world_size, rank) itself."""

import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--dist-url", default="tcp://224.66.41.62:23456")  # imagenet's own defaults
parser.add_argument("--rank", default=-1, type=int)
parser.add_argument("--world-size", default=-1, type=int)
parser.add_argument("--dist-backend", default="gloo")
args = parser.parse_args()
dist.init_process_group(backend=args.dist_backend, init_method=args.dist_url, world_size=args.world_size,
                        rank=args.rank)
value = torch.tensor([float(args.rank + 1)])
dist.all_reduce(value)
print(f"IMAGENET --dist-url {args.dist_url} --rank {args.rank} --world-size {args.world_size} sum {value.item()}",
      flush=True)
