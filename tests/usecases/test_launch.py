"""The use-case layer under every front end: a dry run is a value, the same whoever asks."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtorch.options import Options
from slurmtorch.usecases import launch

REPO = Path(__file__).resolve().parents[2]


def test_a_dry_run_is_a_frozen_value_that_prints_as_the_clis_dry_run(tmp_path):
    """`launch.dry_run` is what `slurmtorch sbatch --dry-run` prints, given the same options
    (the provenance header's command included), and nothing is written or run for it."""
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    home = tmp_path / "home"
    env = {**os.environ, "SLURMTORCH_HOME": str(home), "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    argv = ["sbatch", "--site", "testbed", "-N", "2", "--no-snapshot", "--dry-run", str(script), "--lr", "1"]
    printed = subprocess.run([sys.executable, "-m", "slurmtorch", *argv], capture_output=True, text=True,
                             env=env, timeout=60, cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    header = next(ln for ln in printed.stdout.splitlines() if ln.startswith("# Run with:"))
    command = tuple(header.removeprefix("# Run with: ").split())  # plain words here: no quoting to undo
    job = launch.dry_run(launch.site_for("sbatch", "testbed"), Options.given(
        {"nodes": 2}, kind="sbatch", script=str(script), script_args=("--lr", "1"), python=sys.executable,
        job_root=str(home / "jobs"), command=command))
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.text = ""  # type: ignore[misc]
    assert job.text == printed.stdout and job.root == home / "jobs" and job.spec.nodes == 2
    assert not home.exists()


def test_the_local_site_is_mpiruns_default_and_the_site_variable_sbatchs(monkeypatch):
    monkeypatch.setenv("SLURMTORCH_SITE", "testbed")
    assert launch.site_for("mpirun", None).name == "local"
    assert launch.site_for("sbatch", None).name == "testbed"


def test_a_job_records_the_folder_it_runs_in_its_chdir_if_given():
    from slurmtorch.usecases.launch import working_folder

    assert working_folder((), "/home/u/proj") == "/home/u/proj"
    assert working_folder((("chdir", "runs/a"), ("nodes", "2")), "/home/u/proj") == "/home/u/proj/runs/a"
    assert working_folder((("chdir", "/scratch/u"),), "/home/u/proj") == "/scratch/u"
