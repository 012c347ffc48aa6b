"""The report every front end ends a failed job with (`--wait`, `logs`, `status`, `Job.result()`,
`Distributor.run()`): the first failing rank, its host, the line of the user's code that
raised, its exit code, and the command that shows its whole log, as typed where the user is.

Pure functions over texts as the bootstrap and srun write them; the testbed tests that see
every front end say it for real are in tests/cli/test_waiting.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from slurmtorch.errors import typed
from slurmtorch.submit.jobfolder import report
from slurmtorch.submit.jobfolder.failures import RankFailure, parse_failures
from slurmtorch.submit.jobfolder.tracebacks import user_frame

# As the bootstrap wrote it before its report started at the user's first frame (and as another
# launcher's or an older slurmtorch's still reads): its own frames, runpy's, the user's script,
# then torch's below the user's call.
PEER_LOST = """rank 0 on node1 failed:
Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/slurmtorch/bootstrap/runner.py", line 150, in main
    run_target(opts, info)
  File "/opt/venv/lib/python3.11/site-packages/slurmtorch/bootstrap/target.py", line 88, in run_target
    runpy.run_path(opts.script, run_name="__main__")
  File "<frozen runpy>", line 291, in run_path
  File "/home/ada/.slurmtorch/jobs/42/code/train.py", line 14, in <module>
    dist.all_reduce(t)
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 81, in wrapper
    return func(*args, **kwargs)
RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [198.18.0.13]:63725: \
Connection reset by peer
"""
RAISED = """rank 2 on node3 failed:
Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/slurmtorch/bootstrap/runner.py", line 150, in main
    run_target(opts, info)
  File "<frozen runpy>", line 291, in run_path
  File "/home/ada/.slurmtorch/jobs/42/code/train.py", line 20, in <module>
    step(batch)
  File "/home/ada/.slurmtorch/jobs/42/code/model/steps.py", line 9, in step
    raise ValueError("bad batch at step 3")
ValueError: bad batch at step 3
"""
BATCH = "srun: error: node3: task 2: Exited with exit code 1\nsrun: error: node1: task 0: Exited with exit code 1\n"


def test_the_users_own_frame_is_named_past_the_bootstraps_frames_above_it_and_torchs_below_it():
    assert user_frame(PEER_LOST) == "train.py:14"
    assert user_frame(RAISED) == "model/steps.py:9"


def test_a_script_run_in_place_keeps_its_path_and_a_report_without_user_code_names_none():
    text = 'Traceback (most recent call last):\n  File "/scratch/ada/run.py", line 3, in <module>\nKeyError: 1\n'
    assert user_frame(text) == "/scratch/ada/run.py:3"
    assert user_frame("error: MASTER_ADDR is not set\n") == ""
    torch_only = ('Traceback (most recent call last):\n  File "/usr/lib/python3/dist-packages/torch/x.py", '
                  'line 1, in f\nRuntimeError: no\n')
    assert user_frame(torch_only) == ""


def test_a_chained_traceback_names_the_frame_of_the_exception_that_ended_the_rank():
    chained = ('Traceback (most recent call last):\n  File "/s/a.py", line 2, in <module>\nKeyError: 1\n\n'
               "During handling of the above exception, another exception occurred:\n\n"
               'Traceback (most recent call last):\n  File "/s/a.py", line 4, in <module>\nValueError: 2\n')
    assert user_frame(chained) == "/s/a.py:4"


def job_folder(root: Path, *, torchrun: bool = False) -> Path:
    folder = root / "jobs" / "42"
    folder.mkdir(parents=True)
    (folder / "batch.out").write_text(BATCH)
    name = "node-{}.err" if torchrun else "rank-{}.err"
    (folder / name.format(0)).write_text(PEER_LOST)
    (folder / name.format(2)).write_text(RAISED)
    if torchrun:
        (folder / "job.json").write_text(json.dumps({"launcher": "torchrun", "nodes": 4, "ntasks_per_node": 1}))
    return folder


def test_a_failed_jobs_report_names_rank_host_line_exit_code_and_the_command_for_its_whole_log(
        tmp_path, monkeypatch):
    monkeypatch.delenv("SLURMTORCH_ON_CLUSTER", raising=False)
    assert report.failure_lines(job_folder(tmp_path)) == [
        "failed: rank 2 on node3: ValueError: bad batch at step 3 (at model/steps.py:9, exit 1)",
        "then failed: ranks 0 (node1): RuntimeError: Read error [198.18.0.13]:63725: Connection reset by peer",
        "rank 2's whole log: slurmtorch logs 42 --rank 2",
    ]


def test_a_trials_report_names_its_trial_and_a_torchrun_jobs_its_nodes_log(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURMTORCH_ON_CLUSTER", raising=False)
    failure = RankFailure(2, "node3", "ValueError: x", True, 1)
    assert report.log_command("42_3", failure, torchrun=False) == "slurmtorch logs 42 --trial 3 --rank 2"
    # torchrun writes one log per node: the one the rank reported in, else srun's task (its node)
    assert report.failure_lines(job_folder(tmp_path, torchrun=True))[-1] == \
        "rank 2's whole log: slurmtorch logs 42 --node 2"
    assert report.log_command("42", failure, torchrun=True) == "slurmtorch logs 42 --node 2"


def test_through_cluster_the_command_is_the_one_typed_on_the_laptop(tmp_path, monkeypatch):
    """serve sets SLURMTORCH_ON_CLUSTER to the laptop's name for the cluster."""
    monkeypatch.setenv("SLURMTORCH_ON_CLUSTER", "hpc")
    assert report.failure_lines(job_folder(tmp_path))[-1] == "rank 2's whole log: slurmtorch logs 42 --rank 2 --cluster hpc"
    assert typed("cancel 44", env={"SLURMTORCH_ON_CLUSTER": "hpc"}) == "slurmtorch cancel 44 --cluster hpc"
    assert typed("cancel 44", env={}) == "slurmtorch cancel 44"


def test_without_a_primary_failure_the_first_rank_reported_is_the_one_whose_log_is_named():
    failures = parse_failures("", {0: PEER_LOST})
    assert report.describe(failures, log=lambda f: f"slurmtorch logs 42 --rank {f.rank}") == [
        "failed: ranks 0 (node1): RuntimeError: Read error [198.18.0.13]:63725: Connection reset by peer",
        "rank 0's whole log: slurmtorch logs 42 --rank 0",
    ]


def test_the_sweep_table_keeps_the_end_of_each_trials_last_line():
    """Issue 44: the table cut rank 0's last line at 40 characters, so the loss at its end was lost."""
    from slurmtorch.submit.jobfolder.jobstatus import JobStatus, TrialStatus

    done = JobStatus("42_0", "COMPLETED", 0, started=100.0, ended=112.0)
    said = "trained on 4 ranks across nodes node1,node2,node3,node4 final loss 0.0123 (local rank 0)"
    rows = report.sweep_table([TrialStatus(0, {"lr": "1e-3"}, done)], {0: said})
    assert rows[1].endswith("final loss 0.0123 (local rank 0)"), rows
    assert rows[1].split()[:4] == ["0", "lr=1e-3", "COMPLETED", "0"], rows
    long = "x" * 500 + " loss 0.5"
    row = report.sweep_table([TrialStatus(0, {}, done)], {0: long})[1]
    assert row.endswith("x loss 0.5") and len(row) < 200, row  # a line of any length: its end, within a width


# What slurmstepd writes into batch.out when Slurm ends a job at its time limit (Slurm 22.05 and
# 24.11 alike), and srun's lines for the step's ranks it ended with it.
TIME_LIMIT = ("slurmstepd: error: *** JOB 42 ON node1 CANCELLED AT 2026-01-05T10:00:00 DUE TO TIME LIMIT ***\n"
              "srun: Job step aborted: Waiting up to 5 seconds for job step to finish.\n"
              "slurmstepd: error: *** STEP 42.0 ON node1 CANCELLED AT 2026-01-05T10:00:00 DUE TO TIME LIMIT ***\n"
              "srun: error: node1: tasks 0-1: Terminated\n")


def test_a_job_over_its_time_limit_says_so_with_the_limit_and_how_to_keep_the_run(tmp_path):
    folder = tmp_path / "jobs" / "42"
    folder.mkdir(parents=True)
    (folder / "batch.out").write_text(TIME_LIMIT)
    (folder / "rank-0.err").write_text(PEER_LOST)  # a peer's end, ended with it: not the cause
    (folder / "script.sh").write_text("#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --no-requeue\n"
                                      "#SBATCH --time=00:01:00\nsrun ...\n")
    lines = report.failure_lines(folder)
    assert lines[0] == "failed: the job ran past its time limit (--time 00:01:00) and Slurm ended it (TIMEOUT)"
    assert lines[1].startswith("tip: ask for more with --time, or save and go on: --signal USR1@60 runs the "
                               "slurmtorch.on_preempt hooks"), lines
    (folder / "script.sh").write_text("#!/bin/bash\n#SBATCH --no-requeue\n#SBATCH --signal=USR1@50\nsrun ...\n")
    assert report.failure_lines(folder) == [
        "failed: the job ran past its partition's default time limit and Slurm ended it (TIMEOUT)",
        "tip: --signal USR1@50 ran the on_preempt hooks, but the job could not be requeued (--no-requeue): "
        "without it, the job goes on from what its hooks saved"]
