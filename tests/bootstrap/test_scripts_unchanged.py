"""Other people's scripts, unchanged, under the bootstrap: what they see is what `python x.py`
and torchrun give them (issue 24: the backend a script names, its own path, `--local_rank`,
whether stdout is a terminal).

Real torch, real Open MPI (loopback), real torchrun; every run has a timeout.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtorch.bootstrap.contracts import env_for, unset_keys
from slurmtorch.bootstrap.device import backend_names, missing_backend
from slurmtorch.bootstrap.rankinfo import RankInfo

REPO = Path(__file__).resolve().parents[2]
BOOT = [sys.executable, "-m", "slurmtorch.bootstrap"]


@pytest.fixture(scope="module")
def env(mpi_env, has_torch):
    env = dict(mpi_env)
    env["GLOO_SOCKET_IFNAME"] = "lo"
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NTASKS", "PMI_RANK", "PMIX_RANK"):
        env.pop(key, None)
    return env


def run(argv, env, cwd=REPO, timeout=90):
    return subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


# ----------------------------------------------------------------------------- item 10

MPI_INIT = "import torch.distributed as dist\ndist.init_process_group(backend={backend!r})\nprint('INITIALISED')\n"


@pytest.mark.parametrize("backend", ["mpi", "cpu:mpi"])
@pytest.mark.parametrize("ours", [[], ["--no-init"]], ids=["our-group", "no-init"])
def test_a_scripts_own_backend_the_build_lacks_gets_the_same_line_as_the_option(env, tmp_path, backend, ours):
    import torch.distributed as dist

    if dist.is_mpi_available():
        pytest.skip("this torch has the MPI backend")
    script = tmp_path / "mpi_init.py"
    script.write_text(MPI_INIT.format(backend=backend))
    option = run([*BOOT, "--backend", "mpi", script], env)
    result = run([*BOOT, *ours, script], env)
    assert result.returncode == option.returncode == 1, result.stderr
    line = "error: backend 'mpi' is not built into this torch"
    assert line in option.stderr
    # The same error and tip, and no torch traceback or UserWarning before it (c10d's own
    # log lines about this host's name resolution may precede both).
    ours = result.stderr[result.stderr.index("rank 0 on "):]
    assert ours == option.stderr[option.stderr.index("rank 0 on "):]
    assert "Traceback" not in result.stderr and "UserWarning" not in result.stderr
    assert "INITIALISED" not in result.stdout


def test_backend_names_reads_torchs_per_device_form():
    assert backend_names("gloo") == ["gloo"]
    assert backend_names("cpu:gloo,cuda:nccl") == ["gloo", "nccl"]
    assert backend_names("MPI") == ["mpi"]


def test_a_plugin_backend_torch_does_not_list_here_is_left_to_torch():
    have = {"nccl": False, "gloo": True, "mpi": False}
    assert missing_backend("ucc", have) is None and missing_backend("cpu:gloo", have) is None
    assert missing_backend("cpu:gloo,cuda:nccl", have).message == "backend 'nccl' is not built into this torch ()"


# ----------------------------------------------------------------------------- item 11

WHERE = ("import json, os, sys\n"
         "os.write(1, ('WHERE ' + json.dumps({'file': __file__, 'argv0': sys.argv[0], 'path0': sys.path[0], "
         "'cwd': os.getcwd(), 'co_filename': sys._getframe().f_code.co_filename, 'name': __name__}) + '\\n')"
         ".encode())\n")


def where(out: str) -> list[dict]:
    return [json.loads(line[len("WHERE "):]) for line in out.splitlines() if line.startswith("WHERE ")]


@pytest.fixture
def probe_tree(tmp_path):
    """A script in a folder below, a symlink to it in another, run from a third folder."""
    (tmp_path / "code" / "sub").mkdir(parents=True)
    (tmp_path / "links").mkdir()
    (tmp_path / "run").mkdir()
    script = tmp_path / "code" / "sub" / "where.py"
    script.write_text(WHERE)
    (tmp_path / "links" / "where.py").symlink_to(script)
    return tmp_path


@pytest.mark.parametrize("typed", ["../code/sub/where.py", "./../code/sub/../sub/where.py", "../links/where.py"])
def test_script_sees_the_path_python_and_torchrun_give_it(env, probe_tree, typed):
    cwd = probe_tree / "run"
    ways = {
        "python": [sys.executable, typed],
        "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", typed],
        "bootstrap": [*BOOT, "--no-init", typed],
        "bootstrap-group": [*BOOT, typed],
        "mpirun": ["mpirun", "-n", "1", *BOOT, "--no-init", typed],
    }
    seen = {}
    for name, argv in ways.items():
        result = run(argv, env, cwd=cwd)
        assert result.returncode == 0, f"{name}: {result.stderr[-2000:]}"
        (seen[name],) = where(result.stdout)
    expected = seen["python"]
    assert os.path.isabs(expected["file"]) and expected["argv0"] == typed  # what Python 3.9+ gives
    for name, got in seen.items():
        assert got == expected, name


# ----------------------------------------------------------------------------- item 15


def make_info(rank=3, world=4, local_rank=1, local_world=2, node_rank=1):
    return RankInfo(rank=rank, world_size=world, local_rank=local_rank, local_world_size=local_world,
                    node_rank=node_rank, num_nodes=world // local_world, master_addr="198.18.0.11",
                    master_port=29500, hostname="n2", source="mpi")


def test_role_variables_are_torchruns_for_its_one_role():
    env = env_for(make_info())
    # torchrun's workers all have the role `default`: the role's rank and size are the world's.
    assert (env["ROLE_RANK"], env["ROLE_WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == ("3", "4", "2")


def test_a_parameter_server_gets_no_role_rank_and_an_inherited_one_is_removed():
    from slurmtorch.bootstrap.fromenv import from_roles

    env = {"SLURMTORCH_ROLES": "master=1,worker=2,ps=1", "SLURM_JOB_NODELIST": "node[1-4]", "SLURM_PROCID": "0",
           "SLURM_JOB_ID": "42"}
    ps = env_for(from_roles(env, "node4", "ps"))
    assert "ROLE_RANK" not in ps and "ROLE_WORLD_SIZE" not in ps
    assert {"ROLE_RANK", "ROLE_WORLD_SIZE"} <= set(unset_keys(ps))


def test_torchelastic_run_id_and_nccl_error_handling_are_left_to_torchrun_and_the_user():
    env = env_for(make_info())
    for key in ("TORCHELASTIC_RUN_ID", "TORCH_NCCL_ASYNC_ERROR_HANDLING"):
        assert key not in env and key not in unset_keys(env)  # neither set nor removed


CONTRACT = ("import json, os\n"
            "keys = ('RANK', 'ROLE_RANK', 'ROLE_WORLD_SIZE', 'GROUP_WORLD_SIZE', 'TORCHELASTIC_RUN_ID', "
            "'TORCH_NCCL_ASYNC_ERROR_HANDLING')\n"
            "os.write(1, ('CONTRACT ' + json.dumps({k: os.environ.get(k) for k in keys}) + '\\n').encode())\n")


def test_the_variables_beside_torchruns_side_by_side_with_torchrun(env, tmp_path):
    script = tmp_path / "contract.py"
    script.write_text(CONTRACT)
    ways = {"torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", script],
            "mpirun": ["mpirun", "-n", "2", "--oversubscribe", *BOOT, "--no-init", script],
            "under-torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                               "-m", "slurmtorch.bootstrap", "--no-init", script]}
    seen = {}
    for name, argv in ways.items():
        result = run(argv, env)
        assert result.returncode == 0, f"{name}: {result.stderr[-2000:]}"
        lines = [json.loads(x[len("CONTRACT "):]) for x in result.stdout.splitlines() if x.startswith("CONTRACT ")]
        seen[name] = sorted(lines, key=lambda r: r["RANK"])
    same = ("RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE")
    assert [{k: r[k] for k in same} for r in seen["mpirun"]] == [{k: r[k] for k in same} for r in seen["torchrun"]]
    # Decided (docs/rank-contract.md): torchrun's own two only where torchrun started the ranks.
    assert all(r["TORCHELASTIC_RUN_ID"] is None and r["TORCH_NCCL_ASYNC_ERROR_HANDLING"] is None
               for r in seen["mpirun"])
    # Under torchrun (`--launcher torchrun`) the bootstrap keeps torchrun's (a new run id each run).
    for ours, theirs in zip(seen["under-torchrun"], seen["torchrun"]):
        assert ours["TORCHELASTIC_RUN_ID"] and theirs["TORCHELASTIC_RUN_ID"]
        assert {**ours, "TORCHELASTIC_RUN_ID": "x"} == {**theirs, "TORCHELASTIC_RUN_ID": "x"}


def test_fabric_picks_torchelastic_only_where_torchrun_started_the_ranks(env):
    # Lightning tries TorchElasticEnvironment first (TORCHELASTIC_RUN_ID set): under torchrun it
    # reads torchrun's world through the bootstrap; under mpirun it is MPIEnvironment
    # (test_interop.py), and under srun SLURMEnvironment, whose requeue handling it keeps.
    pytest.importorskip("lightning")
    script = REPO / "tests" / "scripts" / "interop_fabric.py"
    result = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "slurmtorch.bootstrap",
                  script, "--devices", "2"], env, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    found = sorted((json.loads(x[len("INTEROP "):]) for x in result.stdout.splitlines() if x.startswith("INTEROP ")),
                   key=lambda r: r["dist_rank"])
    assert [(r["rank"], r["world"], r["dist_rank"], r["cluster_env"]) for r in found] == [
        (0, 2, 0, "TorchElasticEnvironment"), (1, 2, 1, "TorchElasticEnvironment")]
    assert {r["env"]["SLURMTORCH_SOURCE"] for r in found} == {"torchrun"}


# ----------------------------------------------------------------------------- item 12

# One write per line: the launchers run `python -u`, where print() writes each piece on its own.
ARGV = "import os, sys\nos.write(1, f\"ARGV {os.environ['LOCAL_RANK']} {' '.join(sys.argv[1:])}\\n\".encode())\n"


def argv_lines(out: str) -> list[str]:
    return sorted(line for line in out.splitlines() if line.startswith("ARGV "))


@pytest.mark.parametrize("launcher, ours", [
    ("deepspeed", "--local-rank-arg"),  # DeepSpeed's launcher: --local_rank=N
    ("torch.distributed.launch", "--local-rank-arg=local-rank"),  # torch >= 2.0: --local-rank=N
])
def test_local_rank_argument_is_where_the_older_launchers_put_it(env, tmp_path, launcher, ours):
    script = tmp_path / "argv.py"
    script.write_text(ARGV)
    if launcher == "deepspeed":
        pytest.importorskip("deepspeed")
        world = base64.b64encode(b'{"localhost": [0, 1]}').decode()
        theirs = [sys.executable, "-m", "deepspeed.launcher.launch", f"--world_info={world}",
                  "--master_addr=127.0.0.1", "--master_port=29517", script, "--x", "1"]
    else:
        theirs = [sys.executable, "-m", "torch.distributed.launch", "--standalone", "--nproc-per-node", "2", script, "--x", "1"]
    launched = run(theirs, env)
    expected = argv_lines(launched.stdout)
    assert len(expected) == 2, launched.stderr[-2000:]
    result = run(["mpirun", "-n", "2", "--oversubscribe", *BOOT, "--no-init", ours, script, "--x", "1"], env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert argv_lines(result.stdout) == expected


def test_local_rank_argument_reaches_a_module_too(env, tmp_path):
    (tmp_path / "argvmod.py").write_text(ARGV)
    result = run([*BOOT, "--no-init", "--local-rank-arg", "-m", "argvmod", "--x"], {**env, "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-2000:]
    assert argv_lines(result.stdout) == ["ARGV 0 --local_rank=0 --x"]


def test_a_local_rank_form_that_is_neither_is_a_usage_error():
    from slurmtorch.bootstrap.options import UsageError, parse_args

    assert parse_args(["--local-rank-arg", "x.py"]).local_rank_arg == "local_rank"  # never eats the script
    assert parse_args(["--local-rank-arg=local-rank", "x.py"]).script == "x.py"
    with pytest.raises(UsageError, match="is not local_rank or local-rank"):
        parse_args(["--local-rank-arg=rank", "x.py"])


def test_slurmtorch_mpirun_local_rank_arg_reaches_every_rank(env, tmp_path):
    script = tmp_path / "argv.py"
    script.write_text(ARGV)
    result = run([sys.executable, "-m", "slurmtorch", "mpirun", "-n", "2", "--local-rank-arg", "local_rank",
                  "--backend", "gloo", script, "--x", "1"], {**env, "SLURMTORCH_HOME": str(tmp_path / "home")},
                 cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert argv_lines(result.stdout) == ["ARGV 0 --local_rank=0 --x 1", "ARGV 1 --local_rank=1 --x 1"]


# ----------------------------------------------------------------------------- item 13

TTY = ("import os, sys\n"
       "print('TTY', os.environ['RANK'], sys.stdout.isatty(), sys.stderr.isatty(), flush=True)\n")
FLOOD = ("import os, signal, sys\n"
         "r = os.environ['RANK']\n"
         "for i in range(40000):\n"
         "    sys.stdout.write(f'rank {r} line {i:06d} ' + 'x' * 60 + '\\n')\n"
         "print('LAST', r, flush=True)\n"
         "if sys.argv[1:] == ['kill'] and r == '1':\n"
         "    os.kill(os.getpid(), signal.SIGKILL)\n")


def tty_lines(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line.startswith("TTY "))


def test_a_rank_under_mpirun_writing_to_a_file_sees_no_terminal(env, tmp_path):
    script = tmp_path / "tty.py"
    script.write_text(TTY)
    with open(tmp_path / "out", "w") as out:
        proc = subprocess.run([str(a) for a in ["mpirun", "-n", "2", "--oversubscribe", *BOOT, "--no-init", script]],
                              env=env, stdout=out, stderr=subprocess.PIPE, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert tty_lines((tmp_path / "out").read_text()) == ["TTY 0 False False", "TTY 1 False False"]


def test_slurmtorch_mpirun_writing_to_a_file_gives_its_ranks_no_terminal(env, tmp_path):
    script = tmp_path / "tty.py"
    script.write_text(TTY)
    with open(tmp_path / "out", "w") as out:
        proc = subprocess.run([sys.executable, "-m", "slurmtorch", "mpirun", "-n", "2", "--backend", "gloo", str(script)],
                              env={**env, "SLURMTORCH_HOME": str(tmp_path / "home")}, cwd=tmp_path, stdout=out,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert tty_lines((tmp_path / "out").read_text()) == ["TTY 0 False False", "TTY 1 False False"]


@pytest.mark.parametrize("end", ["exit", "kill"])
def test_every_byte_a_rank_wrote_arrives_and_nothing_of_it_is_left_running(env, tmp_path, end):
    # 2 x 3.3 MB through the relay; with `kill`, rank 1 is SIGKILLed right after its last line.
    script = tmp_path / f"flood_{end}.py"
    script.write_text(FLOOD)
    result = run(["mpirun", "-n", "2", "--oversubscribe", *BOOT, "--no-init", script, end], env, timeout=120)
    assert result.returncode == (137 if end == "kill" else 0), result.stderr[-2000:]
    lines = result.stdout.splitlines()
    survivors = ["1"] if end == "kill" else ["0", "1"]  # mpirun ends rank 0 when rank 1 is killed
    for r in survivors:
        mine = [line for line in lines if line.startswith(f"rank {r} ")]
        assert mine == [f"rank {r} line {i:06d} " + "x" * 60 for i in range(40000)]
        assert f"LAST {r}" in lines
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _runs(p, script.name)]
    assert left == []


def _runs(proc: Path, name: str) -> bool:
    """Whether /proc/PID is a live (not zombie) process whose command line names `name`."""
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z" and name in (proc / "cmdline").read_bytes().decode(errors="replace")
    except (OSError, IndexError):
        return False


def test_only_open_mpis_pseudo_terminal_is_replaced():
    from slurmtorch.bootstrap.terminal import under_open_mpis_pty

    assert under_open_mpis_pty({"OMPI_COMM_WORLD_SIZE": "2"}, isatty=lambda fd: True)
    assert not under_open_mpis_pty({"OMPI_COMM_WORLD_SIZE": "2"}, isatty=lambda fd: False)  # a file, a pipe
    # srun --pty, or a shell's terminal: a terminal the user asked for stays one.
    assert not under_open_mpis_pty({"SLURM_PROCID": "0", "PMIX_RANK": "0"}, isatty=lambda fd: True)


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_a_batch_jobs_ranks_see_no_terminal_under_either_launcher(testbed, has_torch, tmp_path, launcher):
    script = tmp_path / "tty.py"
    script.write_text(TTY)
    r = testbed.run([testbed.python, "-m", "slurmtorch", "sbatch", "--site", "testbed", "--nodes", "2",
                     "--ntasks-per-node", "2", "--launcher", launcher, "--backend", "gloo", "--wait", str(script)],
                    env={"SLURMTORCH_HOME": str(tmp_path / "home")}, cwd=tmp_path, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    folder = tmp_path / "home" / "jobs" / r.stdout.split()[0]
    text = "".join(p.read_text() for p in sorted(folder.glob("rank-*.out")))
    assert tty_lines(text) == [f"TTY {rank} False False" for rank in range(4)], text
