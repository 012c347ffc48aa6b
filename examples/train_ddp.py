"""A typical torchrun-style DDP training script, unchanged for slurmtorch.

It reads LOCAL_RANK/RANK/WORLD_SIZE and calls init_process_group itself, as written
for `torchrun`. It runs as is under
    torchrun --standalone --nproc-per-node 4 examples/train_ddp.py
    mpirun -n 4 python -m slurmtorch.bootstrap examples/train_ddp.py
    srun -N4 --mpi=pmix python -m slurmtorch.bootstrap [--no-init] examples/train_ddp.py
Tiny model, synthetic data, a few epochs on CPU.
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")

    torch.manual_seed(0)  # the same synthetic data everywhere; the sampler shards it
    x = torch.randn(args.samples, 16)
    y = x @ torch.randn(16, 1) + 0.1 * torch.randn(args.samples, 1)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.MSELoss()

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total, batches = torch.zeros(1), 0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            total += loss.detach()
            batches += 1
        dist.all_reduce(total)  # mean loss over every rank's batches
        mean = total.item() / (batches * world_size)
        if rank == 0:
            print(f"epoch {epoch} loss {mean:.4f}", flush=True)

    hosts = [None] * world_size
    dist.all_gather_object(hosts, socket.gethostname())
    if rank == 0:
        nodes = ",".join(sorted(set(hosts)))
        print(f"trained on {world_size} ranks across nodes {nodes} final loss {mean:.4f} "
              f"(local rank {local_rank})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
