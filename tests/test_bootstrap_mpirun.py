"""`python -m slurmtorch.bootstrap` under real launchers on this host: mpirun, torchrun, none.

Real Open MPI, real torch.distributed (gloo over loopback). Every run has a timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "tests" / "scripts" / "probe.py"
TRAIN = REPO / "examples" / "train_ddp.py"
BOOT = [sys.executable, "-m", "slurmtorch.bootstrap"]

pytestmark = [pytest.mark.mpi, pytest.mark.torch]


@pytest.fixture(scope="module")
def env(mpi_env, has_torch):
    env = dict(mpi_env)
    env["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only: MASTER_ADDR and gloo's pairs
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NTASKS", "PMI_RANK", "PMIX_RANK"):
        env.pop(key, None)
    return env


def run(argv, env, timeout=90, **kw):
    return subprocess.run([str(a) for a in argv], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, **kw)


def mpirun(n, *argv):
    return ["mpirun", "-n", str(n), "--oversubscribe", *BOOT, *argv]


def probes(out: str) -> list[dict]:
    records = [json.loads(line[len("PROBE "):]) for line in out.splitlines() if line.startswith("PROBE ")]
    return sorted(records, key=lambda r: int(r["RANK"]))


def check_world(records, n, source):
    assert [int(r["RANK"]) for r in records] == list(range(n))
    for r in records:
        assert (r["dist_rank"], r["dist_world"]) == (int(r["RANK"]), n)
        assert r["WORLD_SIZE"] == str(n) and r["LOCAL_WORLD_SIZE"] == str(n) and r["LOCAL_RANK"] == r["RANK"]
        assert r["NODE_RANK"] == r["GROUP_RANK"] == "0" and r["GROUP_WORLD_SIZE"] == "1"
        assert r["all_reduce"] == n * (n + 1) / 2
        assert r["SLURMTORCH_SOURCE"] == source
    assert len({(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in records}) == 1


@pytest.mark.parametrize("n", [1, 2, 4])
def test_mpirun_gives_every_rank_the_env_contract_and_a_ready_group(env, n):
    result = run(mpirun(n, PROBE), env)
    assert result.returncode == 0, result.stderr
    records = probes(result.stdout)
    check_world(records, n, "mpi")
    assert all(r["was_initialized"] for r in records)
    assert records[0]["MASTER_ADDR"] == "127.0.0.1"  # rank 0's address on GLOO_SOCKET_IFNAME=lo
    spec = json.loads(records[-1]["CLUSTER_SPEC"])
    assert len(spec["cluster"]["master"]) == 1 and len(spec["cluster"].get("worker", [])) == n - 1
    tf = json.loads(records[-1]["TF_CONFIG"])
    assert tf["task"] == ({"type": "worker", "index": n - 2} if n > 1 else {"type": "chief", "index": 0})


def test_mpirun_sets_the_cheap_btl_default_but_keeps_a_users_choice(env):
    mine = {k: v for k, v in env.items() if k != "OMPI_MCA_btl"}
    result = run(mpirun(1, PROBE), mine)
    assert result.returncode == 0, result.stderr
    assert probes(result.stdout)[0]["OMPI_MCA_btl"] == "^ofi,uct"
    result = run(mpirun(1, PROBE), {**mine, "OMPI_MCA_btl": "self,tcp"})
    assert result.returncode == 0, result.stderr
    assert probes(result.stdout)[0]["OMPI_MCA_btl"] == "self,tcp"


def test_self_check_without_script_prints_the_world_and_all_reduce(env):
    result = run(mpirun(2), env)
    assert result.returncode == 0, result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("slurmtorch: rank"))
    assert len(lines) == 2 and all("all_reduce 3 (expected 3) ok" in line for line in lines)
    assert lines[0].startswith("slurmtorch: rank 0/2 local 0/2 node 0/1")


def test_lone_process_is_a_world_of_one(env):
    result = run([*BOOT, PROBE, "--x", "1"], env)
    assert result.returncode == 0, result.stderr
    (record,) = probes(result.stdout)
    check_world([record], 1, "single")
    assert record["argv"] == ["--x", "1"]


def test_torchrun_variables_pass_through(env):
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "slurmtorch.bootstrap", PROBE]
    result = run(argv, env)
    assert result.returncode == 0, result.stderr
    records = probes(result.stdout)
    check_world(records, 2, "torchrun")
    assert all(r["was_initialized"] for r in records)


@pytest.mark.parametrize("flags, n", [([], 4), (["--no-init"], 2)])
def test_torchrun_style_ddp_script_runs_unchanged(env, flags, n):
    result = run(mpirun(n, *flags, TRAIN, "--epochs", "2"), env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "epoch 1 loss" in result.stdout
    assert f"trained on {n} ranks across nodes" in result.stdout
    assert "terminate called" not in result.stderr


def test_script_that_inits_itself_after_no_init_gets_our_timeout_and_port(env):
    result = run(mpirun(2, "--timeout", "77", "--no-init", PROBE, "--init-self"), env)
    assert result.returncode == 0, result.stderr
    records = probes(result.stdout)
    check_world(records, 2, "mpi")
    assert not any(r["was_initialized"] for r in records)
    for r in records:
        assert (r["pg_timeout"], r["store_timeout"]) == (77, 77)
        assert r["store_port"] == int(r["MASTER_PORT"])  # rank 0's reserved port, handed to torch's store


def test_script_asking_a_longer_timeout_gets_it_on_our_group(env):
    result = run(mpirun(2, "--timeout", "77", PROBE, "--init-self", "--init-timeout", "7200"), env)
    assert result.returncode == 0, result.stderr
    records = probes(result.stdout)
    check_world(records, 2, "mpi")
    assert all(r["was_initialized"] and not r["group_replaced"] for r in records)
    assert all((r["pg_timeout"], r["store_timeout"]) == (7200, 7200) for r in records)


def test_second_init_with_another_backend_replaces_our_group(env):
    # `cpu:gloo` is a different backend string: the script's choice wins, same world.
    result = run(mpirun(2, "--init-args", REPO / "tests" / "scripts" / "init_args.py"), env)
    assert result.returncode == 0, result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("INIT_ARGS"))
    assert len(lines) == 2
    for rank, line in enumerate(lines):
        assert f"--rank {rank} --world_size 2" in line and "--init_method tcp://127.0.0.1:" in line
        assert line.endswith("sum 3.0 backend cpu:gloo")


def test_init_args_per_node_refuse_several_tasks_on_one_node(env):
    result = run(mpirun(2, "--init-args=node", PROBE), env)
    assert result.returncode != 0
    assert "each would claim the same rank" in result.stderr


def test_exception_in_rank_1_ends_the_job_promptly_with_its_traceback(env):
    # run()'s timeout is the hang guard: a job that did not end raises TimeoutExpired.
    result = run(mpirun(2, PROBE, "--fail-rank", "1"), env, timeout=60)
    assert result.returncode != 0
    assert "rank 1 on " in result.stderr and " failed:" in result.stderr
    assert "RuntimeError: probe told to fail on rank 1" in result.stderr
    assert "PROBE" not in result.stdout  # rank 0 waited in all_reduce and was killed


def test_exception_without_mpi_exits_non_zero(env):
    result = run([*BOOT, PROBE, "--fail-rank", "0"], env)
    assert result.returncode == 1
    assert "rank 0 on " in result.stderr and "probe told to fail" in result.stderr


def test_system_exit_code_passes_through_and_ends_the_job(env):
    result = run(mpirun(2, PROBE, "--exit-rank", "1", "--exit-code", "3"), env, timeout=60)
    assert result.returncode == 3, result.stderr
    assert "rank 1 on " in result.stderr and "exited with code 3" in result.stderr


@pytest.mark.parametrize("code", [0, 5])
def test_system_exit_code_passes_through_without_mpi(env, code):
    assert run([*BOOT, PROBE, "--exit-rank", "0", "--exit-code", code], env).returncode == code


def test_missing_variable_is_an_error_listing_what_was_seen(env):
    broken = {**env, "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": "29500"}
    result = run([*BOOT, "--from", "env", PROBE], broken)
    assert result.returncode == 1
    assert "error: cannot read the env:// world: RANK is missing" in result.stderr
    assert "WORLD_SIZE=2" in result.stderr and "tip:" in result.stderr
    assert "PROBE" not in result.stdout and "Traceback" not in result.stderr


def test_pmi2_like_singleton_is_refused_with_the_pmix_fix(env):
    # What srun --mpi=pmi2 hands an Open MPI 5 rank: PMI variables for 2 tasks, and
    # MPI_Init then makes a singleton.
    fake = {**env, "PMI_RANK": "1", "PMI_SIZE": "2", "SLURM_JOB_ID": "9", "SLURM_STEP_ID": "0",
            "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_MPI_TYPE": "pmi2"}
    result = run([*BOOT, PROBE], fake, timeout=60)
    assert result.returncode != 0
    assert "MPI came up as a world of 1 but the launcher started 2 tasks" in result.stderr
    assert "srun --mpi=pmix" in result.stderr
    assert "rank ?(PMI_RANK=1) on " in result.stderr


def test_explicit_backend_the_build_lacks_is_one_clear_line(env, has_torch):
    import torch.distributed as dist

    if dist.is_mpi_available():
        pytest.skip("this torch has the MPI backend")
    result = run([*BOOT, "--backend", "mpi", PROBE], env)
    assert result.returncode == 1
    assert "error: backend 'mpi' is not built into this torch" in result.stderr


def test_bootstrap_import_stays_light(env):
    code = "import sys, slurmtorch.bootstrap; print(sorted(m for m in ('torch', 'mpi4py', 'hostlist', 'json') if m in sys.modules))"
    result = run([sys.executable, "-c", code], env)
    assert result.stdout.strip() == "[]", result.stderr


def test_in_process_init_gives_the_same_world(env):
    result = run(["mpirun", "-n", "2", "--oversubscribe", sys.executable, REPO / "tests" / "scripts" / "inprocess.py"], env)
    assert result.returncode == 0, result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("INPROC"))
    assert lines == ["INPROC rank 0 world 2 env 0 sum 3.0", "INPROC rank 1 world 2 env 1 sum 3.0"]
    assert "terminate called" not in result.stderr


def test_unbuffered_output_becomes_one_write_per_line(tmp_path):
    """torchrun runs workers with `python -u`: without this, two ranks sharing a log
    interleave the halves of their print() lines (text, then newline, as two writes)."""
    script = tmp_path / "streams.py"
    script.write_text("import sys\n"
                      "print(sys.stdout.write_through, sys.stdout.line_buffering,"
                      " sys.stderr.write_through, sys.stderr.line_buffering)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    result = subprocess.run([sys.executable, "-u", "-m", "slurmtorch.bootstrap", "--from", "single", "--no-init",
                             str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "False", "True"]
