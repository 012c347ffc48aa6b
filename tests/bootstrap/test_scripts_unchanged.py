"""Other people's scripts, unchanged, under the bootstrap: what they see is what `python x.py`
and torchrun give them (issue 24: the backend a script names, its own path, `--local_rank`,
whether stdout is a terminal).

Real torch, real Open MPI (loopback), real torchrun; every run has a timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtorch.bootstrap.device import backend_names, missing_backend

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
    # The same error and tip, and nothing else: no torch traceback, no warning before it.
    assert result.stderr == option.stderr
    assert "Traceback" not in result.stderr and "Warning" not in result.stderr
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
         "print('WHERE ' + json.dumps({'file': __file__, 'argv0': sys.argv[0], 'path0': sys.path[0], "
         "'cwd': os.getcwd(), 'co_filename': sys._getframe().f_code.co_filename, 'name': __name__}))\n")


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
        "torchrun": [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", typed],
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
