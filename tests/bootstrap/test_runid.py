"""One run across restarts: the run id (pure, and from a job folder), the trackers' variables the
bootstrap sets from it, and on the testbed a job whose wandb, MLflow and TensorBoard runs stay
one run through a --max-restarts restart and a requeue (the trackers offline, for real)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import slurmtorch
from conftest import REPO, need
from slurmtorch.bootstrap.runid import compose, read_token, run_env, run_id
from slurmtorch.submit.jobfolder import jobdir

SCRIPTS = REPO / "tests" / "scripts"
# wandb, MLflow and TensorBoard live in a venv of their own that sees .venv's packages
# (scripts/setup says why); a job submitted with its python runs its ranks with it.
TRACKERS_PY = REPO / ".venv-trackers" / "bin" / "python"


# --------------------------------------------------------------------------- the id


def test_the_run_id_is_the_job_id_and_the_token_an_array_task_as_slurm_writes_it():
    assert compose("/h/jobs/1234", "0a1b2c3d") == "1234-0a1b2c3d"
    assert compose("/h/jobs/1234/", "0a1b2c3d") == "1234-0a1b2c3d"
    assert compose("/h/jobs/1234/trial-3", "0a1b2c3d") == "1234_3-0a1b2c3d"
    assert compose("/h/jobs/.submitting-ab12", "0a1b2c3d") is None  # not a job's folder
    assert compose("/somewhere/trial-3", "0a1b2c3d") is None


def test_every_job_folder_gets_its_own_private_token_once(tmp_path):
    first = jobdir.make_temp(tmp_path, "#!/bin/bash\n", job={"launcher": "srun"})
    second = jobdir.make_temp(tmp_path, "#!/bin/bash\n", trials={"array": "0-1", "sweep": [], "trials": {"0": {}}})
    tokens = [read_token(str(f)) for f in (first, second)]
    assert all(re.fullmatch(r"[0-9a-f]{8}", t) for t in tokens) and tokens[0] != tokens[1]
    assert stat.S_IMODE((first / "run-token").stat().st_mode) == 0o600
    assert read_token(str(second / "trial-0")) == tokens[1]  # a trial reads its array job's


def test_every_start_of_a_job_reads_the_same_id_and_other_jobs_another(tmp_path):
    folder = tmp_path / "1234"
    folder.mkdir()
    (folder / "run-token").write_text("0a1b2c3d\n")
    env = {"SLURMTORCH_JOB_DIR": str(folder), "SLURM_RESTART_COUNT": "0"}
    assert run_id(env) == "1234-0a1b2c3d"
    assert run_id({**env, "SLURM_RESTART_COUNT": "1", "SLURMTORCH_RESTART_COUNT": "2"}) == "1234-0a1b2c3d"
    (folder / "trial-0").mkdir()
    assert run_id({"SLURMTORCH_JOB_DIR": str(folder / "trial-0")}) == "1234_0-0a1b2c3d"
    assert slurmtorch.run_id is run_id


@pytest.mark.parametrize("token", [None, "", "not-hex!", "0a1b"])
def test_a_job_without_a_valid_token_has_no_run_id(tmp_path, token):
    folder = tmp_path / "1234"
    folder.mkdir()
    if token is not None:
        (folder / "run-token").write_text(token)
    assert run_id({"SLURMTORCH_JOB_DIR": str(folder)}) is None
    assert run_id({}) is None  # not a slurmtorch job at all


# --------------------------------------------------------------------------- the trackers' variables

RUN = "1234-0a1b2c3d"


def test_rank_0_resumes_the_runs_wandb_run_and_every_other_rank_its_own():
    assert run_env(RUN, 0, {}) == {"SLURMTORCH_RUN_ID": RUN, "WANDB_RUN_ID": RUN, "WANDB_RESUME": "allow"}
    assert run_env(RUN, 3, {})["WANDB_RUN_ID"] == f"{RUN}-rank3"
    assert "MLFLOW_RUN_ID" not in run_env(RUN, 0, {})  # it must name a run MLflow made


@pytest.mark.parametrize("user", [
    {"WANDB_RUN_ID": "mine"}, {"WANDB_RESUME": "must"}, {"WANDB_RESUME": "never"},
    {"WANDB_SWEEP_ID": "abc"},  # a W&B sweep names its own runs
])
def test_wandb_variables_the_user_chose_are_left_alone(user):
    assert run_env(RUN, 0, user) == {"SLURMTORCH_RUN_ID": RUN}


def test_wandb_resume_allow_alone_still_gets_the_run_id():
    assert run_env(RUN, 0, {"WANDB_RESUME": "allow"})["WANDB_RUN_ID"] == RUN


def test_what_a_parent_job_set_is_replaced_by_this_jobs_own():
    parent = {"SLURMTORCH_RUN_ID": "77-ffffffff", "WANDB_RUN_ID": "77-ffffffff-rank2", "WANDB_RESUME": "allow"}
    assert run_env(RUN, 0, parent) == {"SLURMTORCH_RUN_ID": RUN, "WANDB_RUN_ID": RUN, "WANDB_RESUME": "allow"}
    assert run_env(None, 0, parent) == {"SLURMTORCH_RUN_ID": None, "WANDB_RUN_ID": None, "WANDB_RESUME": None}
    assert run_env(None, 0, {}) == {}


def test_the_bootstrap_exports_the_run_id_to_the_script(tmp_path):
    folder = tmp_path / "1234"
    folder.mkdir()
    (folder / "run-token").write_text("0a1b2c3d\n")
    script = tmp_path / "show.py"
    script.write_text("import os\nprint(os.environ.get('SLURMTORCH_RUN_ID'), os.environ.get('WANDB_RUN_ID'),"
                      " os.environ.get('WANDB_RESUME'))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "SLURM"))}
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.bootstrap", "--from", "single", "--no-init", str(script)],
                          env={**env, "SLURMTORCH_JOB_DIR": str(folder)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1234-0a1b2c3d", "1234-0a1b2c3d", "allow"]


# --------------------------------------------------------------------------- the trackers, for real


def wait_for(predicate, what: str, timeout: float = 240):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)
    return value


def read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.mark.timeout(420)
def test_wandb_mlflow_and_tensorboard_keep_one_run_across_a_restart_and_a_requeue(testbed, has_torch, tmp_path):
    need(TRACKERS_PY.exists(), "no trackers' venv (.venv-trackers: run scripts/setup)")
    home, out, steps = tmp_path / "home", tmp_path / "trackers", 9
    out.mkdir()
    sub = testbed.run([TRACKERS_PY, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed", "-N", "1", "-t", "10",
                       "--max-restarts", "2", SCRIPTS / "tracked_train.py", out, steps],
                      env={"SLURMTORCH_HOME": str(home)}, timeout=60)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.split()[0]
    folder = home / "jobs" / job
    run = f"{job}-{(folder / 'run-token').read_text().strip()}"
    t0 = time.monotonic()
    try:
        # Start 0 fails at step 3 and the supervisor restarts it; start 1 logs on to step 6 and
        # waits there: requeue the job as preemption or an admin would.
        wait_for(lambda: "waiting to be requeued at step 6" in read(folder / "rank-0.out"), "start 1 to reach step 6")
        t1 = time.monotonic()
        requeue = testbed.run(["scontrol", "requeue", job])
        assert requeue.returncode == 0, requeue.stderr
        wait_for(lambda: "start 2 run" in read(folder / "rank-0.out"), "start 2 to log")
        t2 = time.monotonic()
        wait_for(lambda: testbed.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip() in ("", "COMPLETED",
                                                                                                 "FAILED"),
                 "the job to end")
        print(f"\nstarts 0-1: {t1 - t0:.1f} s, requeue to start 2 logging: {t2 - t1:.1f} s, "
              f"to the end: {time.monotonic() - t2:.1f} s")
    finally:
        testbed.run(["scancel", job])
    rank0 = read(folder / "rank-0.out")
    assert f"done at step {steps}" in rank0, read(folder / "batch.out") + rank0 + read(folder / "rank-0.err")
    assert "Restarts=1" in testbed.run(["scontrol", "-o", "show", "job", job]).stdout  # the requeue happened

    # Every start saw the job's one run id, and resumed where the last one's checkpoint left off.
    starts = re.findall(r"^start (\d) run (\S+) from step (\d+) wandb (\S+) mlflow (\S+)$", rank0, re.MULTILINE)
    assert [s[:4] for s in starts] == [("0", run, "0", run), ("1", run, "3", run), ("2", run, "6", run)]

    # What each tracker recorded, read back with its own reader: one run, the steps carrying on.
    shown = subprocess.run([TRACKERS_PY, SCRIPTS / "tracker_runs.py", out, run], capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    got = json.loads(shown.stdout)
    # wandb offline: one folder per start, each of the one run id.
    assert got["wandb"] == [{"ids": [run], "steps": [0, 1, 2]}, {"ids": [run], "steps": [3, 4, 5]},
                            {"ids": [run], "steps": [6, 7, 8]}]
    # MLflow: one run, found again by its tag in every start.
    assert got["mlflow"] == [{"id": starts[0][4], "tag": run, "steps": list(range(steps))}]
    assert {s[4] for s in starts} == {starts[0][4]}
    # TensorBoard: one folder, the run id's.
    assert got["tensorboard"] == {"folders": [run], "steps": list(range(steps))}
