"""Recovery without a human (--max-restarts): the pure parts. Whom a failed start blames, what
the job does next, which ranks hung, the supervisor's command line, and the checks before
rendering. The testbed runs of the same: tests/submit/test_recovery.py."""

from __future__ import annotations

import tracemalloc
from dataclasses import replace

import pytest

from slurmtorch import protocol
from slurmtorch import rankfiles
from slurmtorch.errors import SpecError
from slurmtorch.submit.batchnode.batchwatch import batch_host_gone
from slurmtorch.submit.batchnode.batchwatch import parse_args as watch_args
from slurmtorch.submit.jobfolder.batchlines import latest_start, step_refusal
from slurmtorch.submit.jobfolder.failures import RankFailure, parse_failures
from slurmtorch.submit.jobfolder.heartbeats import Beat, all_waiting, hung_ranks, interval_for, parse_beat
from slurmtorch.options import Options
from slurmtorch.submit.launch.recovery import Recovery, resolve_restarts
from slurmtorch.roles import parse_roles
from slurmtorch.submit.batchnode.restarts import (RestartState, Verdict, batch_node_lost, blame, dead_nodes, decide,
                                                  place, requeue_size, short_role)
from slurmtorch.submit.batchnode.steprun import Stragglers
from slurmtorch.submit.batchnode.supervisor import (job_pools, parse_args, start_env, step_argv,
                                                    verdict_of)

NODES = ["node1", "node2", "node3"]
KILLED = "srun: error: node2: task 1: Killed\n"
RAISED = {0: "rank 0 on node1 failed:\nTraceback (most recent call last):\n  x\nValueError: bad batch\n"}


def fail(rank, host, cause, primary=True):
    return RankFailure(rank, host, cause, primary)


# ---------------------------------------------------------------- blame


def test_a_lost_node_is_the_machines_and_suspect():
    batch = "srun: error: Node failure on node2\n"
    closed = "rank 0 on node1 failed:\nRuntimeError: Connection closed by peer [198.18.0.12]:1234\n"
    v = blame(parse_failures(batch, {0: closed, 1: ""}), ["node2"])
    assert (v.kind, v.nodes, v.lost) == ("machine", ("node2",), True)
    assert v.cause == "rank 1 on node2: lost with its node (srun: Node failure on node2)"


def test_a_rank_killed_by_a_signal_makes_its_node_suspect():
    v = blame(parse_failures(KILLED, {}))
    assert (v.kind, v.nodes) == ("machine", ("node2",)) and "killed by a signal" in v.cause


def test_an_exception_is_the_scripts_and_excludes_nothing():
    v = blame(parse_failures("", RAISED))
    assert (v.kind, v.nodes, v.cause) == ("script", (), "rank 0 on node1: ValueError: bad batch")


def test_a_rank_that_exits_with_a_code_ends_the_job_with_that_code():
    v = blame([fail(1, "node2", "exited with code 3")], code=1)
    assert (v.kind, v.code) == ("script", 3)


def test_a_rank_that_exits_after_saying_why_ends_the_job_with_its_code_and_its_words():
    said = "usage: sweep.py [-h]\nsweep.py: error: unrecognized arguments: --stesp 20\nrank 1 on node2 failed:\nexited with code 2\n"
    v = blame(parse_failures("", {1: said}), code=1)
    assert (v.kind, v.code, v.cause) == ("script", 2, "rank 1 on node2: sweep.py: error: unrecognized arguments: --stesp 20")


def test_a_hung_rank_blames_its_node_whatever_its_peers_said():
    v = blame([fail(0, "node1", "Connection closed by peer", primary=False)],
              hung=[(1, "node2", "hung: stuck in its own code for 9 s while rank 0 waited for it")])
    assert (v.kind, v.nodes) == ("machine", ("node2",))
    assert v.cause == "rank 1 on node2: hung: stuck in its own code for 9 s while rank 0 waited for it"


def test_a_rank_named_by_its_address_is_blamed_by_its_node_name():
    silent = fail(1, "198.18.0.12", "no report and no exit status: lost with its node?")
    v = blame([silent], addresses={"198.18.0.12": "node2"})
    assert v.nodes == ("node2",) and v.cause.startswith("rank 1 on node2:")


def test_nccls_network_errors_point_at_the_peer_that_went_silent():
    # Rank 0 and 2 report NCCL's network error; rank 1 said nothing: its node is the suspect.
    nccl = ("rank {r} on node{n} failed:\nTraceback (most recent call last):\ntorch.distributed.DistBackendError: NCCL "
            "error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version "
            "2.21.5\nncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
            "prematurely.\n")
    failures = parse_failures("srun: error: Node failure on node2\n", {0: nccl.format(r=0, n=1), 1: "",
                                                                     2: nccl.format(r=2, n=3)})
    v = blame(failures, ["node2"])
    assert (v.kind, v.nodes) == ("machine", ("node2",)) and v.cause.startswith("rank 1 on node2: lost")


def test_a_step_that_never_launched_is_unknown():
    v = blame([fail(0, "", "never started: the step failed to launch (Unspecified error); the slurmd log ...")])
    assert v.kind == "unknown" and v.nodes == ()


# ---------------------------------------------------------------- decide


def started(state=RestartState(), n=1):
    return RestartState(**{**state.as_dict(), "events": state.events, "starts": state.starts + n,
                           "excluded": state.excluded})


def test_a_machine_failure_with_a_spare_restarts_without_the_node():
    plan = decide(started(), Verdict("machine", "rank 1 on node2: killed", ("node2",)), NODES, 2, 3)
    assert (plan.action, plan.nodes) == ("restart", ("node1", "node3"))
    assert plan.state.excluded == ("node2",) and plan.state.restarts == 1
    assert plan.state.events[-1].line() == "start 0 failed: rank 1 on node2: killed; node2 excluded; restarted on node1,node3"


def test_no_spare_left_requeues_without_the_node():
    plan = decide(started(), Verdict("machine", "rank 1 on node2: lost", ("node2",), lost=True), NODES[:2], 2, 3)
    assert (plan.action, plan.nodes) == ("requeue", ("node2",))
    assert plan.state.events[-1].line().endswith("requeued without node2")


def test_a_script_failure_is_retried_once_in_place_then_ends_the_job():
    v = Verdict("script", "rank 0 on node1: ValueError: bad batch")
    first = decide(started(), v, NODES, 2, 3)
    assert (first.action, first.nodes, first.state.excluded) == ("restart", ("node1", "node2"), ())
    second = decide(started(first.state), v, NODES, 2, 3)
    assert second.action == "give_up" and "the script's failure" in second.why
    assert second.state.events[-1].line().endswith("not restarted")


def test_a_machine_looking_failure_that_follows_the_script_to_new_nodes_is_the_scripts():
    # Killed on node2, then killed the same way on node3: the OOM killer, say, following the script.
    first = decide(started(), Verdict("machine", "rank 1 on node2: killed by a signal", ("node2",)), NODES, 2, 3)
    again = decide(started(first.state), Verdict("machine", "rank 1 on node3: killed by a signal", ("node3",)),
                   NODES, 2, 3)
    assert again.action == "give_up" and "follows the script" in again.why
    assert again.state.excluded == ("node2",)  # node3 is not blamed for the script's failure


def test_lost_nodes_are_the_machines_however_often():
    first = decide(started(), Verdict("machine", "rank 1 on node2: lost (Node failure on node2)", ("node2",),
                                      lost=True), NODES + ["node4"], 2, 3)
    again = decide(started(first.state), Verdict("machine", "rank 1 on node3: lost (Node failure on node3)",
                                                 ("node3",), lost=True), NODES + ["node4"], 2, 3)
    assert (again.action, again.nodes, again.state.excluded) == ("restart", ("node1", "node4"), ("node2", "node3"))


def test_restarts_stop_at_max_restarts_across_requeues():
    state = RestartState.from_dict({"starts": 4, "restarts": 3, "excluded": ["node2"], "events": []})
    plan = decide(state, Verdict("machine", "rank 0 on node1: lost", ("node1",), lost=True), NODES, 2, 3)
    assert plan.action == "give_up" and plan.why == "no restarts left (3 of 3 used)"


def test_the_state_reads_back_as_it_was_written():
    plan = decide(started(), Verdict("machine", "rank 1 on node2: killed", ("node2",)), NODES, 2, 3, now=5.0)
    assert RestartState.from_dict(plan.state.as_dict()) == plan.state


# ---------------------------------------------------------------- heartbeats


def beat(rank, written, unmoved, place, host=None):
    return Beat(written, unmoved, place, rank, host or f"node{rank + 1}")


def test_a_rank_stuck_in_its_own_code_while_peers_wait_in_torch_is_hung():
    beats = {0: beat(0, 100, 80, "torch"), 1: beat(1, 100, 80, "own")}
    assert hung_ranks(beats, 100.5, 15) == [(1, "node2", "hung: stuck in its own code for 20 s while rank 0 "
                                                           "waited for it")]


def test_ranks_all_busy_in_their_own_code_are_not_hung():
    beats = {0: beat(0, 100, 80, "own"), 1: beat(1, 100, 80, "own")}  # an evaluation, a checkpoint
    assert hung_ranks(beats, 100.5, 15) == []


def test_a_heartbeat_no_longer_written_is_a_rank_that_stopped():
    beats = {0: beat(0, 100, 99, "torch"), 1: beat(1, 80, 79, "torch")}
    assert hung_ranks(beats, 100.5, 15) == [(1, "node2", "stopped answering (no heartbeat for 20 s)")]


def test_every_rank_standing_still_in_torch_names_nobody_but_is_said():
    """A collective some rank never joins: nobody is in its own code to blame (no restart),
    but the supervisor says where they all stand (their stacks) long before the group's timeout."""
    beats = {0: beat(0, 100, 80, "torch"), 1: beat(1, 100, 82, "torch")}
    assert hung_ranks(beats, 100.5, 15) == []
    assert all_waiting(beats, 2, 100.5, 15) == 18.5  # since the last of them stood still
    assert all_waiting(beats, 3, 100.5, 15) is None  # a rank without a heartbeat yet
    assert all_waiting({**beats, 1: beat(1, 100, 90, "torch")}, 2, 100.5, 15) is None  # one moved lately
    assert all_waiting({**beats, 1: beat(1, 100, 80, "own")}, 2, 100.5, 15) is None  # hung_ranks' case
    assert all_waiting({**beats, 1: beat(1, 70, 60, "torch")}, 2, 100.5, 15) is None  # stopped: hung_ranks'


def test_healthy_ranks_that_move_are_not_named():
    beats = {0: beat(0, 100, 99.5, "torch"), 1: beat(1, 100, 99.9, "own")}
    assert hung_ranks(beats, 100.5, 15) == []


@pytest.mark.parametrize("text", ["", "1 2 torch", "x 2 torch 0 h", "1 2 elsewhere 0 h", "1 2 own zero h"])
def test_a_torn_or_foreign_heartbeat_line_is_ignored(text):
    assert parse_beat(text) is None


def test_a_heartbeat_line_reads_back():
    assert parse_beat("1795.5 1790.25 own 3 node4\n") == Beat(1795.5, 1790.25, "own", 3, "node4")


def test_ranks_beat_often_enough_for_the_timeout_and_no_more():
    assert (interval_for(1), interval_for(15), interval_for(600)) == (0.5, 3.0, 5.0)


# ---------------------------------------------------------------- supervisor and logs


def test_the_supervisor_reads_the_batch_scripts_call():
    args = parse_args(["--nodes", "2", "--ntasks", "3", "--max-restarts", "4", "--hang-timeout", "15",
                       "--backend", "gloo", "--", "srun", "--kill-on-bad-exit=1", "python", "-m", "x", "--", "a"])
    assert (args.nodes, args.ntasks, args.max_restarts, args.hang_timeout) == (2, 3, 4, 15.0)
    assert step_argv(args, ["node1", "node3"]) == ["srun", "--nodes=2", "--ntasks=3", "--nodelist=node1,node3",
                                                   "--kill-on-bad-exit=1", "python", "-m", "x", "--", "a"]
    assert "--overlap" in step_argv(args, ["node1", "node3"], start=1)  # the failed start's step may linger
    assert args.replace_straggler is None
    args = parse_args(["--nodes", "2", "--ntasks", "2", "--max-restarts", "1", "--spare-nodes", "1",
                       "--replace-straggler", "0.2", "--", "srun", "x"])
    assert (args.spare_nodes, args.replace_straggler) == (1, 0.2)


LAUNCH = ["bash", "-c", 'launch "$@"', "launch", "--lr", "0.1"]
LAUNCH_ROLES = ["bash", "-c", 'launch_roles "$@"', "launch_roles", "--lr", "0.1"]  # a script before issue 45's


def test_the_supervisor_runs_the_batch_scripts_launch_as_it_is_and_picks_each_starts_rendezvous(tmp_path,
                                                                                                  monkeypatch):
    """Every shape's steps are the script's `launch`, run for each start on the nodes it is given;
    the supervisor picks MASTER_PORT/ADDR with the batch script's own picker (templates/rendezvous.sh)."""
    args = parse_args(["--nodes", "1", "--ntasks", "1", "--max-restarts", "3", "--spare-nodes", "1", "--", *LAUNCH])
    assert args.script and args.roles is None
    assert step_argv(args, ["node2"], start=1) == LAUNCH
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "=lo")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    env = start_env(args, 1, tmp_path, ["here"], "here", fixed={})
    assert (env["SLURMTORCH_ROLE_NODES"], env["SLURMTORCH_RESTART_COUNT"], env["MASTER_ADDR"]) == ("here", "1",
                                                                                                 "127.0.0.1")
    assert 20000 <= int(env["MASTER_PORT"]) < 65536
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    assert "MASTER_ADDR" not in start_env(args, 2, tmp_path, ["here"], "here", fixed={})  # the host name, then
    monkeypatch.setenv("MASTER_PORT", "29500")  # the site's: it stands
    assert start_env(args, 2, tmp_path, ["here"], "here", fixed={"MASTER_PORT": "29500"})["MASTER_PORT"] == "29500"


def test_the_supervisor_runs_a_role_jobs_launch_roles_as_it_is_and_gives_it_its_nodes():
    args = parse_args(["--nodes", "2", "--ntasks", "2", "--max-restarts", "3", "--spare-nodes", "1",
                       "--roles", "master=1,worker=1", "--backend", "gloo", "--", *LAUNCH_ROLES])
    assert args.roles == parse_roles("master=1,worker=1")
    assert step_argv(args, ["node1", "node3"], start=1) == LAUNCH_ROLES  # its steps name their nodes themselves
    # One allocation: the roles share the job's nodes and spares.
    assert job_pools(args, {"SLURM_JOB_NODELIST": "node[1-3]"}) == ((("node1", "node2", "node3"), 2),)
    # A heterogeneous job: each role draws on its own component's nodes.
    het = {"SLURM_JOB_NODELIST": "node1", "SLURM_JOB_NODELIST_HET_GROUP_0": "node1",
           "SLURM_JOB_NODELIST_HET_GROUP_1": "node[3-4]"}
    assert job_pools(args, het) == ((("node1",), 1), (("node3", "node4"), 1))


def test_the_supervisor_refuses_a_role_layout_it_cannot_read():
    with pytest.raises(ValueError, match="unknown role 'boss'.*\n.*usage"):
        parse_args(["--nodes", "2", "--ntasks", "2", "--max-restarts", "1", "--roles", "boss=1", "--", *LAUNCH_ROLES])


def test_a_start_takes_each_pools_first_healthy_nodes_in_pool_order():
    assert place(((("node1", "node2", "node3"), 2),), ["node1"]) == ("node2", "node3")
    pools = ((("node1", "node2"), 1), (("node3", "node4"), 2))
    assert place(pools, ["node1"]) == ("node2", "node3", "node4")
    assert place(pools, ["node4"]) is None  # the second role has one node of its kind left, and needs two


def test_a_heterogeneous_roles_spare_of_its_own_kind_stands_in_and_with_none_left_the_job_ends():
    pools = ((("node1",), 1), (("node3", "node4"), 1))
    killed = Verdict("machine", "rank 1 (worker 0) on node3: killed by a signal", ("node3",))
    plan = decide(RestartState(starts=1), killed, ["node1", "node3", "node4"], 2, 3, pools=pools, requeue=False)
    assert (plan.action, plan.nodes) == ("restart", ("node1", "node4"))
    again = Verdict("machine", "rank 1 (worker 0) on node4: lost with its node", ("node4",), lost=True)
    plan = decide(replace(plan.state, starts=2), again, ["node1", "node3", "node4"], 2, 3, pools=pools, requeue=False)
    assert plan.action == "give_up" and "a heterogeneous job is not requeued" in plan.why
    assert plan.state.excluded == ("node3", "node4")


def test_a_hung_rank_of_a_role_job_is_named_with_its_role():
    verdict = blame([], hung=[(1, "node2", "hung: stuck in its own code")], roles=parse_roles("master=1,worker=1"))
    assert verdict.cause == "rank 1 (worker 0) on node2: hung: stuck in its own code"


def write_sample(folder, rank: int, own: float, written: float) -> None:
    (folder / protocol.LIVE).mkdir(exist_ok=True)
    (folder / protocol.LIVE / protocol.live_name(rank)).write_text(rankfiles.live_record(
        written=written, since=0.0, rank=rank, host=f"node{rank + 1}", steps=9, step_s=0.5, own_s=own, trend_s=None,
        own_mean_s=own, first_step=None, last_step=None, cpu=None, rss=None, gpu=None, ended=False))


def test_a_straggler_is_found_in_its_third_round_of_samples_and_earlier_starts_samples_do_not_count(tmp_path):
    for rank in (0, 1):
        write_sample(tmp_path, rank, 0.9 if rank else 0.3, written=1.0)  # an earlier start's, slow as they are
    watch = Stragglers(tmp_path, 0.2, ntasks=2)
    now = watch.seen
    assert watch.look() is None  # nothing of this start yet
    for round_ in (1, 2, 3):
        write_sample(tmp_path, 0, 0.30, written=now + round_)
        assert watch.look() is None  # rank 1 has not written this round: no look
        write_sample(tmp_path, 1, 0.45, written=now + round_)
        found = watch.look()
        assert (found is None) == (round_ < 3)
        assert watch.look() is None  # the same round, looked at again, counts once
    assert found == (1, "node2", "a straggler: 1.20x the median time outside backward (0.45 s against 0.375 s) "
                                 "in 3 samples running")


@pytest.mark.parametrize("argv", [[], ["--nodes", "2"], ["--nodes", "2", "--", "srun"],
                                  ["--nodes", "2", "--ntasks", "2", "--max-restarts", "1", "--", "mpirun"],
                                  ["--nodes", "2", "--ntasks", "2", "--max-restarts", "1", "--", "launch"],
                                  ["--nodes", "2", "--ntasks", "2", "--max-restarts", "1", "--bogus", "1", "--", "srun"]])
def test_the_supervisor_refuses_any_other_call(argv):
    with pytest.raises(ValueError, match="usage"):
        parse_args(argv)


def test_a_restarted_jobs_failure_report_reads_its_latest_start_only():
    log = ("rank 0 on node1 failed:\nTraceback (most recent call last):\nValueError: old\n"
           "slurmtorch: start 1 on node1,node3, after: rank 0 on node1: ValueError: old\n"
           "FAULT at 12\nrank 0 on node1 failed:\nTraceback (most recent call last):\nKeyError: 'new'\n")
    assert parse_failures("", {0: latest_start(log)})[0].cause == "KeyError: 'new'"
    # An earlier start's report ends at the restart line instead of taking the next start's lines.
    assert parse_failures("", {0: log})[0].cause == "ValueError: old"


# ---------------------------------------------------------------- checked before rendering


def resolve(launcher="srun", hetjob=False, container=False, nodes=2, max_nodes=4, timeout=600, role_spares=0, **opts):
    return resolve_restarts(Options.given(opts), launcher, hetjob, container, nodes, max_nodes, "debug", timeout,
                            role_spares)


def test_without_max_restarts_nothing_is_supervised():
    assert resolve() == Recovery(None, 0, None, None)


def test_restarts_with_spares_a_hang_timeout_and_a_straggler_margin():
    assert resolve(max_restarts=3, spare_nodes=1, hang_timeout=15) == Recovery(3, 1, 15, None)
    assert resolve(max_restarts=3, spare_nodes=1, replace_straggler=0.2) == Recovery(3, 1, None, 0.2)


def test_a_role_jobs_spares_are_the_shared_ones_and_each_roles_own():
    assert resolve(max_restarts=2, spare_nodes=1, role_spares=1) == Recovery(2, 2)
    # A heterogeneous job's are its roles' own, checked per partition by hetjob.components.
    assert resolve(max_restarts=2, hetjob=True, role_spares=3, max_nodes=2) == Recovery(2, 3)


@pytest.mark.parametrize("opts, match", [
    ({"spare_nodes": 1}, "--spare-nodes needs --max-restarts"),
    ({"hang_timeout": 10}, "--hang-timeout needs --max-restarts"),
    ({"max_restarts": 0}, "--max-restarts must be at least 1"),
    ({"max_restarts": 2, "launcher": "torchrun"}, "launcher 'torchrun' cannot"),
    ({"max_restarts": 2, "spare_nodes": 1, "hetjob": True}, "hold spares of their own kind"),
    ({"role_spares": 1}, "a role's spare=N needs --max-restarts"),
    ({"max_restarts": 2, "spare_nodes": 1, "role_spares": 2}, "2 nodes \\+ 3 spare need 5"),
    ({"max_restarts": 2, "container": True}, "cannot supervise ranks in a container"),
    ({"max_restarts": 2, "spare_nodes": 3}, "2 nodes \\+ 3 spare need 5, but partition 'debug' allows at most 4"),
    ({"max_restarts": 2, "spare_nodes": -1}, "must not be negative"),
    ({"max_restarts": 2, "hang_timeout": 600}, "not shorter than the process-group --timeout 600"),
    ({"replace_straggler": 0.2}, "--replace-straggler needs --max-restarts"),
    ({"max_restarts": 2, "replace_straggler": 0.2}, "replaces a slow rank's node by a spare, and the job has none"),
    ({"max_restarts": 2, "spare_nodes": 1, "replace_straggler": 0}, "the margin over the median, e.g. 0.2"),
    ({"max_restarts": 2, "spare_nodes": 1, "replace_straggler": 20}, "the margin over the median, e.g. 0.2"),
])
def test_restart_options_that_cannot_work_are_refused_before_sbatch(opts, match):
    with pytest.raises(SpecError, match=match):
        resolve(**opts)


def test_a_failed_starts_logs_are_read_in_bounded_memory(tmp_path):
    """A rank that wrote 40 MiB before its report: the supervisor reads the tail it needs, not
    the whole log (issue 24, item 5: 447 MB peak after a rank wrote 300 MB)."""
    (tmp_path / "batch.out").write_text("srun: error: node2: task 1: Exited with exit code 1\n")
    with open(tmp_path / "rank-1.err", "wb") as f:
        line = b"x" * 1023 + b"\n"
        for _ in range(40 * 1024):
            f.write(line)
        f.write(b"rank 1 on node2 failed:\nTraceback (most recent call last):\nValueError: bad batch\n")
    tracemalloc.start()
    try:
        verdict = verdict_of(tmp_path, {}, 0, 1, True, [], [])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert verdict.cause == "rank 1 on node2: ValueError: bad batch"
    assert peak < 4 * 2**20, f"{peak / 2**20:.1f} MiB"


# ---------------------------------------------------------------- nodes Slurm says are gone (issue 24)


REFUSED = "srun: error: Unable to create step for job 7: Requested node configuration is not available\n"
LAUNCH_FAILED = ("srun: error: Task launch for StepId=7.2 failed on node node3: Communication connection failure\n"
                 "srun: error: Application launch failed: Communication connection failure\n")


def test_srun_saying_slurm_refused_the_step_is_read_with_the_nodes_it_names():
    assert step_refusal(REFUSED) == ("Requested node configuration is not available", ())
    assert step_refusal(LAUNCH_FAILED) == ("Communication connection failure", ("node3",))
    assert step_refusal("srun: error: node2: task 1: Killed\n") is None


def test_slurm_refusing_the_step_is_never_the_scripts_failure():
    v = blame(parse_failures(REFUSED, {}), refusal=step_refusal(REFUSED))
    assert (v.kind, v.cause) == ("slurm", "Slurm did not start the step: Requested node configuration is not available")
    # Twice in a row costs restarts, never the script's one retry, and never ends the job as the script's.
    first = decide(started(), v, NODES, 2, 3)
    again = decide(started(first.state), v, NODES, 2, 3)
    assert (first.action, again.action, again.state.script_retries) == ("restart", "restart", 0)
    named = decide(started(), blame([], refusal=step_refusal(LAUNCH_FAILED)), NODES + ["node4"], 2, 3)
    assert named.state.excluded == ("node3",) and named.nodes == ("node1", "node2")


def test_dead_nodes_are_those_slurm_took_out_of_the_job_or_will_give_no_work():
    states = {"node1": "alloc", "node2": "down*", "node3": "alloc", "node4": "idle*", "node5": "drain"}
    assert dead_nodes(["node1", "node2", "node3"], ["node1", "node2"], states) == ("node2", "node3")
    assert dead_nodes(["node1", "node4", "node5"], ["node1", "node4", "node5"], states) == ("node4", "node5")
    assert dead_nodes(["node1", "node3"], ["node1", "node3"], {"node1": "mix", "node3": "comp"}) == ()


def test_every_dead_node_is_excluded_not_only_the_one_srun_named():
    # Rank 1's node2 and the spare node3 lost together: srun names node2 only (node3 ran no task).
    v = blame(parse_failures("srun: error: Node failure on node2\n", {0: "", 1: ""}), ["node2"])
    plan = decide(started(), v, NODES, 2, 3, dead=("node2", "node3"))
    assert (plan.action, plan.nodes, plan.state.excluded) == ("requeue", ("node2", "node3"), ("node2", "node3"))
    assert plan.state.events[-1].line().endswith("node2, node3 excluded; requeued without node2,node3")


def test_losing_the_batch_node_requeues_without_it_or_ends_with_no_restarts_left():
    plan = decide(started(), batch_node_lost("node1"), (), 1, 3, in_place=False)
    assert (plan.action, plan.nodes, plan.state.restarts) == ("requeue", ("node1",), 1)
    assert plan.state.events[-1].line() == ("start 0 failed: the batch node node1 was lost (and the restart "
                                            "supervisor with it); node1 excluded; requeued without node1")
    spent = RestartState.from_dict({"starts": 4, "restarts": 3, "events": []})
    assert decide(spent, batch_node_lost("node1"), (), 1, 3, in_place=False).action == "give_up"


def test_a_heterogeneous_job_that_lost_its_batch_node_says_so_not_that_a_spare_is_missing():
    """Issue 44: it said `no healthy spare of the failed role's kind is left`, with spares to spare."""
    plan = decide(started(), batch_node_lost("node1"), (), 1, 3, in_place=False, requeue=False)
    assert plan.action == "give_up"
    assert plan.why == "its batch script went with its node, and a heterogeneous job is not requeued: the job is cancelled"


def test_a_heterogeneous_role_with_no_spare_of_its_kind_left_is_named():
    """Issue 44: `a role has fewer healthy nodes ...`: which role, how many it has and needs, and how to keep one."""
    pools = ((("node1",), 1), (("node3", "node4"), 1))
    lost = Verdict("machine", "rank 0 (master 0) on node1: lost with its node", ("node1",), lost=True)
    plan = decide(started(), lost, ["node1", "node3", "node4"], 2, 3, pools=pools, requeue=False,
                  roles=("master", "worker"))
    assert plan.action == "give_up"
    assert plan.why == ("role master has 0 healthy nodes of its kind and needs 1: no spare of its kind is left "
                        "(--role master=1:spare=1 holds one), and a heterogeneous job is not requeued")
    assert short_role(pools, ["node1"], ("master", "worker")) == "role master has 0 healthy nodes of its kind and needs 1"
    assert short_role(pools, ["node3"], ("master", "worker")) == ""  # node4 stands in for the worker


@pytest.mark.parametrize("fields, gone", [
    ({"JobState": "RUNNING", "NodeList": "node[1-3]"}, False),
    ({"JobState": "RUNNING", "NodeList": "node[2-3]"}, True),   # Slurm took node1 out of the job
    ({"JobState": "COMPLETING", "NodeList": "node[2-3]"}, None),  # ended or being requeued: stop watching
    ({"JobState": "PENDING", "NodeList": ""}, None),
    ({}, False),  # scontrol failed: ask again
    ({"JobState": "RUNNING", "NodeList": ""}, False)])
def test_the_watcher_acts_only_on_a_running_job_that_lost_its_batch_node(fields, gone):
    assert batch_host_gone(fields, "node1") is gone


def test_the_watcher_reads_the_supervisors_call():
    assert watch_args(["--batch-host", "node1", "--max-restarts", "3"]) == ("node1", 3)
    for bad in (["--batch-host", "node1"], ["--batch-host", "node1", "--max-restarts", "3", "--layout", "2:4"]):
        with pytest.raises(ValueError, match="usage"):
            watch_args(bad)
    args = parse_args(["--nodes", "2", "--ntasks", "4", "--max-restarts", "3", "--spare-nodes", "1", "--", "srun", "x"])
    assert args.layout == (2, 4, 1)


def test_a_requeue_shrinks_the_job_to_the_usable_nodes_left_spares_first():
    assert requeue_size(2, 2, 1, usable=5) == ()  # it fits: keep the spare
    assert requeue_size(2, 2, 1, usable=2, cpus_per_task=4) == ("NumNodes=2", "NumTasks=2", "NumCPUs=8")  # no spare
    assert requeue_size(2, 4, 2, usable=3) == ("NumNodes=3", "NumTasks=6", "NumCPUs=6")  # 2 per node: tasks follow
    assert requeue_size(2, 2, 1, usable=1) == ("NumNodes=2", "NumTasks=2", "NumCPUs=2")  # never below a start's need
    assert requeue_size(2, 2, 0, usable=1) == ()
