"""Placement applied by the bootstrap under real launchers on this 2-CPU host (torchrun, Open
MPI's mpirun bound and unbound), and on a recorded topology: every rank's CPUs stay within what
its launcher allowed, ranks that were handed the same CPUs get disjoint shares, and the rank's
threads and data-loader workers follow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recorded_topology import TWO_SOCKETS, write_sysfs
from slurmtorch import protocol

REPO = Path(__file__).resolve().parents[2]
BOOT = [sys.executable, "-m", "slurmtorch.bootstrap", "--backend", "gloo"]
HOST = frozenset(os.sched_getaffinity(0))

# Prints the rank's CPUs, its OMP_NUM_THREADS and a child process's CPUs (what a DataLoader
# worker, a forked process, inherits).
AFFINITY = """\
import json, os, multiprocessing as mp
def child(q):
    q.put(sorted(os.sched_getaffinity(0)))
if __name__ == "__main__":
    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=child, args=(q,)); p.start(); kid = q.get(); p.join()
    print("AFFINITY " + json.dumps({"rank": int(os.environ["RANK"]), "cpus": sorted(os.sched_getaffinity(0)),
          "omp": os.environ.get("OMP_NUM_THREADS"), "child": kid}), flush=True)
"""


@pytest.fixture
def env(mpi_env, has_torch):
    env = {k: v for k, v in mpi_env.items() if not k.startswith(("SLURM", "OMP_", "TORCHELASTIC"))}
    env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def affinities(out: str) -> dict[int, dict]:
    got = [json.loads(line[len("AFFINITY "):]) for line in out.splitlines() if line.startswith("AFFINITY ")]
    return {r["rank"]: r for r in got}


def run(argv, env, tmp_path) -> dict[int, dict]:
    script = tmp_path / "affinity.py"
    script.write_text(AFFINITY)
    r = subprocess.run([str(a) for a in argv] + [str(script)], env=env, cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return affinities(r.stdout)


LAUNCHERS = {
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                 "-m", "slurmtorch.bootstrap", "--backend", "gloo"],
    "mpirun-unbound": ["mpirun", "-n", "2", "--bind-to", "none", *BOOT],
    "mpirun-bound": ["mpirun", "-n", "2", "--bind-to", "core", *BOOT],
}


@pytest.mark.skipif(len(HOST) != 2, reason="written for this 2-CPU host")
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_every_rank_gets_its_own_cpu_within_what_the_launcher_allowed(env, tmp_path, launcher):
    got = run(LAUNCHERS[launcher], env, tmp_path)
    assert sorted(got) == [0, 1]
    cpus = [frozenset(got[r]["cpus"]) for r in (0, 1)]
    assert all(c and c <= HOST for c in cpus) and not cpus[0] & cpus[1], got
    assert all(got[r]["child"] == got[r]["cpus"] for r in (0, 1)), "a worker process must inherit the rank's CPUs"
    if launcher != "mpirun-bound":  # placement divided them: the threads fit the share
        assert {got[r]["omp"] for r in (0, 1)} == {"1"}


@pytest.mark.skipif(len(HOST) != 2, reason="written for this 2-CPU host")
def test_placement_none_leaves_torchruns_workers_on_their_agents_cpus(env, tmp_path):
    got = run(LAUNCHERS["torchrun"], {**env, protocol.PLACEMENT: "none"}, tmp_path)
    assert [frozenset(got[r]["cpus"]) for r in (0, 1)] == [HOST, HOST]


PLACE = """\
import json, os, sys, threading
from slurmtorch.bootstrap.world import place_rank
started = threading.Event(); stop = threading.Event()
def worker():
    started.set(); stop.wait()
t = threading.Thread(target=worker); t.start(); started.wait()
env = dict(os.environ)
p = place_rank(env, int(sys.argv[2]), int(sys.argv[3]), sys.argv[1])
status = open(f"/proc/self/task/{t.native_id}/status").read()
thread = [l.split()[1] for l in status.splitlines() if l.startswith("Cpus_allowed_list")][0]
stop.set(); t.join()
print(json.dumps({"cpus": sorted(os.sched_getaffinity(0)), "thread": thread, "why": p and p.why,
                  "ucx": env.get("UCX_NET_DEVICES"), "omp": env.get("OMP_NUM_THREADS"), "gpu": p and p.gpu}))
"""


def place_in_child(root, local_rank, local_world, env) -> dict:
    r = subprocess.run([sys.executable, "-c", PLACE, str(root), str(local_rank), str(local_world)],
                       env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **env},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.skipif(HOST != {0, 1}, reason="written for this host's CPUs 0 and 1")
def test_a_rank_is_moved_with_its_threads_to_its_gpus_cpus_and_given_its_gpus_nic(tmp_path):
    root = write_sysfs(TWO_SOCKETS, tmp_path)
    got = place_in_child(root, 1, 2, {"TORCHELASTIC_RUN_ID": "x"})  # torchrun's local rank 1: GPU1, NUMA 1
    assert (got["why"], got["gpu"], got["cpus"], got["thread"]) == ("gpu", 1, [1], "1")
    assert (got["ucx"], got["omp"]) == ("mlx5_1:1", "1")
    mine = place_in_child(root, 0, 2, {"TORCHELASTIC_RUN_ID": "x", "UCX_NET_DEVICES": "mlx5_1:1",
                                       "OMP_NUM_THREADS": "4"})
    assert (mine["cpus"], mine["ucx"], mine["omp"]) == ([0], "mlx5_1:1", "4")  # the user's choices stand
    # Slurm gave the rank one GPU (--gpus-per-task) and bound it to CPU 0: kept, never moved.
    bound = place_in_child(root, 1, 2, {"CUDA_VISIBLE_DEVICES": "1", "SLURM_CPUS_ON_NODE": "4"})
    assert (bound["why"], bound["cpus"]) == ("own", [0, 1])


def test_a_rank_with_nothing_to_divide_is_left_alone_and_so_is_one_under_none(tmp_path):
    alone = place_in_child(tmp_path, 0, 1, {})
    assert (frozenset(alone["cpus"]), alone["why"], alone["omp"]) == (HOST, "own", None)
    off = place_in_child(tmp_path, 1, 2, {"TORCHELASTIC_RUN_ID": "x", protocol.PLACEMENT: "none"})
    assert (frozenset(off["cpus"]), off["why"]) == (HOST, None)
