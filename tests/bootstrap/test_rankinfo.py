"""Deriving the world from launcher environments: pure, one layout per test."""

from __future__ import annotations

import pytest

from slurmtorch.errors import BootstrapError
from slurmtorch.bootstrap.fromenv import (SLURM_PORT_BASE, SLURM_PORT_SPAN, detect_source, from_env, from_slurm,
                                            from_torchrun, single, slurm_port)
from slurmtorch.bootstrap.mpiworld import check_mpi_world, world_from_mpi
from slurmtorch.bootstrap.rankinfo import rank_hint, trial_id


def srun_env(procid, nodeid, localid, nodelist="node[1-4]", tasks="2(x4)", ntasks=8, **extra):
    env = {
        "SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(procid), "SLURM_NTASKS": str(ntasks),
        "SLURM_STEP_NUM_TASKS": str(ntasks), "SLURM_LOCALID": str(localid), "SLURM_NODEID": str(nodeid),
        "SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_TASKS_PER_NODE": tasks,
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


def torchrun_env(**over):
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
           "GROUP_WORLD_SIZE": "4", "MASTER_ADDR": "198.18.0.1", "MASTER_PORT": "29500",
           "TORCHELASTIC_RUN_ID": "abc"}
    env.update(over)
    return {k: v for k, v in env.items() if v is not None}


# ------------------------------------------------------------------ detection

@pytest.mark.parametrize("env, source", [
    (torchrun_env(), "torchrun"),
    ({**torchrun_env(), **srun_env(0, 0, 0)}, "torchrun"),  # torchrun started by srun
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, "mpi"),
    ({"PMI_RANK": "0", "PMI_SIZE": "2"}, "mpi"),  # Hydra, or srun --mpi=pmi2
    ({"PMIX_RANK": "0", **srun_env(0, 0, 0)}, "mpi"),  # srun --mpi=pmix
    (srun_env(0, 0, 0), "slurm"),
    ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "env"),
    ({}, "single"),
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}, "single"),  # a one-task batch script
])
def test_detect_source_picks_the_launcher(env, source):
    assert detect_source(env) == source


def test_batch_script_of_multi_task_job_is_refused_not_a_world_of_one():
    with pytest.raises(BootstrapError) as err:
        detect_source({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"})
    assert "srun" in err.value.tip and "SLURM_NTASKS=4" in err.value.message


@pytest.mark.parametrize("env, seen", [
    ({"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "4", "SLURM_NNODES": "4"}, "SLURM_JOB_NUM_NODES=4"),  # sbatch -N4
    ({"SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_STEP_ID": "batch"}, "SLURM_NNODES=2"),
    # salloc's interactive step on node 1 of a 2-node allocation: a step, but not of tasks
    ({"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "SLURM_STEP_ID": "4294967290",
      "SLURM_STEP_NODELIST": "node1", "SLURM_STEP_NUM_NODES": "1"}, "SLURM_STEP_ID=4294967290"),
])
def test_lone_process_in_a_multi_node_job_is_refused_not_a_world_of_one(env, seen):
    with pytest.raises(BootstrapError) as err:
        detect_source(env)
    assert "-node Slurm job" in err.value.message and seen in err.value.message
    assert "srun" in err.value.tip and "--from single" in err.value.tip


@pytest.mark.parametrize("env", [
    {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1"},     # one-node batch script
    {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "1"},     # asked for one task
    {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "batch", "SLURM_NNODES": "1"},
])
def test_lone_process_where_the_job_asked_for_one_is_a_world_of_one(env):
    assert detect_source(env) == "single"


def test_a_task_of_a_multi_node_step_reads_the_step():
    assert detect_source(srun_env(5, 2, 1, SLURM_JOB_NUM_NODES="4", SLURM_STEP_NUM_NODES="4")) == "slurm"


# ------------------------------------------------------------------ torchrun / env://

def test_torchrun_variables_are_taken_as_they_are():
    info = from_torchrun(torchrun_env(), "h3")
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (3, 8, 1, 2)
    assert (info.node_rank, info.num_nodes, info.master_addr, info.master_port) == (1, 4, "198.18.0.1", 29500)
    assert info.source == "torchrun" and info.rank_hosts == ()  # other nodes' hosts unknown


def test_single_node_env_world_knows_every_host():
    env = torchrun_env(WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", GROUP_RANK=None, GROUP_WORLD_SIZE=None,
                       RANK="1", TORCHELASTIC_RUN_ID=None)
    info = from_torchrun(env, "box")
    assert (info.node_rank, info.num_nodes, info.source, info.rank_hosts) == (0, 1, "env", ("box", "box"))


@pytest.mark.parametrize("missing", ["RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"])
def test_missing_env_variable_raises_and_lists_what_was_seen(missing):
    with pytest.raises(BootstrapError) as err:
        from_torchrun(torchrun_env(**{missing: None}), "h")
    assert f"{missing} is missing" in err.value.message
    assert "GROUP_RANK=1" in err.value.message  # the keys it saw


def test_multi_node_env_without_node_rank_is_refused():
    with pytest.raises(BootstrapError, match="GROUP_RANK/NODE_RANK"):
        from_torchrun(torchrun_env(GROUP_RANK=None), "h")


def test_group_rank_and_node_rank_must_agree():
    with pytest.raises(BootstrapError, match="disagree"):
        from_torchrun(torchrun_env(NODE_RANK="2"), "h")


@pytest.mark.parametrize("over, problem", [
    ({"RANK": "8"}, "rank 8 outside"),
    ({"LOCAL_RANK": "2"}, "local rank 2 outside"),
    ({"GROUP_RANK": "4"}, "node rank 4 outside"),
    ({"RANK": "three"}, "not an integer"),
])
def test_impossible_env_worlds_are_refused(over, problem):
    with pytest.raises(BootstrapError, match=problem):
        from_torchrun(torchrun_env(**over), "h")


# ------------------------------------------------------------------ srun without MPI

def test_even_srun_layout():
    info = from_slurm(srun_env(5, 2, 1, SLURMD_NODENAME="node3"), "node3")
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (5, 8, 1, 2)
    assert (info.node_rank, info.num_nodes, info.master_addr) == (2, 4, "node1")
    assert info.nodes == ("node1", "node2", "node3", "node4")
    assert info.rank_hosts[5] == "node3" and info.source == "slurm"


@pytest.mark.parametrize("tasks, nodeid, localid, procid, local_world", [
    ("2(x3),1", 3, 0, 6, 1),   # the example: 7 tasks, last node has one
    ("2,1(x3)", 0, 1, 1, 2),   # 5 tasks on 4 nodes, as srun -N4 -n5 lays them out
    ("2,1(x3)", 3, 0, 4, 1),
    ("3,1", 0, 2, 2, 3),
    ("2,1", 0, 1, 1, 2),       # -N 2 -n 3 (slurmtorch sbatch -N 2 -n 3): 2+1
    ("2,1", 1, 0, 2, 1),
])
def test_uneven_srun_layouts(tasks, nodeid, localid, procid, local_world):
    import hostlist

    ntasks = sum(hostlist.parse_slurm_tasks_per_node(tasks))
    nodes = len(hostlist.parse_slurm_tasks_per_node(tasks))
    env = srun_env(procid, nodeid, localid, nodelist=f"node[1-{nodes}]", tasks=tasks, ntasks=ntasks)
    info = from_slurm(env, f"node{nodeid + 1}")
    assert (info.world_size, info.local_world_size, info.node_rank, info.num_nodes) == (ntasks, local_world, nodeid, nodes)
    assert info.rank_hosts[procid] == f"node{nodeid + 1}"


def test_srun_nodelist_ranges_are_expanded_by_hostlist():
    env = srun_env(3, 3, 0, nodelist="gpu[01-03,07]", tasks="1(x4)", ntasks=4)
    info = from_slurm(env, "gpu07")
    assert info.nodes == ("gpu01", "gpu02", "gpu03", "gpu07") and info.master_addr == "gpu01"


@pytest.mark.parametrize("missing", ["SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_NODELIST",
                                     "SLURM_STEP_TASKS_PER_NODE"])
def test_missing_srun_variable_never_defaults_to_rank_zero(missing):
    env = srun_env(0, 0, 0)
    del env[missing]
    with pytest.raises(BootstrapError) as err:
        from_slurm(env, "node1")
    assert missing in err.value.message and "seen:" in err.value.message


@pytest.mark.parametrize("env, problem", [
    (srun_env(0, 0, 0, ntasks=7), "add up to 8"),
    (srun_env(0, 0, 0, nodelist="node[1-3]"), "3 nodes but tasks for 4"),
    (srun_env(2, 1, 0, SLURMD_NODENAME="node4"), "inherited from another step"),
    (srun_env(0, 1, 0), "rank 0 is not on the step's first node"),
    (srun_env(0, 5, 0), "outside the step's 4 nodes"),
    (srun_env(0, 0, 0, SLURM_STEP_NUM_NODES=3), "SLURM_STEP_NUM_NODES=3"),
    (srun_env(0, 0, 0, tasks="2(x4"), "cannot read srun's step layout"),
    (srun_env(8, 3, 1), "SLURM_PROCID=8 is outside the step's 8 tasks"),
    (srun_env(9, 3, 1, ntasks=8), "SLURM_PROCID=9 is outside"),
])
def test_contradictory_srun_environments_are_refused(env, problem):
    with pytest.raises(BootstrapError, match=problem.replace("(", r"\(")):
        from_slurm(env, "node1")


def test_rank_0_placed_off_the_first_node_by_an_arbitrary_distribution_names_the_hostfile():
    """srun --distribution=arbitrary with SLURM_HOSTFILE starting node2: the error is right,
    and its tip says what to change (not "start every rank with srun": srun did)."""
    env = srun_env(0, 1, 0, SLURM_DISTRIBUTION="arbitrary", SLURMD_NODENAME="node2")
    with pytest.raises(BootstrapError, match="rank 0 is not on the step's first node") as err:
        from_slurm(env, "node2")
    assert "start every rank with `srun`" not in err.value.tip
    assert "srun --distribution=arbitrary put task 0 on SLURM_HOSTFILE's first host" in err.value.tip
    assert "make node1 the first line of SLURM_HOSTFILE" in err.value.tip


def test_cyclic_distribution_does_not_claim_rank_hosts():
    info = from_slurm(srun_env(1, 1, 0, SLURM_DISTRIBUTION="cyclic"), "node2")
    assert info.rank_hosts == () and info.node_rank == 1


def test_srun_port_is_shared_by_all_ranks_and_differs_between_steps():
    a = [slurm_port(srun_env(r, r // 2, r % 2)) for r in range(8)]
    assert len(set(a)) == 1 and SLURM_PORT_BASE <= a[0] < SLURM_PORT_BASE + SLURM_PORT_SPAN
    assert slurm_port({"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "1"}) != a[0]
    assert slurm_port({"SLURM_JOB_ID": "43", "SLURM_STEP_ID": "0"}) != a[0]
    assert slurm_port({"SLURM_JOB_ID": "42", "MASTER_PORT": "23456"}) == 23456


def test_srun_respects_a_master_addr_the_job_exported():
    assert from_slurm(srun_env(1, 0, 1, MASTER_ADDR="198.18.0.11"), "node1").master_addr == "198.18.0.11"


# ------------------------------------------------------------------ MPI cross-checks

def test_pmi2_singleton_trap_is_detected_with_a_fix():
    env = {"PMI_RANK": "1", "PMI_SIZE": "4", "PMI_FD": "11", **srun_env(1, 1, 0, tasks="1(x4)", ntasks=4),
           "SLURM_MPI_TYPE": "pmi2"}
    with pytest.raises(BootstrapError) as err:
        check_mpi_world(0, 1, env)
    assert "world of 1" in err.value.message and "SLURM_MPI_TYPE=pmi2" in err.value.message
    assert "srun --mpi=pmix" in err.value.tip


def test_singleton_under_srun_without_pmi_variables_is_detected():
    with pytest.raises(BootstrapError, match="singleton"):
        check_mpi_world(0, 1, srun_env(3, 1, 1))


def test_mpi_and_launcher_agreeing_passes():
    check_mpi_world(1, 2, {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"})
    check_mpi_world(5, 8, {"PMIX_RANK": "5", **srun_env(5, 2, 1)})
    check_mpi_world(0, 1, {})  # nothing announced: nothing to contradict


def test_mpirun_inside_an_allocation_trusts_open_mpi_over_the_daemon_step():
    # mpirun starts its daemons with srun: SLURM_* then describe 2 daemons, not 8 ranks.
    env = {"OMPI_COMM_WORLD_RANK": "6", "OMPI_COMM_WORLD_SIZE": "8", **srun_env(1, 1, 0, tasks="1(x2)", ntasks=2)}
    check_mpi_world(6, 8, env)


def test_mpi_disagreeing_with_launcher_is_refused():
    with pytest.raises(BootstrapError, match="MPI says rank 1 of 3"):
        check_mpi_world(1, 3, {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"})


def test_mpi_node_order_follows_the_lowest_rank_on_each_node():
    # Ranks placed round-robin over hosts listed b, a, c: node 0 is the one holding rank 0.
    hosts = ["b", "a", "c", "b", "a", "c"]
    leaders = {"b": 0, "a": 1, "c": 2}
    records = [(h, leaders[h]) for h in hosts]
    info = world_from_mpi(4, 6, 1, 2, records, ("198.18.0.2", 1234), {})
    assert (info.node_rank, info.num_nodes, info.nodes) == (1, 3, ("b", "a", "c"))
    assert info.rank_hosts == tuple(hosts) and info.hostname == "a"
    assert (info.master_addr, info.master_port, info.source) == ("198.18.0.2", 1234, "mpi")


def test_mpi_gather_of_wrong_length_is_refused():
    with pytest.raises(BootstrapError):
        world_from_mpi(0, 2, 0, 1, [("a", 0)], ("x", 1), {})


# ------------------------------------------------------------------ small helpers

def test_lone_process_is_a_world_of_one():
    info = single("box", "127.0.0.1", 4000, {"SLURMTORCH_TRIAL": "t7"})
    assert (info.rank, info.world_size, info.num_nodes, info.trial) == (0, 1, 1, "t7")


def test_trial_id_prefers_slurmtorch_trial_over_array_index():
    assert trial_id({"SLURM_ARRAY_TASK_ID": "3"}) == "3"
    assert trial_id({"SLURM_ARRAY_TASK_ID": "3", "SLURMTORCH_TRIAL": "lr-0.1"}) == "lr-0.1"
    assert trial_id({}) is None


def test_rank_hint_for_early_failures_names_its_source():
    assert rank_hint({"PMI_RANK": "3"}) == "?(PMI_RANK=3)"
    assert rank_hint({}) == "?"


def test_from_env_dispatches_on_the_detected_launcher():
    assert from_env(srun_env(1, 0, 1), "node1").source == "slurm"
    assert from_env(torchrun_env(), "h").source == "torchrun"
    with pytest.raises(BootstrapError, match="not derived from variables alone"):
        from_env({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}, "h")
