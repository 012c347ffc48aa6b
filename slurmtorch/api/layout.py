"""Rank layout (pure): how many nodes a `Distributor` job takes and how many ranks each holds.

A node holds as many ranks as it has GPUs (`use_gpu`) or CPUs (divided by
`cpus_per_task` when given), and the job takes the fewest nodes that hold
`num_processes` ranks spread evenly (Slurm gives every node the same
`--ntasks-per-node`). So 4 CPU ranks on the testbed's 2-CPU nodes are 2 nodes with
2 ranks each; 16 GPU ranks on 8-GPU nodes are 2 nodes x 8; pass `nodes=` to spread them.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmtorch.errors import SpecError


@dataclass(frozen=True)
class Layout:
    """Nodes, ranks on each, and GPUs on each (0 for CPU ranks)."""

    nodes: int
    ranks_per_node: int
    gpus_per_node: int


def plan_layout(num_processes: int, nodes: int | None, use_gpu: bool, node_gpus: int, node_cpus: int,
                max_nodes: int, cpus_per_task: int | None = None, where: str = "") -> Layout:
    """Spread `num_processes` ranks evenly over nodes (see the module docstring for the rule)."""
    if nodes is not None:
        if num_processes % nodes:
            divisors = [d for d in range(1, num_processes + 1) if num_processes % d == 0]
            raise SpecError(
                f"num_processes={num_processes} cannot be spread evenly over nodes={nodes} "
                "(Slurm gives every node the same number of tasks)",
                tip=f"use nodes in {divisors}, or a multiple of {nodes} processes")
        per = num_processes // nodes
        return Layout(nodes, per, per if use_gpu else 0)
    if use_gpu:
        if node_gpus < 1:
            raise SpecError(f"use_gpu=True, but {where or 'the node type'} has no GPUs",
                            tip="use_gpu=False, or a partition with GPU nodes (partition=...)")
        capacity = node_gpus
    else:
        capacity = max(1, node_cpus // (cpus_per_task or 1))
    least = -(-num_processes // capacity)
    for n in range(least, num_processes + 1):
        if num_processes % n == 0:
            if n > max_nodes:
                break
            per = num_processes // n
            return Layout(n, per, per if use_gpu else 0)
    raise SpecError(
        f"num_processes={num_processes} does not fit evenly on at most {max_nodes} nodes of "
        f"{capacity} {'GPUs' if use_gpu else 'CPUs'} ({where or 'this partition'})",
        tip=f"use at most {max_nodes * capacity} processes, a multiple of {capacity}, or pass nodes=")
