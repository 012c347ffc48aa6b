"""Tips right for where the user typed (issue 36): through `--cluster NAME` the cluster's side
names commands as typed on the laptop (errors.typed), and a laptop without Slurm is told to
go through `--cluster`, not to use a `--dry-run` that only sbatch has.

The same over a real SSH relay (Ctrl-C on `--wait --cluster`): tests/remote/test_remote_testbed.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtorch.errors import typed
from slurmtorch.submit.edge.runner import not_found_tip
from slurmtorch.submit.follow.waiting import interrupted


def test_a_command_names_the_cluster_where_a_verb_reads_it_and_before_a_scripts_words():
    assert typed("cancel 44", "hpc") == "slurmtorch cancel 44 --cluster hpc"
    # after SCRIPT, words are the script's: --cluster goes right after the verb
    assert typed("sbatch train.py --lr 0.1", "hpc") == "slurmtorch sbatch --cluster hpc train.py --lr 0.1"
    assert typed("sbatch", env={"SLURMTORCH_ON_CLUSTER": "hpc"}) == "slurmtorch sbatch --cluster hpc"
    assert typed("status 44", env={"SLURMTORCH_ON_CLUSTER": "1"}) == "slurmtorch status 44"  # name unknown


def test_ctrl_c_on_a_wait_relayed_from_a_laptop_names_the_cancel_typed_there(monkeypatch):
    """Before: "slurmtorch cancel 44 stops it", which on the laptop found no squeue."""
    monkeypatch.setenv("SLURMTORCH_ON_CLUSTER", "hpc")
    assert interrupted("44", None, cancel=False).message == \
        "job 44 is still queued or running; slurmtorch cancel 44 --cluster hpc stops it"
    monkeypatch.delenv("SLURMTORCH_ON_CLUSTER")
    assert interrupted("44", None, cancel=False).message == "job 44 is still queued or running; slurmtorch cancel 44 stops it"


def test_only_sbatch_is_told_of_dry_run_when_slurm_is_not_here():
    assert "--dry-run" in not_found_tip("sbatch") and "--cluster NAME" in not_found_tip("sbatch")
    assert "--dry-run" not in not_found_tip("squeue") and "--cluster NAME" in not_found_tip("squeue")


@pytest.mark.parametrize("argv", [["status", "42"], ["cancel", "42"], ["logs", "42", "--follow"], ["top", "42"]],
                         ids=lambda a: a[0])
def test_a_verb_that_asks_slurm_on_a_laptop_without_it_suggests_cluster_not_dry_run(tmp_path, argv):
    home = tmp_path / "home"
    (home / "jobs" / "42").mkdir(parents=True)
    env = {"HOME": str(tmp_path), "PATH": os.path.dirname(sys.executable), "SLURMTORCH_HOME": str(home),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.cli.main", *argv], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode != 0
    assert proc.stderr.splitlines() == [
        "error: squeue not found on PATH",
        "tip: run this on a Slurm login node, or reach one from here with --cluster NAME "
        "(~/.config/slurmtorch/clusters.yaml)"], proc.stderr
