"""CPU binding on the testbed, as on real nodes: Slurm's task/affinity binds each task, and a
rank's os.sched_getaffinity is what its launcher gave it, narrowed by the bootstrap's placement
(bootstrap/placement.py; the testbed has no GPUs, so the policy there is a fair share). Each
rank gets its share of its node's CPUs (the node's 2 CPUs over its ranks, or -c) under srun,
torchrun and mpirun, never a CPU outside what Slurm allocated to the job on its node."""

from __future__ import annotations

from pathlib import Path

import hostlist
import pytest

from helpers import st
from slurmtorch.bootstrap.placement import parse_cpu_list

AFFINITY = """\
import os, socket
import torch.distributed as dist
print("BIND", os.environ["RANK"], socket.gethostname(), ",".join(map(str, sorted(os.sched_getaffinity(0)))),
      os.environ.get("OMP_NUM_THREADS", "unset"), flush=True)
dist.barrier()  # no rank leaves while another is still connecting
"""

# (nodes, ranks per node, -c or None, CPUs each rank gets, whether ranks on a node share none)
SHAPES = {
    "one-rank-per-node": (2, 1, None, 2, True),   # the default -c: the node's 2 CPUs
    "one-rank-per-node-c1": (2, 1, 1, 1, True),
    "two-ranks-on-a-node-c1": (1, 2, 1, 1, True),
}


def bind_lines(folder) -> list[list[str]]:
    """The BIND lines in the job's logs (rank-N.out, or torchrun's node-N.out), split."""
    return [line.split() for log in folder.glob("*.out") for line in log.read_text().splitlines()
            if line.startswith("BIND ")]


def bindings(folder) -> dict[int, tuple[str, frozenset[int]]]:
    """rank -> (host, CPUs) from the BIND lines."""
    return {int(rank): (host, frozenset(int(c) for c in cpus.split(","))) for _, rank, host, cpus, _ in bind_lines(folder)}


def threads(folder) -> dict[int, str]:
    """rank -> its OMP_NUM_THREADS ("unset" where it had none) from the BIND lines."""
    return {int(rank): omp for _, rank, _, _, omp in bind_lines(folder)}


# Each rank also prints the CPUs Slurm allocated to the job on its node (`scontrol show job -d`:
# "Nodes=node1 CPU_IDs=0-1 ..."; on the testbed Slurm's CPU ids are the machine's).
WITHIN = AFFINITY + """\
import subprocess
shown = subprocess.run(["scontrol", "show", "job", "-d", os.environ["SLURM_JOB_ID"]], capture_output=True,
                       text=True, timeout=30).stdout.split()
nodes = [w for w in shown if w.startswith(("Nodes=", "CPU_IDs="))]
for name, ids in zip(nodes[::2], nodes[1::2]):
    if name.startswith("Nodes=") and ids.startswith("CPU_IDs="):
        print("ALLOC", name[6:], ids[8:], flush=True)
"""


@pytest.fixture(scope="module")
def job(testbed, has_torch, tmp_path_factory):
    """`job(launcher, nodes, per_node, cpus_per_task, extra)`: the folder of that job of WITHIN,
    submitted once: where both tests ask the same job (a node's 2 ranks with -c 1; 2 nodes with
    one rank each, -c 1), one allocation answers both (WITHIN prints AFFINITY's lines)."""
    done = {}

    def submit(launcher: str, nodes: int, per_node: int, cpus_per_task: int | None, extra=()) -> Path:
        key = (launcher, nodes, per_node, cpus_per_task, tuple(extra))
        if key not in done:
            where = tmp_path_factory.mktemp(f"{launcher}-{nodes}x{per_node}")
            script = where / "within.py"
            script.write_text(WITHIN)
            argv = ["sbatch", "--site", "testbed", "--nodes", str(nodes), "--ntasks-per-node", str(per_node),
                    "--launcher", launcher, "--backend", "gloo", "--time", "5", "--wait", *extra]
            if cpus_per_task is not None:
                argv += ["--cpus-per-task", str(cpus_per_task)]
            r = st(testbed, where / "home", [*argv, str(script)], cwd=where, timeout=240)
            assert r.returncode == 0, r.stdout + r.stderr
            done[key] = where / "home" / "jobs" / r.stdout.split()[0]
        return done[key]

    return submit


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("launcher", ["srun", "torchrun", "mpirun"])
@pytest.mark.slurm_versions
def test_each_rank_gets_its_share_of_its_nodes_cpus(job, launcher, shape):
    nodes, per_node, cpus_per_task, share, disjoint = SHAPES[shape]
    # torchrun binds no worker (each starts with its agent's CPUs): the bootstrap divides them.
    folder = job(launcher, nodes, per_node, cpus_per_task)
    got = bindings(folder)
    assert sorted(got) == list(range(nodes * per_node)), got
    assert {rank: len(cpus) for rank, (_, cpus) in got.items()} == {rank: share for rank in got}, got
    # Its threads fit its share, a rank alone on its node too (issue 44: it had none, and
    # accelerate warned in every job).
    omp = threads(folder)
    assert omp == {rank: str(share) for rank in got}, omp
    if disjoint:
        for host in {h for h, _ in got.values()}:
            sets = [cpus for h, cpus in got.values() if h == host]
            assert len(frozenset().union(*sets)) == sum(map(len, sets)), f"ranks on {host} overlap: {got}"


# (nodes, ranks per node, -c, extra srun options)
ALLOCATIONS = {
    "two-ranks-c1": (1, 2, 1, ()),
    "two-ranks-unbound": (1, 2, 1, ("--srun-arg=--cpu-bind=none",)),  # each task sees both CPUs: shared
    "two-nodes-one-rank-c1": (2, 1, 1, ()),
}


def allocations(folder) -> dict[str, frozenset[int]]:
    """host -> the CPUs the job holds there, from the ALLOC lines (Slurm's hostlist expanded)."""
    out: dict[str, frozenset[int]] = {}
    for log in folder.glob("*.out"):
        for line in log.read_text().splitlines():
            if line.startswith("ALLOC "):
                _, hosts, ids = line.split()
                for host in hostlist.expand_hostlist(hosts):
                    out[host] = parse_cpu_list(ids)
    return out


@pytest.mark.parametrize("shape", ALLOCATIONS)
@pytest.mark.parametrize("launcher", ["srun", "torchrun", "mpirun"])
@pytest.mark.slurm_versions
def test_every_ranks_cpus_are_within_its_allocation_and_no_two_ranks_share_one(job, launcher, shape):
    nodes, per_node, cpus_per_task, extra = ALLOCATIONS[shape]
    if extra and launcher != "srun":
        pytest.skip("--srun-arg reaches srun's rank step only")
    folder = job(launcher, nodes, per_node, cpus_per_task, extra)
    got, held = bindings(folder), allocations(folder)
    assert sorted(got) == list(range(nodes * per_node)), got
    for rank, (host, cpus) in got.items():
        assert host in held, f"no allocation line for {host}: {held}"
        assert cpus and cpus <= held[host], f"rank {rank} on {host} runs on {sorted(cpus)}, outside {sorted(held[host])}"
        assert len(cpus) == cpus_per_task, got
    for host in {h for h, _ in got.values()}:
        sets = [cpus for h, cpus in got.values() if h == host]
        assert len(frozenset().union(*sets)) == sum(map(len, sets)), f"ranks on {host} overlap: {got}"
