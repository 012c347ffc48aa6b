"""Where a job runs and where its files go, on the real testbed (issue 36): each trial of a
sweep in its own working folder (a script resuming from a relative checkpoint trains every
trial, and `--wait` streams each trial's rank 0); relative outputs in the folder the job was
submitted from (or --chdir's), where a resubmission finds them; a script beside a data set
outside git runs. docs/users-guide.md#where-a-job-runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import read, st

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "tests" / "scripts" / "relative_resume.py"


def trained(text: str) -> list[str]:
    return [line for line in text.splitlines() if "trained " in line]


@pytest.mark.timeout(300)
def test_sweep_trials_never_see_each_others_relative_checkpoint_and_wait_streams_each(testbed, has_torch, tmp_path):
    home, submit_dir = tmp_path / "home", tmp_path / "sub"
    submit_dir.mkdir()
    argv = ["sbatch", "--site", "testbed", "-N", "1", "--sweep", "lr=1,2,3,4", "--array", "%1",
            "--wait", str(TRAIN), "3"]
    # %1: one trial at a time, so trial 0's ckpt.pt is there when trial 1 starts (the bug's order).
    proc = st(testbed, home, argv, cwd=str(submit_dir), timeout=240)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.splitlines()[0]
    assert f"job {job}: 4 of 4 trials succeeded" in proc.stderr
    for k in range(4):
        folder = submit_dir / "trials" / f"lr={k + 1}"
        assert f"[trial {k}] trained 3 epochs from 0 in {folder}" in proc.stdout, proc.stdout
        assert read(folder / "ckpt.pt") == "3\n"
    assert not (submit_dir / "ckpt.pt").exists() and not (home / "jobs" / job / "code" / "ckpt.pt").exists()

    again = st(testbed, home, argv, cwd=str(submit_dir), timeout=240)  # the same trials again: each resumes its own
    assert again.returncode == 0, again.stderr
    assert sorted(trained(again.stdout)) == sorted(f"[trial {k}] trained 0 epochs from 3 in "
                                                   f"{submit_dir / 'trials' / f'lr={k + 1}'}" for k in range(4))


@pytest.mark.timeout(240)
def test_relative_outputs_land_in_the_submission_folder_and_a_resubmission_resumes(testbed, has_torch, tmp_path):
    home, submit_dir, other = tmp_path / "home", tmp_path / "sub", tmp_path / "elsewhere"
    submit_dir.mkdir()
    other.mkdir()
    argv = ["sbatch", "--site", "testbed", "-N", "1", "--wait", str(TRAIN), "2", "outputs/ckpt.pt"]
    first = st(testbed, home, argv, cwd=str(submit_dir), timeout=120)
    assert first.returncode == 0, first.stderr
    assert trained(first.stdout) == [f"trained 2 epochs from 0 in {submit_dir}"]
    assert read(submit_dir / "outputs" / "ckpt.pt") == "2\n"
    assert not list((home / "jobs").glob("*/code/outputs"))

    second = st(testbed, home, argv, cwd=str(submit_dir), timeout=120)
    assert trained(second.stdout) == [f"trained 0 epochs from 2 in {submit_dir}"], second.stderr

    moved = st(testbed, home, [*argv[:5], f"--sbatch-arg=--chdir={other}", *argv[5:]], cwd=str(submit_dir),
               timeout=120)
    assert trained(moved.stdout) == [f"trained 2 epochs from 0 in {other}"], moved.stderr
    assert read(other / "outputs" / "ckpt.pt") == "2\n"


@pytest.mark.timeout(240)
def test_a_script_beside_a_big_data_set_outside_git_runs_and_says_what_was_copied(testbed, has_torch, tmp_path):
    home, root = tmp_path / "home", tmp_path / "exp"
    (root / "data").mkdir(parents=True)
    for i in range(20_001):
        (root / "data" / f"{i}.txt").write_text(f"{i}\n")
    (root / "helper.py").write_text("NAME = 'helper'\n")
    (root / "train.py").write_text("import helper\nprint(helper.NAME, open('data/20000.txt').read().strip())\n")
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "1", "--wait", "train.py"],
              cwd=str(root), timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert (f"slurmtorch: snapshot: {root} is not a git work tree and holds more than 20000 files: copied its "
            "Python code only (2 .py files") in proc.stderr
    assert "helper 20000" in proc.stdout
