"""The doctor's CPU binding and placement checks (pure): each rank's CPUs against its share of its
node, and against its GPU's NUMA node; and where a rank runs, read off a recorded node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recorded_topology import TWO_SOCKETS, write_sysfs
from slurmtorch.doctor.binding import check_binding, check_placement, cpu_list, cpu_share, job_cpus_per_node
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


def placed(rank: int, cpus: str, gpu: str = "-", gpu_numa: str = "-", far: bool = False) -> RankRecord:
    return RankRecord(rank=rank, world_size=2, local_rank=rank, local_world_size=2, node_rank=0, num_nodes=1,
                      host="node1", master="node1:29500", connect_ms=0.5, cpus=cpus, share=1, gpu=gpu,
                      numa=gpu_numa if not far else "-", nic="mlx5_0", gpu_numa=gpu_numa, far=far)


def test_the_layout_table_names_each_ranks_gpu_numa_node_and_nic_before_its_cpus():
    header, first, _ = layout_table([placed(0, "48-59", "0", "0"), placed(1, "60-71", "1", "0")])
    assert header.split()[-4:] == ["gpu", "numa", "nic", "cpus"]
    assert first.split()[-4:] == ["0", "0", "mlx5_0", "48-59"]


def test_a_rank_on_no_cpu_of_its_gpus_numa_node_warns_and_placed_ranks_are_one_ok_line():
    (ok,) = check_placement([placed(0, "48-59", "0", "0"), placed(1, "60-71", "1", "0")])
    assert ok.status == "ok" and "every rank runs on its GPU's NUMA node" in ok.what
    warns = check_placement([placed(0, "0-11", "0", "0", far=True), placed(1, "60-71", "1", "0")])
    assert [(c.status, c.what) for c in warns] == [
        ("warn", "placement: rank 0 on node1 runs on CPUs 0-11, none of them on its GPU 0's NUMA node 0")]
    assert "--placement auto" in warns[0].fix
    assert check_placement([placed(0, "0"), placed(1, "1")]) == []  # no GPUs: nothing to say


WHERE = """\
import json, os, sys
from slurmtorch.doctor.allocation_check import placement_fields, where_placed
os.sched_setaffinity(0, {int(sys.argv[2])})
print(json.dumps(placement_fields(where_placed(0, 2, sys.argv[1]))))
"""


@pytest.mark.skipif(os.sched_getaffinity(0) != {0, 1}, reason="written for this host's CPUs 0 and 1")
@pytest.mark.parametrize("cpu, far, numa", [(0, False, "0"), (1, True, "1")])
def test_the_doctor_reads_where_a_rank_runs_off_the_node(tmp_path, cpu, far, numa):
    root = write_sysfs(TWO_SOCKETS, tmp_path)
    r = subprocess.run([sys.executable, "-c", WHERE, str(root), str(cpu)], capture_output=True, text=True,
                       env={"PATH": os.environ["PATH"], "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"gpu": "0", "numa": numa, "nic": "mlx5_0", "gpu_numa": "0", "far": far}
