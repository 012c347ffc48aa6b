"""The compatibility contracts a RankInfo turns into: pure."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from slurmtorch.bootstrap.contracts import cluster_spec, env_for, init_args, tf_config, unset_keys
from slurmtorch.errors import BootstrapError
from slurmtorch.bootstrap.rankinfo import RankInfo
from slurmtorch.limits import fits_env


def make(rank=0, world=4, local_rank=0, local_world=2, node_rank=0, nodes=("n1", "n2"), trial=None,
         hosts=None, addr="198.18.0.1", port=29500):
    if hosts is None:
        hosts = tuple(h for h in nodes for _ in range(world // len(nodes)))
    return RankInfo(rank=rank, world_size=world, local_rank=local_rank, local_world_size=local_world,
                    node_rank=node_rank, num_nodes=len(nodes), master_addr=addr, master_port=port,
                    hostname=hosts[rank] if hosts else "n?", source="mpi", nodes=tuple(nodes),
                    rank_hosts=tuple(hosts), trial=trial)


def test_env_vars_follow_torchrun_names_plus_node_rank():
    env = env_for(make(rank=3, local_rank=1, node_rank=1))
    assert {k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE")} == {
        "MASTER_ADDR": "198.18.0.1", "MASTER_PORT": "29500", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "1", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"}
    assert all(isinstance(v, str) for v in env.values())


def test_rank_zero_is_master_in_cluster_spec_and_chief_in_tf_config():
    info = make(rank=0)
    spec, tf = json.loads(env_for(info)["CLUSTER_SPEC"]), json.loads(env_for(info)["TF_CONFIG"])
    assert spec["cluster"] == {"master": ["198.18.0.1:29500"], "worker": ["n1:29501", "n2:29502", "n2:29503"]}
    assert spec["task"] == {"type": "master", "index": 0}
    assert tf["cluster"] == {"chief": ["198.18.0.1:29500"], "worker": ["n1:29501", "n2:29502", "n2:29503"]}
    assert tf["task"] == {"type": "chief", "index": 0}


@pytest.mark.parametrize("trial", [None, "5", 'a"b\\c', "tab\there", "caf\u00e9 \U0001F600", "\x00\x1f"])
def test_the_maps_are_compact_json_text_byte_for_byte(trial):
    info = make(rank=2, world=4, trial=trial, hosts=("n1", "n1", 'odd"host', "n\u00f8de"))
    env = env_for(info)
    assert env["CLUSTER_SPEC"] == json.dumps(cluster_spec(info), separators=(",", ":"))
    assert env["TF_CONFIG"] == json.dumps(tf_config(info), separators=(",", ":"))
    assert json.loads(env["CLUSTER_SPEC"]) == cluster_spec(info) and json.loads(env["TF_CONFIG"]) == tf_config(info)


def test_other_ranks_are_workers_indexed_from_zero():
    info = make(rank=3, local_rank=1, node_rank=1, trial="5")
    assert cluster_spec(info)["task"] == {"type": "worker", "index": 2, "trial": "5"}
    assert tf_config(info)["task"] == {"type": "worker", "index": 2, "trial": "5"}
    assert env_for(info)["SLURMTORCH_TRIAL"] == "5"


def test_world_of_one_has_no_workers():
    info = make(world=1, local_world=1, nodes=("box",))
    assert cluster_spec(info)["cluster"] == {"master": ["198.18.0.1:29500"]}
    assert tf_config(info)["cluster"] == {"chief": ["198.18.0.1:29500"]}


def test_cluster_maps_are_left_out_when_hosts_are_unknown():
    env = env_for(make(hosts=()))  # multi-node torchrun: other ranks' hosts are unknown
    assert "CLUSTER_SPEC" not in env and "TF_CONFIG" not in env and env["RANK"] == "0"


def test_every_process_knows_its_job_rank_parameter_servers_included():
    from slurmtorch.bootstrap.fromenv import from_roles

    assert env_for(make(rank=3))["SLURMTORCH_JOB_RANK"] == "3"
    env = {"SLURMTORCH_ROLES": "master=1,worker=2,ps=1", "SLURM_JOB_NODELIST": "node[1-4]", "SLURM_PROCID": "0",
           "SLURM_JOB_ID": "42"}
    ps = env_for(from_roles(env, "node4", "ps"))
    assert ps["SLURMTORCH_JOB_RANK"] == "3" and "RANK" not in ps  # SLURM_PROCID=0 within its own step


def test_inherited_cluster_maps_are_removed_when_this_rank_cannot_build_them():
    assert unset_keys(env_for(make())) == ["SLURMTORCH_OMITTED"]
    assert set(unset_keys(env_for(make(hosts=())))) == {"CLUSTER_SPEC", "TF_CONFIG", "SLURMTORCH_OMITTED"}


def test_bootstrap_removes_a_stale_cluster_spec_it_cannot_rebuild(tmp_path):
    # Multi-node env:// world (other nodes' hosts unknown), started from a process that
    # had its own CLUSTER_SPEC/TF_CONFIG: they must not reach the script.
    script = tmp_path / "show.py"
    script.write_text("import os; print('SEEN', os.environ.get('CLUSTER_SPEC'), os.environ.get('TF_CONFIG'))\n")
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "198.18.0.11", "MASTER_PORT": "29500",
           "CLUSTER_SPEC": '{"cluster": {"master": ["old:1"]}}', "TF_CONFIG": '{"cluster": {}}'}
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.bootstrap", "--from", "env", "--no-init", str(script)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "SEEN None None" in proc.stdout


def test_nominal_ports_wrap_below_65536():
    info = make(port=65534)
    assert cluster_spec(info)["cluster"]["worker"] == ["n1:65535", "n2:1024", "n2:1025"]


def test_init_args_per_rank_are_modelarts_style():
    assert init_args(make(rank=2, node_rank=1)) == [
        "--init_method", "tcp://198.18.0.1:29500", "--rank", "2", "--world_size", "4"]


def test_init_args_per_node_give_node_rank_and_node_count():
    info = make(rank=1, world=2, local_world=1, node_rank=1)
    assert init_args(info, "node") == ["--init_method", "tcp://198.18.0.1:29500", "--rank", "1", "--world_size", "2"]


def test_init_args_per_node_refuse_several_tasks_per_node():
    with pytest.raises(BootstrapError, match="each would claim the same rank"):
        init_args(make(rank=1, local_rank=1), "node")


def test_init_method_brackets_ipv6():
    assert init_args(make(addr="fd00::1"))[1] == "tcp://[fd00::1]:29500"


def test_mpi_world_overrides_slurm_task_variables_inherited_from_the_mpi_daemon():
    """mpirun in an allocation: every rank inherits its prted's SLURM_PROCID (the node index)."""
    from dataclasses import replace

    from slurmtorch.bootstrap.contracts import slurm_task_env

    info = replace(make(rank=3, world=4, local_rank=1, local_world=2, node_rank=1), source="mpi")
    inherited = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "1"}
    assert slurm_task_env(info, inherited) == {
        "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NTASKS": "4",
        "SLURM_NPROCS": "4", "SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "2",
        # idr_torch reads the step's (the daemons' step: one task per node) and SLURM_STEP_ID.
        "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_STEP_NODELIST": "n1,n2", "SLURM_STEP_ID": "0"}


def test_the_step_variables_follow_uneven_layouts_in_node_order_and_keep_the_inherited_step_id():
    from dataclasses import replace

    from slurmtorch.bootstrap.contracts import slurm_task_env

    hosts = ("n9", "n9", "n9", "n1", "n1", "n1", "n5")
    info = replace(make(rank=6, world=7, local_rank=0, local_world=1, node_rank=2, nodes=("n9", "n1", "n5"),
                        hosts=hosts), source="mpi")
    env = slurm_task_env(info, {"SLURM_PROCID": "2", "SLURM_STEP_ID": "3"})
    assert (env["SLURM_STEP_TASKS_PER_NODE"], env["SLURM_STEP_NODELIST"], env["SLURM_STEP_ID"]) == (
        "3(x2),1", "n9,n1,n5", "3")


def test_torchrun_workers_get_their_own_slurm_task_variables_not_their_agents():
    from dataclasses import replace

    from slurmtorch.bootstrap.contracts import slurm_task_env

    # Multi-node torchrun: the other nodes' hosts are unknown; the agents' step node list is kept.
    info = replace(make(rank=5, world=8, local_rank=1, local_world=4, node_rank=1), source="torchrun",
                   nodes=(), rank_hosts=())
    env = slurm_task_env(info, {"SLURM_PROCID": "1", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[1-2]"})
    assert (env["SLURM_PROCID"], env["SLURM_LOCALID"], env["SLURM_STEP_NUM_TASKS"], env["SLURM_STEP_TASKS_PER_NODE"]) \
        == ("5", "1", "8", "4(x2)")
    assert "SLURM_STEP_NODELIST" not in env


def test_every_mpi_rank_gets_the_whole_slurm_task_set_even_where_its_own_already_agree():
    """mpirun -N 2 -n 3 in an allocation: rank 0 keeps the batch script's SLURM_PROCID=0 and
    SLURM_NTASKS=3, which agree; it must still get SLURM_NTASKS_PER_NODE etc. like the others."""
    from dataclasses import replace

    from slurmtorch.bootstrap.contracts import slurm_task_env

    batch = {"SLURM_PROCID": "0", "SLURM_NTASKS": "3", "SLURM_TASKS_PER_NODE": "2,1"}
    hosts = ("n1", "n1", "n2")
    ranks = [replace(make(rank=r, world=3, local_rank=lr, local_world=lw, node_rank=n, hosts=hosts), source="mpi")
             for r, lr, lw, n in ((0, 0, 2, 0), (1, 1, 2, 0), (2, 0, 1, 1))]
    sets = [slurm_task_env(info, batch) for info in ranks]
    assert all(set(s) == set(sets[0]) for s in sets) and "SLURM_NTASKS_PER_NODE" in sets[0]
    assert [(s["SLURM_PROCID"], s["SLURM_LOCALID"], s["SLURM_NODEID"], s["SLURM_NTASKS_PER_NODE"]) for s in sets] == \
        [("0", "0", "0", "2"), ("1", "1", "0", "2"), ("2", "0", "1", "1")]
    assert {s["SLURM_NTASKS"] for s in sets} == {"3"} and {s["SLURM_NNODES"] for s in sets} == {"2"}


def test_slurm_task_variables_are_left_alone_when_absent_or_srun_started_the_ranks():
    from dataclasses import replace

    from slurmtorch.bootstrap.contracts import slurm_task_env

    info = replace(make(rank=3, world=4), source="mpi")
    assert slurm_task_env(info, {}) == {}
    assert slurm_task_env(replace(info, source="slurm"), {"SLURM_PROCID": "0"}) == {}


def test_a_cluster_map_too_big_for_execve_is_left_out_and_named():
    from dataclasses import replace

    # 16k ranks: CLUSTER_SPEC and TF_CONFIG list every host:port, ~300 KB each; exported,
    # every program the rank starts would fail with E2BIG ("Argument list too long").
    size = 16384
    hosts = tuple(f"node{r // 8:05d}" for r in range(size))
    info = RankInfo(rank=5, world_size=size, local_rank=5, local_world_size=8, node_rank=0, num_nodes=size // 8,
                    master_addr="198.18.0.1", master_port=29500, hostname=hosts[5], source="mpi", rank_hosts=hosts)
    env = env_for(info)
    assert "CLUSTER_SPEC" not in env and "TF_CONFIG" not in env
    assert env["SLURMTORCH_OMITTED"] == "CLUSTER_SPEC,TF_CONFIG"
    assert all(fits_env(k, v) for k, v in env.items())
    small = env_for(replace(info, world_size=16, num_nodes=2, rank_hosts=hosts[:16]))
    assert "CLUSTER_SPEC" in small and "SLURMTORCH_OMITTED" not in small
    assert "SLURMTORCH_OMITTED" in unset_keys(small)  # a parent's note never leaks into a small world
