"""Daily use on a busy cluster (issue 13), on the real testbed: polite polling, the state while
waiting, Ctrl-C, the failing rank's exit code, cancel's errors, status lists and JSON.

Scheduler calls are counted by wrappers put first on PATH that log each call and exec the
real squeue/scontrol/sacct: what is counted is what slurmtorch asked the real controller.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import st
from slurmtorch.submit.follow import polling

COUNTED = ("squeue", "scontrol", "sacct")

TICKS = """\
import sys, time
for i in range(int(sys.argv[1])):
    print("tick", i, flush=True)
    time.sleep(float(sys.argv[2]))
"""

# Rank 1 of two fails as asked (argv[1]): raise (a message of several lines, chained to the
# KeyError it was raised from, as DDP's and data loaders' are), exit N, or kill itself with
# SIGKILL; rank 0 waits in a collective until srun ends the step.
FAILS = """\
import os, signal, sys
import torch, torch.distributed as dist
dist.all_reduce(torch.ones(1))
if dist.get_rank() == 1:
    how = sys.argv[1]
    if how == "raise":
        try:
            {}["batch"]
        except KeyError as exc:
            raise ValueError("bad batch\\nIn addition, you can set BATCH_DEBUG=1 to print it") from exc
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.exit(int(how))
dist.all_reduce(torch.ones(1))
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def counted(testbed, tmp_path: Path):
    """PATH with counting wrappers of squeue, scontrol and sacct; returns (env, read_calls)."""
    wrappers, log = tmp_path / "counted", tmp_path / "calls.log"
    wrappers.mkdir()
    for name in COUNTED:
        real = shutil.which(name, path=testbed.env["PATH"])
        assert real, f"{name} is not on the testbed's PATH"
        (wrappers / name).write_text(f'#!/bin/sh\necho "{name} $*" >>"{log}"\nexec "{real}" "$@"\n')
        (wrappers / name).chmod(0o755)

    def calls() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    return {"PATH": f"{wrappers}{os.pathsep}{testbed.env['PATH']}"}, calls


def script(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def waiter(testbed, home: Path, argv: list[str], **env) -> subprocess.Popen:
    """`slurmtorch ARGV` in a process group of its own (so a test can Ctrl-C it as a terminal
    would), with SIGINT, TERM and HUP at their defaults (a shell may start background jobs
    ignoring SIGINT, and a runner under nohup ignores HUP: slurmtorch rightly keeps an ignored
    signal ignored, so a test of what the signal does must start the waiter with it live)."""
    return subprocess.Popen([testbed.python, "-m", "slurmtorch.cli.main", *argv],
                            env={**testbed.env, "SLURMTORCH_HOME": str(home), **env}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=live_signals)


def live_signals() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def first_tick(proc: subprocess.Popen) -> str:
    """The job id a waiter printed, once its job has printed `tick 0` (it runs)."""
    job_id = proc.stdout.readline().strip()
    assert job_id.isdigit(), proc.stderr.read() if proc.poll() is not None else job_id
    while "tick 0" not in proc.stdout.readline():
        pass
    return job_id


def squeue_state(testbed, job_id: str) -> str:
    return testbed.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"]).stdout.strip()


@pytest.mark.timeout(120)
@pytest.mark.slurm_versions
def test_a_wait_asks_the_scheduler_no_more_often_than_the_back_off_and_shows_why_the_job_pends(
        testbed, home, tmp_path, counted):
    """A job held 5 s by --begin (reason BeginTime), then running ~12 s: the wait ends with the
    job, prints the pending reason, and makes scheduler calls (squeue, scontrol, sacct, releasing
    the held submission included) no more often than one per MIN_S, with two to spare. The
    back-off's growth over a long wait is pure (tests/submit/test_polling.py); a poller asking
    every second would make about 17 calls here."""
    env, calls = counted
    ticks = script(tmp_path, "ticks.py", TICKS)
    start = time.monotonic()
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "1", "--begin", "now+5", "--wait",
                              str(ticks), "4", "3"], env=env, timeout=100)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1:] == [f"tick {i}" for i in range(4)]
    job_id = proc.stdout.split()[0]
    assert f"job {job_id}: PENDING (BeginTime)" in proc.stderr.splitlines()
    assert f"job {job_id}: RUNNING on node" in proc.stderr
    assert f"job {job_id} COMPLETED (exit 0)" in proc.stderr
    made = calls()
    assert took >= 15, took  # it waited out the hold and the run
    assert len(made) <= took / polling.MIN_S + 2, (took, made)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cancel", [False, True], ids=["runs-on", "cancel-on-interrupt"])
def test_ctrl_c_on_wait_says_the_job_runs_on_or_cancels_it_when_asked(testbed, home, tmp_path, cancel):
    extra = ["--cancel-on-interrupt"] if cancel else []
    proc = waiter(testbed, home, ["sbatch", "--site", "testbed", "-N", "1", "--wait", *extra,
                                  str(script(tmp_path, "ticks.py", TICKS)), "60", "1"])
    job_id = ""
    try:
        job_id = first_tick(proc)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        if cancel:
            assert f"slurmtorch: job {job_id} cancelled (it was running), as --cancel-on-interrupt asked" in err
            assert squeue_state(testbed, job_id) in ("CANCELLED", "COMPLETING"), err
        else:
            assert f"slurmtorch: job {job_id} is still running; slurmtorch cancel {job_id} stops it" in err
            assert squeue_state(testbed, job_id) == "RUNNING"
            follow = waiter(testbed, home, ["logs", job_id, "--follow"])
            time.sleep(2)
            os.killpg(follow.pid, signal.SIGINT)
            _, ferr = follow.communicate(timeout=30)
            assert follow.returncode == 130 and f"job {job_id} is still running" in ferr, ferr
    finally:
        if proc.poll() is None:
            proc.kill()
        if job_id.isdigit():
            testbed.run(["scancel", job_id])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["term", "hup"])
def test_term_or_hup_on_wait_says_the_job_runs_on_and_exits_128_plus_the_signal(testbed, home, tmp_path, signum):
    """A batch system's TERM (or a closed terminal's HUP) sent to the waiter alone, not its
    job: one line says the job goes on, as Ctrl-C's does; the job is still RUNNING."""
    proc = waiter(testbed, home, ["sbatch", "--site", "testbed", "-N", "1", "--wait",
                                  str(script(tmp_path, "ticks.py", TICKS)), "60", "1"])
    job_id = ""
    try:
        job_id = first_tick(proc)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signum, err
        name = signal.Signals(signum).name
        assert err.splitlines()[-1] == (f"slurmtorch: stopped waiting ({name}): job {job_id} is still running; "
                                        f"slurmtorch cancel {job_id} stops it"), err
        assert squeue_state(testbed, job_id) == "RUNNING"
    finally:
        if proc.poll() is None:
            proc.kill()
        if job_id.isdigit():
            testbed.run(["scancel", job_id])


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how, code", [("raise", 1), ("5", 5), ("kill", 137)], ids=["exception", "exit-5", "sigkill"])
@pytest.mark.slurm_versions
def test_wait_status_and_follow_give_the_failing_ranks_own_exit_code(testbed, has_torch, home, tmp_path, how, code):
    """Not srun's 143 for the step it ended: 1 for an exception, n for sys.exit(n), 128+9 for
    a SIGKILL, as a local run would; srun's is named as context."""
    fails = script(tmp_path, "fails.py", FAILS)
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "2", "--wait", str(fails), how], timeout=200)
    assert proc.returncode == code, proc.stderr
    job_id = proc.stdout.split()[0]
    assert f"job {job_id} FAILED (exit {code} from rank 1" in proc.stderr
    status = st(testbed, home, ["status", job_id, "--json"])
    (record,) = json.loads(status.stdout)
    assert (record["state"], record["exit_code"], record["failed_rank"]) == ("FAILED", code, 1), record
    table = st(testbed, home, ["status", "--state", "FAILED"]).stdout.splitlines()
    row = next(line.split() for line in table if line.startswith(f"{job_id} "))  # the table names the rank
    assert row[1:3] == ["fails", "FAILED"] and row[4:10] == [str(code), "0", "rank", "1", "on", "node2"], table
    follow = st(testbed, home, ["logs", job_id, "--follow"])
    assert follow.returncode == code, follow.stderr


@pytest.mark.timeout(300)
def test_wait_logs_follow_and_status_end_a_failed_job_with_the_same_report(testbed, has_torch, home, tmp_path):
    """Issue 36: `logs --follow` ended with rank 0's output and exit 1, no report; now every
    front end ends with the same one: the first failing rank, its host, the line of the
    user's code that raised, the exit code, and the command that shows its whole log.
    Issue 44: the exception is Python's last line (`TYPE: first line`) of the one that ended
    the rank, not its message's last line, and the file is the user's, not the job's copy."""
    fails = script(tmp_path, "fails.py", FAILS)
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "2", "--wait", str(fails), "raise"], timeout=200)
    assert proc.returncode == 1, proc.stderr
    job_id = proc.stdout.split()[0]
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith(("slurmtorch: failed: ", "slurmtorch: then failed: "))
            or "'s whole log: " in ln]
    assert re.fullmatch(rf"slurmtorch: failed: rank 1 on node\d: ValueError: bad batch \(at {re.escape(str(fails))}:10, "
                        r"exit 1\)", said[0]), proc.stderr
    assert said[-1] == f"slurmtorch: rank 1's whole log: slurmtorch logs {job_id} --rank 1", proc.stderr
    follow = st(testbed, home, ["logs", job_id, "--follow"])
    assert follow.returncode == 1, follow.stderr
    assert f"job {job_id} FAILED (exit 1 from rank 1" in follow.stderr
    assert follow.stderr.splitlines()[-len(said):] == said, follow.stderr
    status = st(testbed, home, ["status", job_id])
    assert status.stdout.splitlines()[-len(said):] == [ln.removeprefix("slurmtorch: ") for ln in said], status.stdout
    whole = st(testbed, home, ["logs", job_id, "--rank", "1"])
    assert 'raise ValueError("bad batch' in whole.stderr and "BATCH_DEBUG=1" in whole.stderr, whole.stderr
    assert f"{home}/jobs/{job_id}/code/fails.py" in whole.stderr  # the traceback names the copy that ran


@pytest.mark.timeout(150)
def test_a_job_over_its_time_limit_ends_with_the_limit_and_a_tip(testbed, home, tmp_path):
    """Issue 44: a TIMEOUT job said nothing of its time limit. Slurm counts limits in minutes and
    looks at running jobs every 30 s, so the job (`-t 1`) is moved to its end at once
    (`scontrol update EndTime=now`, as root may): Slurm's own time-out follows within seconds."""
    proc = waiter(testbed, home, ["sbatch", "--site", "testbed", "-N", "1", "-t", "1", "--wait",
                                  str(script(tmp_path, "ticks.py", TICKS)), "120", "1"])
    job_id = ""
    try:
        job_id = first_tick(proc)
        now = time.strftime("%Y-%m-%dT%H:%M:%S")
        moved = testbed.run(["scontrol", "update", f"JobId={job_id}", f"EndTime={now}"])
        assert moved.returncode == 0, moved.stderr
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        if job_id.isdigit():
            testbed.run(["scancel", job_id])
    assert f"job {job_id} TIMEOUT" in err, err
    said = [ln.removeprefix("slurmtorch: ") for ln in err.splitlines() if ln.startswith(("slurmtorch: failed: ",
                                                                                         "slurmtorch: tip: "))]
    assert said == ["failed: the job ran past its time limit (--time 1) and Slurm ended it (TIMEOUT)",
                    "tip: ask for more with --time, or save and go on: --signal USR1@60 runs the slurmtorch.on_preempt "
                    "hooks 60 s before the limit and requeues the job, which resumes where slurmtorch.restart_count() "
                    "> 0"], err
    assert "stacks as the ranks ended:" in err, err  # where the ranks stood as time ran out
    status = st(testbed, home, ["status", job_id])
    assert "state=TIMEOUT" in status.stdout and status.stdout.splitlines()[1:3] == said, status.stdout


@pytest.mark.timeout(120)
@pytest.mark.slurm_versions
def test_cancel_refuses_unknown_and_ended_jobs_and_cancels_a_running_one(testbed, home, tmp_path):
    unknown = st(testbed, home, ["cancel", "987654"])
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("error: job 987654 is not known to Slurm"), unknown.stderr
    ticks = script(tmp_path, "ticks.py", TICKS)
    done = st(testbed, home, ["sbatch", "--site", "testbed", "--wait", str(ticks), "1", "0"])
    assert done.returncode == 0, done.stderr
    ended = st(testbed, home, ["cancel", done.stdout.split()[0]])
    assert ended.returncode == 1 and "has already ended (COMPLETED); nothing to cancel" in ended.stderr
    running = st(testbed, home, ["sbatch", "--site", "testbed", "--parsable", str(ticks), "60", "1"])
    job_id = running.stdout.strip()
    assert job_id.isdigit() and running.stderr == "", (running.stdout, running.stderr)  # --parsable: the id alone
    cancel = st(testbed, home, ["cancel", job_id])
    assert cancel.returncode == 0, cancel.stderr
    assert cancel.stderr.startswith(f"job {job_id} cancelled (it was ")


@pytest.mark.timeout(120)
@pytest.mark.slurm_versions
def test_status_lists_my_jobs_newest_first_and_as_json(testbed, home, tmp_path):
    ticks = script(tmp_path, "ticks.py", TICKS)
    done = st(testbed, home, ["sbatch", "--site", "testbed", "--wait", str(ticks), "1", "0"]).stdout.split()[0]
    pending = st(testbed, home, ["sbatch", "--site", "testbed", "--begin", "now+300", "--parsable", str(ticks),
                                 "1", "0"]).stdout.strip()
    try:
        table = st(testbed, home, ["status"])
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].split() == ["JOBID", "NAME", "STATE", "ELAPSED", "EXIT", "RESTARTS", "NODES", "/", "REASON", "/",
                                    "FAILED", "RANK"]
        rows = [ln.split() for ln in lines[1:]]
        assert [r[0] for r in rows] == [pending, done], table.stdout
        assert rows[0][1:4] == ["ticks", "PENDING", "-"], table.stdout
        assert rows[1][1:3] == ["ticks", "COMPLETED"] and re.fullmatch(r"\d+:\d\d", rows[1][3]), table.stdout
        # the node Slurm ran it on: whichever was free (24.11 once chose node2 while node1 was busy)
        ran_on = re.search(r"\bNodeList=(\S+)", testbed.run(["scontrol", "show", "job", done]).stdout)
        assert ran_on and rows[1][4:] == ["0", "0", ran_on.group(1)], table.stdout
        only = st(testbed, home, ["status", "--state", "pending"]).stdout.splitlines()[1:]
        assert [ln.split()[0] for ln in only] == [pending]
        records = json.loads(st(testbed, home, ["status", "--json"]).stdout)
        assert [(r["job_id"], r["state"]) for r in records] == [(pending, "PENDING"), (done, "COMPLETED")]
        assert records[0]["reason"] in ("BeginTime", "None", "") and records[1]["exit_code"] == 0
        both = st(testbed, home, ["status", done, pending])
        assert [ln.split()[:2] for ln in both.stdout.splitlines()] == [
            [f"job={done}", "state=COMPLETED"], [f"job={pending}", "state=PENDING"]]
        with_unknown = st(testbed, home, ["status", done, "987654"])  # the known one still shown; exit 1
        assert with_unknown.returncode == 1 and with_unknown.stdout.startswith(f"job={done} state=COMPLETED")
        assert with_unknown.stderr.startswith("error: job 987654 is unknown to squeue")
    finally:
        testbed.run(["scancel", pending])


def plant_unreadable_folders(jobs: Path) -> dict[str, str]:
    """Job folders no one (root included) can read as a job's: id -> what is wrong."""
    (jobs / "900001").symlink_to(jobs / "gone")  # a dangling link
    (jobs / "900002").write_text("not a folder\n")
    (jobs / "900003").mkdir()
    (jobs / "900003" / "trials.json").mkdir()  # a folder where a file should be
    (jobs / "900004").mkdir()
    (jobs / "900004" / "trials.json").write_bytes(b"\xff\xfe{not json")
    (jobs / "900005").mkdir()
    (jobs / "900005" / "exit-code").mkdir()
    (jobs / "900005" / "rank-0.err").symlink_to("/nonexistent")
    return {"900001": "900001 is a link to nothing", "900002": "is not a folder",
            "900003": "900003/trials.json: not a plain file (a folder)", "900004": "900004/trials.json: not JSON"}


@pytest.mark.timeout(120)
def test_status_skips_an_unreadable_job_folder_with_a_note_and_shows_the_rest(testbed, home, tmp_path):
    ticks = script(tmp_path, "ticks.py", TICKS)
    done = st(testbed, home, ["sbatch", "--site", "testbed", "--wait", str(ticks), "1", "0"]).stdout.split()[0]
    bad = plant_unreadable_folders(home / "jobs")
    table = st(testbed, home, ["status"])
    assert table.returncode == 0, table.stderr
    rows = [ln.split() for ln in table.stdout.splitlines()[1:]]
    assert [done, "ticks", "COMPLETED"] in [r[:3] for r in rows], table.stdout
    assert [r[:3] for r in rows if r[0] == "900005"] == [["900005", "-", "ENDED"]]  # readable enough: shown
    notes = {ln.split()[3].rstrip(":"): ln for ln in table.stderr.splitlines()}
    assert sorted(notes) == sorted(bad), table.stderr
    for job_id, why in bad.items():
        assert notes[job_id].startswith(f"note: skipped job {job_id}: ") and why in notes[job_id], notes[job_id]
    records = json.loads(st(testbed, home, ["status", "--json"]).stdout)
    assert {r["job_id"] for r in records} == {done, "900005"}
    some = st(testbed, home, ["status", "900004", done])  # named: an error line for it, the rest shown, exit 1
    assert some.returncode == 1 and some.stdout.startswith(f"job={done} state=COMPLETED"), some
    assert some.stderr.startswith("error: cannot read ") and "900004/trials.json" in some.stderr
