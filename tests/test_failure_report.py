"""failures.parse_failures: which rank failed, where and why, from a job folder's texts (pure).

The texts are as srun and the bootstrap write them on the testbed; test_faults_testbed.py
produces them for real and checks what status/logs/--wait make of them.
"""

from __future__ import annotations

from slurmtorch.bootstrap import exits
from slurmtorch.bootstrap.rankinfo import RankInfo
from slurmtorch.bootstrap.state import STATE
from slurmtorch.submit import report
from slurmtorch.submit.failures import RankExit, is_consequence, latest_exits, parse_failures, rank_exit

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
