"""Which rank failed, where and why: failures.parse_failures over a job folder's texts (pure),
then one rank going wrong for real on the 4-node testbed.

The texts are as srun and the bootstrap write them on the testbed; the testbed cases below
produce them for real and check what status/logs/--wait make of them.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmtorch import protocol
from slurmtorch.bootstrap import exits
from slurmtorch.bootstrap.rankinfo import RankInfo
from slurmtorch.bootstrap.state import STATE
from slurmtorch.submit.jobfolder import report
from slurmtorch.submit.jobfolder.batchlines import batch_failures
from slurmtorch.submit.jobfolder.failures import (RankExit, is_consequence, latest_exits, parse_failures,
                                                 rank_exit)

RAISED = """rank 2 on node3 failed:
Traceback (most recent call last):
  File "/work/train.py", line 9, in <module>
    raise ValueError("bad batch at step 3")
ValueError: bad batch at step 3
"""
PEER_LOST = """rank 0 on node1 failed:
Traceback (most recent call last):
RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [198.18.0.13]:63725: \
Connection reset by peer. This is typically caused by a remote worker hanging.
"""


def lines(failures):
    return [(f.line(), f.primary) for f in failures]


def test_the_rank_that_raised_comes_before_the_peers_that_lost_it():
    batch = "srun: error: node3: task 2: Exited with exit code 1\nsrun: error: node1: task 0: Exited with exit code 1\n"
    assert lines(parse_failures(batch, {0: PEER_LOST, 2: RAISED})) == [
        ("rank 2 on node3: ValueError: bad batch at step 3", True),
        ("rank 0 on node1: RuntimeError: Read error [198.18.0.13]:63725: Connection reset by peer", False),
    ]


def test_a_rank_killed_before_it_could_report_is_named_from_sruns_line():
    batch = "srun: error: node3: task 2: Killed\nsrun: error: node1: tasks 0-1,3: Terminated\n"
    assert lines(parse_failures(batch, {})) == [("rank 2 on node3: killed by a signal (SIGKILL?) before it could report", True)]


# mpirun's (Open MPI 5.0's prterun) own lines for the rank it saw end first, as launcher.out held them.
BOX = "-" * 74 + "\n"
MPIRUN_KILLED = (BOX + "prterun noticed that process rank 1 with PID 11843 on node vm exited on\n"
                 "signal 9 (Killed).\n" + BOX)
MPIRUN_SEGV = (BOX + "prterun noticed that process rank 1 with PID 27178 on node vm exited on\n"
               "signal 11 (Segmentation fault).\n" + BOX)
MPIRUN_EARLY = (BOX + "prterun has exited due to process rank 1 with PID 11901 on node vm exiting\n"
                "improperly. There are three reasons this could occur:\n\n"
                '1. this process did not call "init" before exiting, but others in the\n'
                "job did. This can cause a job to hang indefinitely while it waits for\n" + BOX)
MPIRUN_NONZERO = (BOX + "prterun detected that one or more processes exited with non-zero status,\n"
                  "thus causing the job to be terminated. The first process to do so was:\n\n"
                  "   Process name: [prterun-vm-27029@1,1]\n   Exit code:    3\n" + BOX)
PEER_LOST_HERE = PEER_LOST.replace("node1", "vm")


@pytest.mark.parametrize("log, want", [
    (MPIRUN_KILLED, "rank 1 on vm: killed by a signal (SIGKILL?) before it could report"),
    (MPIRUN_SEGV, "rank 1 on vm: killed by signal 11 (SIGSEGV: Segmentation fault) before it could report"),
    (MPIRUN_EARLY, "rank 1 on vm: exited before the others without finishing (os._exit, or ended from outside) "
                   "and without reporting a cause"),
    (MPIRUN_NONZERO, "rank 1: exited with exit code 3 without reporting a cause"),
])
def test_the_rank_mpirun_saw_end_first_comes_before_the_peer_that_lost_it(log, want):
    assert lines(parse_failures(log, {0: PEER_LOST_HERE, 1: ""})) == [
        (want, True),
        ("rank 0 on vm: RuntimeError: Read error [198.18.0.13]:63725: Connection reset by peer", False),
    ]


def test_ranks_a_launcher_stopped_after_a_failure_are_not_blamed():
    stopped = MPIRUN_KILLED.replace("9 (Killed)", "15 (Terminated)")
    assert [f.primary for f in parse_failures(stopped, {0: PEER_LOST_HERE})] == [False]


def test_a_step_that_never_launched_names_its_tasks_and_where_to_look():
    batch = ("srun: launch/slurm: launch_p_step_launch: StepId=11.0 aborted before step completely launched.\n"
             "srun: error: task 1 launch failed: Unspecified error\n"
             "srun: error: task 0 launch failed: Unspecified error\n")
    assert lines(parse_failures(batch, {})) == [
        (f"rank {r}: never started: the step failed to launch (Unspecified error); "
         "the slurmd log of the node says why", True) for r in (0, 1)]


def test_a_lost_node_takes_the_silent_ranks_with_it():
    batch = "srun: error: Node failure on node3\n"
    got = lines(parse_failures(batch, {0: PEER_LOST, 2: ""}))
    assert got[0] == ("rank 2 on node3: lost with its node (srun: Node failure on node3)", True)


def test_a_clean_job_has_no_failures():
    assert parse_failures("", {0: "", 1: ""}) == []


def test_a_timeout_or_a_lost_peer_is_a_consequence_and_a_ranks_own_error_is_not():
    """The bootstrap lets such a rank's peers report before it ends the job (is_consequence)."""
    report = PEER_LOST.split("\n", 1)[1]  # what the bootstrap reports, below its header line
    assert is_consequence(report)
    assert is_consequence("Traceback (most recent call last):\nRuntimeError: [pair.cc:598] Timed out waiting "
                          "20000ms for recv operation to complete\n")
    assert not is_consequence(RAISED.split("\n", 1)[1])
    assert not is_consequence("exited with code 3")


def test_a_rank_that_failed_before_knowing_its_rank_is_named_by_its_log():
    early = ("rank ?(RANK=5) on node2 failed:\n"
             "error: MASTER_ADDR 127.0.0.1 is a loopback address but the job spans 2 nodes\n")
    batch = "srun: error: node2: task 1: Exited with exit code 1\n"
    assert lines(parse_failures(batch, {1: early})) == [
        ("rank 1 on node2: MASTER_ADDR 127.0.0.1 is a loopback address but the job spans 2 nodes", True)]


# What the testbed leaves when rank 2's script returns after a step while ranks 0, 1, 3
# still all_reduce (tests/scripts/fault_rank.py return 2): srun prints nothing for an
# exit 0, and the peers lose the connection to the address rank 2's node has.
CLOSED = """rank {r} on node{n} failed:
Traceback (most recent call last):
RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer \
[198.18.0.13]:56991. This is typically caused by a remote worker crashing.
"""
RETURNED_BATCH = ("srun: error: node2: task 1: Exited with exit code 1\n"
                  "srun: error: node4: task 3: Exited with exit code 1\nsrun: error: node1: task 0: Terminated\n")
RETURNED_ERRS = {0: CLOSED.format(r=0, n=1), 1: CLOSED.format(r=1, n=2), 2: "", 3: CLOSED.format(r=3, n=4)}


def test_a_rank_whose_script_returned_early_is_named_with_its_host_not_a_lost_node():
    exited = {2: RankExit(2, "node3", 0, 0)}
    got = lines(parse_failures(RETURNED_BATCH, RETURNED_ERRS, exited))
    assert got[0] == ("rank 2 on node3: its script returned while the others still needed it (exit 0)", True)
    assert [primary for _, primary in got] == [True, False, False, False]


def test_without_its_exit_note_the_silent_rank_is_still_a_guess_at_a_lost_node():
    got = lines(parse_failures(RETURNED_BATCH, RETURNED_ERRS))
    assert got[0] == ("rank 2 on 198.18.0.13: no report and no exit status: lost with its node?", True)


def test_exit_notes_parse_and_only_the_latest_run_of_a_requeued_job_counts():
    assert rank_exit("rank 2 on node3 exited 0 restart 1\n") == RankExit(2, "node3", 0, 1)
    for torn in ("", "rank 2 on node3 exi", "rank x on node3 exited 0 restart 0", "garbage\n"):
        assert rank_exit(torn) is None
    notes = ["rank 0 on node1 exited 0 restart 0\n", "rank 1 on node2 exited 0 restart 1\n", "torn"]
    assert latest_exits(notes) == {1: RankExit(1, "node2", 0, 1)}
    assert latest_exits([]) == {}


def test_the_bootstraps_exit_note_is_what_the_report_reads(tmp_path, monkeypatch):
    """exits.note_exit writes, failures.rank_exit reads: the one format, end to end, and a
    folder that cannot be written is no error for the rank."""
    monkeypatch.setattr(STATE, "info", RankInfo(rank=2, world_size=4, local_rank=0, local_world_size=1, node_rank=2,
                                                num_nodes=4, master_addr="node1", master_port=29500,
                                                hostname="node3", source="test"))
    exits.note_exit(0, {"SLURMTORCH_JOB_DIR": str(tmp_path), "SLURM_RESTART_COUNT": "1"})
    assert (tmp_path / "rank-2.exit").stat().st_mode & 0o777 == 0o600
    (tmp_path / "batch.out").write_text(RETURNED_BATCH)
    for r, text in RETURNED_ERRS.items():
        (tmp_path / f"rank-{r}.err").write_text(text)
    assert report.failure_lines(tmp_path)[0] == \
        "failed: rank 2 on node3: its script returned while the others still needed it (exit 0)"
    exits.note_exit(0, {"SLURMTORCH_JOB_DIR": str(tmp_path / "missing")})  # best effort: no raise
    exits.note_exit(0, {})  # outside a job folder: nothing to write


# ------------------------------------------------------------------ one rank goes wrong on the testbed
# One rank goes wrong on the 4-node testbed: the job ends fast and says who, where and why.
#
# Real ranks under `slurmtorch sbatch --wait` (srun --kill-on-bad-exit, gloo over ib0,
# `--timeout 20` for the process group). Rank 2 runs on node3. Each case runs once here;
# benchmarks/faults.py repeats them and measures the time to end (RELIABILITY.md); these
# tests assert no times. Every wait is bounded: a run that does not end fails the test
# instead of hanging it.


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
FAULT = SCRIPTS / "fault_rank.py"
sys.path.insert(0, str(SCRIPTS))
import fault_node  # noqa: E402


# Hang guard, not a speed claim: every job below has Slurm's 5-minute limit (-t 5), and
# `--wait` must return well inside it, so a job that only Slurm's time limit ended fails
# the test. What ends it instead (srun --kill-on-bad-exit, the process-group --timeout 20,
# slurmctld's SlurmdTimeout=20) is shown by what the job says, not by how fast it says it:
# benchmarks/faults.py measures that. Generous because the testbed is shared and a job
# may queue behind someone else's first.
WAIT_GUARD_S = 240


def slurmtorch(testbed, home, *argv, timeout=120, **kw):
    return testbed.run([testbed.python, "-m", "slurmtorch.cli.main", *map(str, argv)],
                       env={"SLURMTORCH_HOME": str(home)}, timeout=timeout, **kw)


def submit_fault(testbed, home, mode):
    return slurmtorch(testbed, home, "sbatch", "--site", "testbed", "-N", "4", "--timeout", "20", "-t", "5",
                      "--wait", FAULT, mode, "2", timeout=WAIT_GUARD_S)


CASES = [
    # mode, what --wait/status/logs must say about rank 2
    # sys.exit(3) after a line on stderr: that line is what it said (issue 44), exit 3 beside it.
    ("exit", "rank 2 on node3: FAULT exit at "),
    ("kill", "rank 2 on node3: killed by a signal"),
    ("raise", "rank 2 on node3: ValueError: bad batch at step 3"),
    # Ended by the process-group --timeout: the peers report timing out, rank 2 nothing.
    ("hang", "rank 2 on node3: hung: reported nothing while ranks 0, 1, 3 timed out"),
    # Its script returned (exit 0, so srun says nothing) while the others still all_reduce:
    # its rank-2.exit says so, not a guess at a lost node named by a peer's address.
    ("return", "rank 2 on node3: its script returned while the others still needed it (exit 0)"),
]


@pytest.mark.timeout(WAIT_GUARD_S + 120)
@pytest.mark.parametrize("mode, named", CASES, ids=[c[0] for c in CASES])
def test_a_failing_rank_ends_the_job_and_is_named_everywhere(testbed, has_torch, tmp_path, mode, named):
    home = tmp_path / "home"
    proc = submit_fault(testbed, home, mode)
    assert proc.returncode != 0, proc.stderr
    job_id = proc.stdout.splitlines()[0]
    assert f"job {job_id} FAILED" in proc.stderr
    # --wait names the root cause first, then any peers that failed because of it. Whether a
    # peer reports at all is a race (srun's --kill-on-bad-exit may end it before it notices
    # the closed connection), so secondary lines are optional, but never come first.
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("slurmtorch: ")]
    stacks = lines.index("slurmtorch: stacks as the ranks ended:") if mode == "hang" else len(lines)
    assert lines and lines[0].startswith(f"slurmtorch: failed: {named}"), proc.stderr
    assert all(ln.startswith("slurmtorch: then failed: ranks ") for ln in lines[1:stacks - 1]), proc.stderr
    assert lines[stacks - 1] == f"slurmtorch: rank 2's whole log: slurmtorch logs {job_id} --rank 2", proc.stderr
    if mode == "hang":  # where each rank stood as the group's timeout ended them (issue 26)
        assert re.fullmatch(r"slurmtorch:   rank 2 on node3: fault_rank\.py:\d+ <module>\(\)", lines[stacks + 1])
        assert re.fullmatch(r"slurmtorch:   ranks 0-1,3 \(3\): all_reduce <- fault_rank\.py:\d+ <module>\(\)",
                            lines[stacks + 2]), proc.stderr

    status = slurmtorch(testbed, home, "status", job_id)
    assert status.returncode == 0, status.stderr
    assert "state=FAILED" in status.stdout and "exit_code=0" not in status.stdout
    assert status.stdout.splitlines()[1].startswith(f"failed: {named}"), status.stdout

    logs = slurmtorch(testbed, home, "logs", job_id, "--rank", "2")
    assert logs.returncode == 0, logs.stderr
    assert f"slurmtorch: failed: {named}" in logs.stderr
    if mode in ("exit", "raise"):
        assert "rank 2 on node3 failed:" in logs.stderr  # the rank's own report, traceback included


@pytest.mark.timeout(WAIT_GUARD_S + 180)
@pytest.mark.slurm_versions
def test_a_lost_node_ends_the_job_with_node_fail_and_names_it(testbed, has_torch, tmp_path):
    """node3's slurmd, slurmstepd and rank are SIGKILLed mid-job; the testbed is restored after."""
    home = tmp_path / "home"
    env = dict(testbed.env, SLURMTORCH_HOME=str(home))
    waiter = subprocess.Popen(
        [testbed.python, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed", "-N", "4", "--timeout", "20",
         "-t", "5", "--wait", str(FAULT), "none", "0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job_id = waiter.stdout.readline().strip()
        out = home / "jobs" / job_id / "rank-2.out"
        deadline = time.monotonic() + 60
        while not (out.exists() and "started" in out.read_text()):
            assert time.monotonic() < deadline and waiter.poll() is None, "job never started"
            time.sleep(0.2)
        time.sleep(1)
        fault_node.lose(3)
        _, err = waiter.communicate(timeout=WAIT_GUARD_S)  # the hang guard above
        # Before the restore: `scripts/testbed up` may restart slurmctld, which forgets jobs.
        status = slurmtorch(testbed, home, "status", job_id)
        shown = testbed.run(["scontrol", "-o", "show", "job", job_id]).stdout
    finally:
        if waiter.poll() is None:
            waiter.kill()
        fault_node.restore(testbed.env)
    assert waiter.returncode != 0, err
    assert f"job {job_id} NODE_FAIL" in err, err
    assert "slurmtorch: failed: rank 2 on node3: lost with its node (srun: Node failure on node3)" in err, err
    assert "state=NODE_FAIL" in status.stdout, status.stdout
    assert "failed: rank 2 on node3: lost with its node" in status.stdout, status.stdout
    # --no-requeue (the default without --requeue): Slurm did not silently rerun it.
    assert "Restarts=0" in shown and "Requeue=0" in shown, shown


@pytest.mark.timeout(WAIT_GUARD_S + 60)
@pytest.mark.slurm_versions
def test_a_step_that_never_launches_fails_the_job_and_says_so(testbed, has_torch, tmp_path):
    """srun exits 0 when slurmstepd cannot set its step up on Slurm 22.05 (24.11's exits 1):
    either way the job fails with exit 1 and names the rank that never started. Here a file where
    the step's PMIx socket goes (stepd.slurm.pmix.JOB.0, made by the site's prologue)
    makes that happen, as it does when a requeued job restarts within a second or two."""
    site = tmp_path / "blocked.yaml"
    spools = shlex.quote(str(testbed.state_dir / "nodes"))
    site.write_text("extends: testbed\nprologue:\n  - " + json.dumps(
        f'for d in {spools}/*/spool; do : >"$d/stepd.slurm.pmix.$SLURM_JOB_ID.0"; done') + "\n")
    home = tmp_path / "home"
    proc = slurmtorch(testbed, home, "sbatch", "--site", site, "-N", "2", "-t", "5", "--wait", FAULT,
                      "none", "0", timeout=WAIT_GUARD_S)
    job_id = proc.stdout.splitlines()[0]
    try:
        assert proc.returncode != 0, proc.stderr
        assert f"job {job_id} FAILED (exit 1)" in proc.stderr, proc.stderr
        never = "failed: rank 0: never started: the step failed to launch (Unspecified error)"
        assert f"slurmtorch: {never}" in proc.stderr, proc.stderr
        batch = (home / "jobs" / job_id / "batch.out").read_text()
        assert "launch failed" in batch, batch  # srun's own words
        if testbed.slurm < (24, 11):  # and yet it exited 0: the script's own check catches it
            assert "slurmtorch: error: srun exited 0 but no rank started" in batch, batch
        else:  # srun exits 1 itself; the check stays quiet
            assert "srun exited 0" not in batch, batch
        assert (home / "jobs" / job_id / "exit-code").read_text() == "1\n"
        status = slurmtorch(testbed, home, "status", job_id)
        assert "state=FAILED" in status.stdout and never in status.stdout, status.stdout
    finally:
        for blocker in (testbed.state_dir / "nodes").glob(f"*/spool/stepd.slurm.pmix.{job_id}.0"):
            blocker.unlink(missing_ok=True)



# torchrun's agent failing itself (its rendezvous), as node-1.err held it on the testbed with
# a fabric the host name does not resolve to (torch 2.13; paths shortened).
AGENT_ERR = """\
[E1125 15:25:48.896282774 socket.cpp:1028] [c10d] The client socket has timed out after 60000ms while trying \
to connect to (198.18.0.139, 24058).
Exception raised from throwTimeoutError at /__w/pytorch/pytorch/torch/csrc/distributed/c10d/socket.cpp:1030 \
(most recent call first):
<omitting python frames>

Traceback (most recent call last):
  File "/v/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 156, in _create_tcp_store
    store = TCPStore(
            ^^^^^^^^^
torch.distributed.DistNetworkError: The client socket has timed out after 60000ms while trying to connect to \
(198.18.0.139, 24058).

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/v/torch/distributed/run.py", line 1032, in <module>
    main()
  File "/v/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 180, in _create_tcp_store
    raise RendezvousConnectionError(
torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. \
See inner exception for details.
"""


def test_a_torchrun_agents_own_failure_is_shown_with_its_cause():
    """Was `rank 1 on node2: exited with exit code 1 without reporting a cause`."""
    got = parse_failures("srun: error: node2: task 1: Exited with exit code 1\n", {1: AGENT_ERR})
    assert [f.line() for f in got] == [
        "rank 1 on node2: torchrun's agent failed: RendezvousConnectionError: The connection to the C10d store "
        "has failed (DistNetworkError: The client socket has timed out after 60000ms while trying to connect to "
        "(198.18.0.139, 24058))"]
    assert got[0].code == 1


# torchrun's agent after one of its workers died without a word (SIGKILL), as node-1.err holds it
# (torch 2.13, run for real with two workers; paths shortened): ChildFailedError's own line is
# empty, and what happened is in the block below it.
AGENT_CHILD_FAILED = """\
rank 2 on node2 failed:
Traceback (most recent call last):
  File "/v/slurmtorch/bootstrap/runner.py", line 140, in main
    run_target(opts, info)
RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer \
[127.0.0.1]:44182. This is typically caused by a remote worker crashing.
W1127 18:33:44.415000 2334 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 2558 closing signal SIGTERM
E1127 18:33:44.493000 2334 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 1 \
(pid: 2559) of binary: /v/bin/python
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/v/torch/distributed/run.py", line 1032, in <module>
    main()
  File "/v/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
======================================================
slurmtorch.bootstrap FAILED
------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-27_18:33:44
  host      : node2
  rank      : 2 (local_rank: 0)
  exitcode  : -15 (pid: 2558)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 2558
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-27_18:33:44
  host      : node2
  rank      : 3 (local_rank: 1)
  exitcode  : -9 (pid: 2559)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 2559
======================================================
"""


def test_a_torchrun_agents_child_failed_error_names_the_worker_that_failed_first_and_how():
    """Was `torchrun's agent failed: ChildFailedError:` with nothing after the colon."""
    got = parse_failures("srun: error: node2: task 1: Exited with exit code 1\n", {1: AGENT_CHILD_FAILED})
    agent = [f for f in got if f.rank == 1]
    assert [f.line() for f in agent] == [
        "rank 1 on node2: torchrun's agent failed: ChildFailedError: its worker rank 3 (local_rank: 1) failed first: "
        "exitcode -9 (SIGKILL), Signal 9 (SIGKILL) received by PID 2559"]
    assert agent[0].primary


def test_a_plain_traceback_is_not_taken_for_torchruns_agent():
    err = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nValueError: no\n"
    got = parse_failures("srun: error: node2: task 1: Exited with exit code 1\n", {1: err})
    assert got[0].cause == "exited with exit code 1 without reporting a cause"


# ch-run 0.31's own words when it cannot set the container up (seen on the testbed: a script
# folder the image has no folder for, which ch-run cannot create in a read-only image).
CH_RUN_NO_BIND_TARGET = ("ch-run[242]: error: can't mkdir: /srv/images/bookworm/srv/code: Read-only file system "
                         "(ch_misc.c:409 30)")


def test_a_container_that_ch_run_could_not_set_up_is_named_with_its_error_and_the_fix():
    """Red before: `rank 0 on node1: exited with exit code 1 without reporting a cause`, while
    ch-run's line said which folder the image lacked."""
    batch = ("srun: error: node1: task 0: Exited with exit code 1\n"
             "srun: error: node2: task 1: Exited with exit code 1\n")
    got = parse_failures(batch, {0: CH_RUN_NO_BIND_TARGET, 1: CH_RUN_NO_BIND_TARGET.replace("242", "57")})
    assert [(f.rank, f.host, f.primary, f.code) for f in got] == [(0, "node1", True, 1), (1, "node2", True, 1)]
    assert got[0].cause == (
        "ch-run could not start the container: can't mkdir: /srv/images/bookworm/srv/code: Read-only file system "
        "(ch-run binds only onto folders the image has: make that folder in the image, or bind one above it "
        "with the site's container.mounts)")


def test_other_ch_run_errors_are_named_as_ch_run_wrote_them():
    got = parse_failures("srun: error: node1: task 0: Exited with exit code 1\n",
                         {0: "ch-run[9962]: error: $USER not set (ch-run.c:122)\n"})
    assert [(f.rank, f.cause) for f in got] == [(0, "ch-run could not start the container: $USER not set")]


def test_a_supervisor_killed_outright_is_the_cause_the_report_names_before_the_ranks_ends():
    """Its ranks then end by Slurm's hand (killed, cancelled): a consequence, not the cause."""
    batch = ("slurmtorch: start 0 on node1,node2\n"
             "slurmtorch: error: the restart supervisor was killed by SIGKILL (exit 137): nothing restarts this job now\n"
             "srun: error: node2: task 1: Killed\n")
    assert batch_failures(batch, "") == [
        "the restart supervisor on the batch node was killed by SIGKILL (exit 137); the job ended with it, and "
        "nothing restarted it"]


def test_a_ray_node_that_died_is_the_cause_not_its_steps_exit_as_a_rank():
    """A --ray job's worker step exits 1 when its raylet dies; srun's line would read as rank 0's."""
    batch = ("slurmtorch: Ray head on node1 up at 198.18.0.139:29500\n"
             + protocol.ray_died_line("worker", "node2", "its raylet ended (Ray's logs: /tmp/r/session_latest/logs "
                                                         "on node2)")
             + "slurmtorch: error: a Ray node's step ended before the script did (the line above names the node); "
               "ending the job\n"
             "srun: error: node2: task 0: Exited with exit code 1\n")
    assert batch_failures(batch, "") == [
        "Ray worker on node2 died: its raylet ended (Ray's logs: /tmp/r/session_latest/logs on node2)"]


def test_a_ray_node_that_never_started_is_the_cause_with_its_reason():
    """Issue 44: a --ray job whose nodes' python has no ray read as `rank 0 ... exited without reporting a
    cause`; the head says why in batch.out, and that is the job's cause."""
    batch = (protocol.ray_not_started_line("head", "node1", "its python (/opt/py/bin/python) has no ray (No module "
                                                            "named 'ray')")
             + "slurmtorch: error: a Ray node's step ended before the script did (the line above names the node); "
               "ending the job\n"
             "srun: error: node1: task 0: Exited with exit code 1\n")
    assert batch_failures(batch, "") == [
        "Ray head on node1 did not start: its python (/opt/py/bin/python) has no ray (No module named 'ray')"]
