"""The doctor's CPU binding check (pure): each rank's CPUs against its share of its node."""

from __future__ import annotations

from slurmtorch.doctor.binding import check_binding, cpu_list, cpu_share, job_cpus_per_node
from slurmtorch.doctor.consistency import RankRecord, layout_table


def record(rank: int, cpus: str, share: int, host: str = "node1") -> RankRecord:
    return RankRecord(rank=rank, world_size=2, local_rank=rank, local_world_size=2, node_rank=0, num_nodes=1,
                      host=host, master="node1:29500", connect_ms=0.5, cpus=cpus, share=share)


def test_cpu_ids_read_as_the_kernels_list_format():
    assert cpu_list([5, 0, 1, 2]) == "0-2,5" and cpu_list([3]) == "3" and cpu_list([]) == ""


def test_slurms_cpus_per_node_expand_to_one_count_per_node():
    assert job_cpus_per_node("2(x3),1") == [2, 2, 2, 1]
    assert job_cpus_per_node("64") == [64]
    assert job_cpus_per_node("") == [] and job_cpus_per_node("2(x") == []


def test_a_ranks_share_is_its_nodes_job_cpus_over_the_ranks_there_else_the_hosts():
    env = {"SLURM_JOB_CPUS_PER_NODE": "4(x2),1"}
    assert [cpu_share(env, node, 2, 99) for node in (0, 1, 2)] == [2, 2, 1]
    assert cpu_share({}, 0, 2, 16) == 8      # outside Slurm: the host's CPUs
    assert cpu_share({}, 0, 4, 2) == 1       # more ranks than CPUs: at least 1


def test_a_rank_below_its_share_warns_with_the_fix_and_full_shares_are_one_ok_line():
    (ok,) = check_binding([record(0, "0", 1), record(1, "1", 1)])
    assert ok.status == "ok" and "every rank has its share" in ok.what and "(1 CPUs each)" in ok.what
    warns = check_binding([record(0, "0", 2), record(1, "0-1", 2)])
    assert [(c.status, c.what) for c in warns] == [
        ("warn", "CPU binding: rank 0 on node1 may use CPUs 0 (1 of its share of 2)")]
    assert "--map-by slot:PE=N" in warns[0].fix and "--cpus-per-task" in warns[0].fix


def test_the_layout_table_shows_each_ranks_cpus():
    header, first, _ = layout_table([record(0, "0", 1), record(1, "1", 1)])
    assert header.split()[-1] == "cpus" and first.split()[-1] == "0"
