"""`python -m slurmtorch.bootstrap` under a real MPICH (Hydra's mpiexec, PMI), not only Open MPI.

MPICH comes from PyPI's `mpich` wheel in `.venv-mpich` (scripts/setup): mpi4py's wheels load
whichever MPI the environment provides, and that venv sees the main venv's torch and
slurmtorch through a site dir added after its own, so its mpi4py talks to MPICH.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import need

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "tests" / "scripts" / "probe.py"
MPICH = REPO / ".venv-mpich" / "bin"

pytestmark = [pytest.mark.mpi, pytest.mark.torch]


@pytest.fixture(scope="module")
def mpich_env(has_torch):
    need((MPICH / "mpiexec").exists(), "no MPICH venv (.venv-mpich: run scripts/setup)")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_", "PRTE_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")}
    env["PATH"] = f"{MPICH}{os.pathsep}{env.get('PATH', '')}"
    env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def mpiexec(n, *argv, env, timeout=90):
    """Hydra's mpiexec; `timeout` is the hang guard (a job that does not end fails the test)."""
    cmd = [str(MPICH / "mpiexec"), "-n", str(n), str(MPICH / "python"), "-m", "slurmtorch.bootstrap", *map(str, argv)]
    return subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_mpich_is_the_mpi_the_ranks_talk_to(mpich_env):
    # One write per line: both ranks share the pipe, and under PYTHONUNBUFFERED print() would
    # write its parts separately and the two ranks' lines could interleave.
    code = ("import sys; from mpi4py import MPI; "
            "sys.stdout.write(f'{MPI.Get_library_version().split()[0]} {MPI.COMM_WORLD.Get_size()}\\n')")
    result = subprocess.run([str(MPICH / "mpiexec"), "-n", "2", str(MPICH / "python"), "-c", code],
                            env=mpich_env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["MPICH 2", "MPICH 2"]


@pytest.mark.parametrize("n", [2, 3])
def test_mpich_mpiexec_gives_every_rank_the_env_contract_and_a_ready_group(mpich_env, n):
    result = mpiexec(n, PROBE, env=mpich_env)
    assert result.returncode == 0, result.stderr
    records = sorted((json.loads(line[len("PROBE "):]) for line in result.stdout.splitlines()
                      if line.startswith("PROBE ")), key=lambda r: int(r["RANK"]))
    assert [int(r["RANK"]) for r in records] == list(range(n))
    for r in records:
        assert (r["dist_rank"], r["dist_world"]) == (int(r["RANK"]), n)
        assert r["WORLD_SIZE"] == r["LOCAL_WORLD_SIZE"] == str(n) and r["LOCAL_RANK"] == r["RANK"]
        assert r["NODE_RANK"] == "0" and r["all_reduce"] == n * (n + 1) / 2
        assert r["SLURMTORCH_SOURCE"] == "mpi"
    assert len({(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in records}) == 1


def test_mpich_self_check_names_the_launcher(mpich_env):
    result = mpiexec(2, env=mpich_env)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("slurmtorch: rank")]
    assert len(lines) == 2 and all("all_reduce 3 (expected 3) ok" in line for line in lines)


def test_a_rank_that_raises_under_mpich_ends_the_job_and_is_named(mpich_env):
    shm = Path("/dev/shm")
    before = set(shm.glob("mpich_shm_*"))
    try:
        result = mpiexec(2, PROBE, "--fail-rank", "1", env=mpich_env, timeout=60)
    finally:  # MPI_Abort leaves MPICH's shared-memory segment behind: ours to remove
        for leftover in set(shm.glob("mpich_shm_*")) - before:
            leftover.unlink(missing_ok=True)
    assert result.returncode != 0
    assert "rank 1 on " in result.stderr and "RuntimeError: probe told to fail on rank 1" in result.stderr
    assert "PROBE" not in result.stdout  # rank 0 was in all_reduce and was ended by MPI_Abort
