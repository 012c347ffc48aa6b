"""What a restarted script reads to resume (restart_count, checkpoint_dir), and the heartbeat
its rank writes for the supervisor (--hang-timeout). Pure or in-process; the testbed runs are
tests/submit/test_recovery.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

import slurmtorch
from slurmtorch.bootstrap.preempt import checkpoint_dir, restart_count
from slurmtorch.submit.jobfolder.heartbeats import parse_beat


@pytest.mark.parametrize("env, count", [
    ({}, 0), ({"SLURM_RESTART_COUNT": "2"}, 2),
    ({"SLURMTORCH_RESTART_COUNT": "3", "SLURM_RESTART_COUNT": "1"}, 3),  # the supervisor counts every start
    ({"SLURMTORCH_RESTART_COUNT": "", "SLURM_RESTART_COUNT": "1"}, 1), ({"SLURM_RESTART_COUNT": "x"}, 0),
])
def test_restart_count_counts_restarts_in_the_allocation_and_requeues(env, count):
    assert restart_count(env) == count


def test_the_checkpoint_folder_is_the_job_folders_and_survives_restarts(tmp_path):
    folder = checkpoint_dir({"SLURMTORCH_JOB_DIR": str(tmp_path / "123")})
    assert folder == tmp_path / "123" / "checkpoints" and folder.is_dir()
    assert checkpoint_dir({"SLURMTORCH_JOB_DIR": str(tmp_path / "123")}) == folder  # made once, found again
    assert checkpoint_dir({"SLURMTORCH_CHECKPOINT_DIR": str(tmp_path / "mine")}) == tmp_path / "mine"
    assert slurmtorch.checkpoint_dir is checkpoint_dir and slurmtorch.restart_count is restart_count


def _rank(tmp_path, body: str) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import os, sys, time
        os.environ.update(SLURMTORCH_JOB_DIR={str(tmp_path)!r}, SLURMTORCH_HEARTBEAT_S="0.2")
        from slurmtorch.bootstrap import heartbeat
        heartbeat.start(3, "nodeX")
    """) + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code])


def _beat(tmp_path, timeout=20.0):
    path = tmp_path / ".heartbeat" / "rank-3"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            beat = parse_beat(path.read_text())
            if beat is not None:
                return beat
        time.sleep(0.05)
    raise AssertionError("no heartbeat written")


def test_a_rank_stuck_in_its_own_code_beats_own_and_unmoved(tmp_path):
    proc = _rank(tmp_path, "time.sleep(30)\n")
    try:
        _beat(tmp_path)
        time.sleep(0.6)  # past the main thread's last statements before its sleep
        first = _beat(tmp_path)
        deadline = time.monotonic() + 20
        while (later := _beat(tmp_path)).written <= first.written + 0.5:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert (later.place, later.rank, later.host) == ("own", 3, "nodeX")
        assert later.unmoved_since == first.unmoved_since  # the main thread has not moved: one sleep
    finally:
        proc.kill()
        proc.wait()


def test_a_rank_that_ends_takes_its_heartbeat_away(tmp_path):
    proc = _rank(tmp_path, "time.sleep(1)\nheartbeat.stop(3)\ntime.sleep(1)\n")
    _beat(tmp_path)
    assert proc.wait(timeout=30) == 0
    assert not (tmp_path / ".heartbeat" / "rank-3").exists()


def test_no_heartbeat_unless_the_job_asked_for_one(tmp_path):
    from slurmtorch.bootstrap import heartbeat

    assert heartbeat.start(0, "h", {"SLURMTORCH_JOB_DIR": str(tmp_path)}) is None
    assert heartbeat.start(0, "h", {"SLURMTORCH_HEARTBEAT_S": "1"}) is None
    assert not (tmp_path / ".heartbeat").exists()
