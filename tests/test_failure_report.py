"""failures.parse_failures: which rank failed, where and why, from a job folder's texts (pure).

The texts are as srun and the bootstrap write them on the testbed; test_faults_testbed.py
produces them for real and checks what status/logs/--wait make of them.
"""

from __future__ import annotations

from slurmtorch.submit.failures import is_consequence, parse_failures

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
