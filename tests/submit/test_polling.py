"""The pure pieces of waiting (issue 13): the back-off, the status line, squeue's times, and
which exit code a failed job reports. The testbed tests in tests/cli/test_waiting.py run
the same code against the real scheduler."""

from __future__ import annotations

import io

import pytest

from slurmtorch.submit.follow import polling
from slurmtorch.submit.jobfolder.failures import parse_failures, srun_exit_code
from slurmtorch.submit.jobfolder.jobstatus import JobStatus, clock, slurm_time
from slurmtorch.submit.follow.polling import Backoff
from slurmtorch.submit.jobfolder.report import exit_code
from slurmtorch.usecases import story
from slurmtorch.submit.follow.statusline import StatusLine


def calls_over(seconds: float, changes=(), nudges=()) -> list[float]:
    """The times a waiter asks the scheduler over `seconds` (ticks of 0.25 s), given when the
    job's state changes and when its folder nudges."""
    b, made, t = Backoff(), [], 0.0
    changes, nudges = sorted(changes), sorted(nudges)
    while t <= seconds:
        while nudges and nudges[0] <= t:
            nudges.pop(0)
            b.nudge()
        if b.due(t):
            changed = bool(changes and changes[0] <= t)
            while changes and changes[0] <= t:
                changes.pop(0)
            b.called(t, changed)
            made.append(t)
        t += 0.25
    return made


def test_the_back_off_starts_at_3_s_and_grows_to_one_call_every_30_s_while_nothing_changes():
    made = calls_over(600)
    gaps = [b - a for a, b in zip(made, made[1:])]
    assert gaps[0] == polling.MIN_S and gaps[1] == polling.MIN_S * polling.GROWTH
    assert all(b >= a for a, b in zip(gaps, gaps[1:])) and max(gaps) == polling.MAX_S
    assert len(made) <= 28  # ten minutes of an unchanging job: 8 calls to reach 30 s, then 2 a minute


def test_a_state_change_starts_the_back_off_again_and_a_nudge_never_comes_sooner_than_3_s():
    made = calls_over(120, changes=[60.0])
    after = [t for t in made if t >= 60]
    assert after[1] - after[0] == polling.MIN_S
    nudged = calls_over(10, nudges=[0.5, 1.0, 5.0])
    assert all(b - a >= polling.MIN_S for a, b in zip(nudged, nudged[1:]))
    assert nudged[:3] == [0.0, 3.0, 6.0]  # the nudge at 5 s brings the 7.5 s call forward to 6 s


def test_a_pending_and_a_running_job_are_described_with_their_wait_and_run_time():
    now = 1_000_000.0
    pending = JobStatus("7", "PENDING", reason="Priority", submitted=now - 42)
    running = JobStatus("7", "RUNNING", nodes="node[1-4]", submitted=now - 500, started=now - 190)
    assert pending.describe(now) == "PENDING (Priority) 0:42"
    assert running.describe(now) == "RUNNING on node[1-4] 3:10"
    assert running.describe(now, elapsed=False) == "RUNNING on node[1-4]"
    assert JobStatus("7", "PENDING", reason="None").describe(now) == "PENDING"
    assert [clock(s) for s in (5, 65, 3600 * 3 + 5, 86400 * 2 + 61)] == ["0:05", "1:05", "3:00:05", "2-00:01:01"]
    assert slurm_time("N/A") is None and slurm_time("Unknown") is None
    assert slurm_time("2026-11-24T20:00:05") - slurm_time("2026-11-24T20:00:00") == 5


def test_the_status_line_is_redrawn_in_place_on_a_terminal_and_steps_aside_for_output():
    out = io.StringIO()
    line = StatusLine(out, "7", live=True)
    line.show(JobStatus("7", "PENDING", reason="Priority", submitted=100.0), now=142.0)
    line.show(JobStatus("7", "PENDING", reason="Priority", submitted=100.0), now=142.0)  # unchanged: not redrawn
    line.before_output()
    line.close()
    assert out.getvalue() == "\r\x1b[Kjob 7: PENDING (Priority) 0:42\r\x1b[K"


def test_elsewhere_the_status_is_a_plain_line_per_change_without_control_characters():
    out = io.StringIO()
    line = StatusLine(out, "7", live=False)
    for status in (JobStatus("7", "PENDING", reason="None", submitted=1.0),
                   JobStatus("7", "PENDING", reason="Priority", submitted=1.0),
                   JobStatus("7", "PENDING", reason="Priority", submitted=1.0),
                   JobStatus("7", "RUNNING", nodes="node1", started=2.0),
                   JobStatus("7", "COMPLETED", exit_code=0)):
        line.show(status, now=100.0)
    assert out.getvalue() == "job 7: PENDING\njob 7: PENDING (Priority)\njob 7: RUNNING on node1\n"


@pytest.mark.parametrize("words, code", [("Exited with exit code 5", 5), ("Killed", 137), ("Terminated", 143),
                                         ("Segmentation fault", 139), ("something else", None)])
def test_srun_task_lines_give_the_tasks_exit_code(words, code):
    assert srun_exit_code(words) == code


TRACEBACK = "rank 1 on node2 failed:\nTraceback (most recent call last):\n  File \"t.py\", line 1\nValueError: bad\n"
SRUN_KILLED_STEP = ("srun: error: node2: task 1: Exited with exit code 1\n"
                    "srun: error: node1: task 0: Terminated\n")


def test_a_rank_that_raised_is_the_jobs_exit_1_and_srun_is_context(tmp_path):
    (tmp_path / "batch.out").write_text(SRUN_KILLED_STEP)
    (tmp_path / "rank-1.err").write_text(TRACEBACK)
    (tmp_path / "rank-0.err").write_text("")
    failed = JobStatus("9", "FAILED", exit_code=143, source="squeue")
    code, rank, job = exit_code(tmp_path, failed)
    assert (code, rank.rank, job) == (1, 1, 143)
    rep = story.report("9", tmp_path, failed)
    assert (rep.headline, rep.code) == ("job 9 FAILED (exit 1 from rank 1; the step exited 143)", 1)
    assert exit_code(tmp_path, JobStatus("9", "COMPLETED", exit_code=0)) == (0, None, 0)


def test_a_killed_rank_and_an_exit_n_keep_their_own_codes():
    killed = parse_failures("srun: error: node2: task 1: Killed\n", {0: "", 1: ""})
    assert [(f.rank, f.code) for f in killed if f.primary] == [(1, 137)]
    exited = parse_failures("srun: error: node2: task 1: Exited with exit code 5\n", {0: "", 1: ""})
    assert [(f.rank, f.code) for f in exited if f.primary] == [(1, 5)]


def test_without_a_rank_to_blame_the_jobs_own_code_stands(tmp_path):
    (tmp_path / "batch.out").write_text("")
    rep = story.report("9", tmp_path, JobStatus("9", "CANCELLED", exit_code=143))
    assert (rep.headline, rep.code) == ("job 9 CANCELLED (exit 143)", 143)


def test_one_squeue_call_answers_every_job_a_process_waits_for_and_none_is_asked_before_it_is_due(tmp_path):
    """Two jobs waited for in one process (a Distributor's, say): one call for both, and
    however often a caller asks, none sooner than the back-off allows."""
    import pwd
    import subprocess

    from slurmtorch.submit.follow.watch import Watch

    me = pwd.getpwuid(__import__("os").getuid()).pw_name
    root = tmp_path / "jobs"
    for j in ("11", "12"):
        (root / j).mkdir(parents=True)
    calls = []

    def runner(argv, check=True, timeout=60):
        calls.append(argv)
        rows = "".join(f"{j}|RUNNING|None|node1|2026-11-24T20:00:00|2026-11-24T20:00:05|{me}\n" for j in ("11", "12"))
        return subprocess.CompletedProcess(argv, 0, rows, "")

    now = [0.0]
    watch = Watch(clock=lambda: now[0])
    assert watch.status("11", root, runner=runner).state == "RUNNING"
    assert watch.status("12", root, runner=runner).state == "RUNNING"  # its own first look
    assert [c[-1] for c in calls] == ["11", "12"]
    for _ in range(100):  # asked every 10 ms for a second: answered from the last look
        now[0] += 0.01
        watch.status("11", root, runner=runner)
        watch.status("12", root, runner=runner)
    assert len(calls) == 2
    now[0] = polling.MIN_S + 0.5
    watch.status("11", root, runner=runner)
    assert len(calls) == 3 and calls[-1][-2:] == ["-j", "11,12"]  # both due: one call
    watch.status("12", root, runner=runner)
    assert len(calls) == 3
