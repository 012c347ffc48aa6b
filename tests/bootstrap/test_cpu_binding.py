"""CPU binding on the testbed, as on real nodes: Slurm's task/affinity binds each task, and a
rank's os.sched_getaffinity is what its launcher gave it. Each rank gets its share of its
node's CPUs (the node's 2 CPUs over its ranks, or -c) under srun, torchrun and mpirun."""

from __future__ import annotations

import pytest

from helpers import st

AFFINITY = """\
import os, socket
import torch.distributed as dist
print("BIND", os.environ["RANK"], socket.gethostname(), ",".join(map(str, sorted(os.sched_getaffinity(0)))),
      flush=True)
dist.barrier()  # no rank leaves while another is still connecting
"""

# (nodes, ranks per node, -c or None, CPUs each rank gets, whether ranks on a node share none)
SHAPES = {
    "one-rank-per-node": (2, 1, None, 2, True),   # the default -c: the node's 2 CPUs
    "one-rank-per-node-c1": (2, 1, 1, 1, True),
    "two-ranks-on-a-node-c1": (1, 2, 1, 1, True),
}


def bindings(folder) -> dict[int, tuple[str, frozenset[int]]]:
    """rank -> (host, CPUs) from the BIND lines in the job's logs (rank-N.out, or torchrun's node-N.out)."""
    out = {}
    for log in folder.glob("*.out"):
        for line in log.read_text().splitlines():
            if line.startswith("BIND "):
                _, rank, host, cpus = line.split()
                out[int(rank)] = (host, frozenset(int(c) for c in cpus.split(",")))
    return out


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("launcher", ["srun", "torchrun", "mpirun"])
def test_each_rank_gets_its_share_of_its_nodes_cpus(testbed, has_torch, tmp_path, launcher, shape):
    nodes, per_node, cpus_per_task, share, disjoint = SHAPES[shape]
    if launcher == "torchrun" and per_node > 1:
        # torchrun binds no worker: each has its agent's CPUs, the node's share of the job.
        share, disjoint = per_node * cpus_per_task, False
    script = tmp_path / "affinity.py"
    script.write_text(AFFINITY)
    argv = ["sbatch", "--site", "testbed", "--nodes", str(nodes), "--ntasks-per-node", str(per_node),
            "--launcher", launcher, "--backend", "gloo", "--time", "5", "--wait"]
    if cpus_per_task is not None:
        argv += ["--cpus-per-task", str(cpus_per_task)]
    r = st(testbed, tmp_path / "home", [*argv, str(script)], cwd=tmp_path, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    got = bindings(tmp_path / "home" / "jobs" / r.stdout.split()[0])
    assert sorted(got) == list(range(nodes * per_node)), got
    assert {rank: len(cpus) for rank, (_, cpus) in got.items()} == {rank: share for rank in got}, got
    if disjoint:
        for host in {h for h, _ in got.values()}:
            sets = [cpus for h, cpus in got.values() if h == host]
            assert len(frozenset().union(*sets)) == sum(map(len, sets)), f"ranks on {host} overlap: {got}"
