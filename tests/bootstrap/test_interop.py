"""Scripts written for Lightning Fabric, Hugging Face accelerate and DeepSpeed run unchanged
under `python -m slurmtorch.bootstrap` and see the rank and world size we set.

Real frameworks (installed by scripts/setup), real mpirun (loopback) and the real Slurm
testbed (srun over eth0). Each script prints one `INTEROP {json}` line per rank with
what the framework itself reports; see docs/INTEROP.md for the findings.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from conftest import need

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "tests" / "scripts"
BOOT = [sys.executable, "-m", "slurmtorch.bootstrap"]

FRAMEWORKS = {
    # name: (module that must import, script, script args for (devices per node, nodes))
    "fabric": ("lightning", "interop_fabric.py", lambda per_node, nodes: ["--devices", str(per_node),
                                                                         "--num-nodes", str(nodes)]),
    "accelerate": ("accelerate", "interop_accelerate.py", lambda per_node, nodes: []),
    "deepspeed": ("deepspeed", "interop_deepspeed.py", lambda per_node, nodes: []),
}

pytestmark = [pytest.mark.torch]


def framework(name: str) -> tuple[Path, callable]:
    module, script, args = FRAMEWORKS[name]
    need(importlib.util.find_spec(module) is not None,
         f"{module} is not installed (scripts/setup installs lightning, accelerate and deepspeed)")
    return SCRIPTS / script, args


def records(out: str) -> list[dict]:
    found = [json.loads(line[len("INTEROP "):]) for line in out.splitlines() if line.startswith("INTEROP ")]
    return sorted(found, key=lambda r: r["dist_rank"])


def check_agreement(found: list[dict], n: int, per_node: int, source: str) -> None:
    """The framework's rank/world/local rank are ours and torch's, on every rank."""
    assert [r["dist_rank"] for r in found] == list(range(n))
    for r in found:
        assert (r["rank"], r["world"]) == (r["dist_rank"], n) == (int(r["env"]["RANK"]), int(r["env"]["WORLD_SIZE"]))
        assert r["local_rank"] == int(r["env"]["LOCAL_RANK"]) == r["dist_rank"] % per_node
        assert r["all_reduce"] == n * (n + 1) / 2
        assert r["env"]["SLURMTORCH_SOURCE"] == source


# ----------------------------------------------------------------------------- mpirun


@pytest.fixture(scope="module")
def local_env(mpi_env, has_torch):
    env = dict(mpi_env)
    env["GLOO_SOCKET_IFNAME"] = "lo"
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NTASKS", "SLURM_PROCID", "PMI_RANK", "PMIX_RANK"):
        env.pop(key, None)
    return env


@pytest.mark.mpi
@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_framework_sees_our_world_under_mpirun(local_env, name):
    import subprocess

    script, args = framework(name)
    # DeepSpeed JIT-compiles its CPU shared-memory op on first use (~30 s, cached after).
    result = subprocess.run(["mpirun", "-n", "2", "--oversubscribe", *BOOT, script, *args(2, 1)], env=local_env,
                            cwd=REPO, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    found = records(result.stdout)
    check_agreement(found, 2, 2, "mpi")
    if name == "fabric":
        # No SLURM_* and no torchelastic: Fabric reads the same world from MPI.
        assert {r["cluster_env"] for r in found} == {"MPIEnvironment"}
    if name == "accelerate":
        assert {r["distributed_type"] for r in found} == {"DistributedType.MULTI_CPU"}


# ----------------------------------------------------------------------------- testbed


@pytest.fixture(scope="module")
def bed(testbed, has_torch):
    testbed.env.update(GLOO_SOCKET_IFNAME="eth0", OMPI_MCA_btl_tcp_if_include="eth0", OPAL_PREFIX=sys.prefix,
                       OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for key in ("OMPI_MCA_btl", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        testbed.env.pop(key, None)
    return testbed


@pytest.mark.testbed
@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_framework_sees_our_world_under_srun_on_two_nodes(bed, name):
    script, args = framework(name)
    result = bed.run(["srun", "-p", "debug", "-N2", "--ntasks-per-node=2", "--kill-on-bad-exit=1", "--mpi=none",
                      *BOOT, "--from", "slurm", script, *args(2, 2)], cwd=REPO, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    found = records(result.stdout)
    check_agreement(found, 4, 2, "slurm")
    # Two ranks on each of two nodes (which two depends on what else the testbed runs).
    hosts = [r["host"] for r in found]
    assert len(set(hosts)) == 2 and hosts[0] == hosts[1] and hosts[2] == hosts[3], hosts
    if name == "fabric":
        # Under srun Lightning reads SLURM_PROCID/NTASKS/LOCALID/NODEID itself: they agree with ours.
        assert {r["cluster_env"] for r in found} == {"SLURMEnvironment"}
        assert [r["node_rank"] for r in found] == [0, 0, 1, 1]


@pytest.mark.testbed
@pytest.mark.mpi
def test_fabric_sees_our_world_under_mpirun_inside_an_allocation(bed):
    # The `launcher: mpirun` job: Open MPI starts one prted per node with srun, so every
    # rank inherits a daemon's SLURM_PROCID (its node index), SLURM_NTASKS (node count) and
    # SLURM_NTASKS_PER_NODE=1, and Lightning's SLURMEnvironment believes them.
    script, args = framework("fabric")
    result = bed.run(["salloc", "-J", "train", "-p", "debug", "-N2", "--ntasks-per-node=2", "-t", "5",
                      "mpirun", "-n", "4", *BOOT, "--from", "mpi", script, *args(2, 2)], cwd=REPO, timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    found = records(result.stdout)
    check_agreement(found, 4, 2, "mpi")
    # contracts.slurm_task_env rewrote the inherited SLURM_* per rank: Lightning still picks
    # SLURMEnvironment (docs/INTEROP.md), and it now reads our world from it.
    assert {r["cluster_env"] for r in found} == {"SLURMEnvironment"}
    assert [r["node_rank"] for r in found] == [0, 0, 1, 1]
