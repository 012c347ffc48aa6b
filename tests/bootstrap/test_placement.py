"""Placement on recorded topologies of real machines (tests/topologies/<name>/, each README
citing its source line by line): the sysfs tree each describes is written out and read back
by the reader, then each rank's place is decided as the bootstrap decides it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recorded_topology import MACHINES, TOPOLOGIES, write_sysfs
from slurmtorch.bootstrap import topology
from slurmtorch.bootstrap.placement import (Placement, Topology, cpu_list, parse_cpu_list, physical_gpus, place,
                                            rank_gpus, shared_by_local_ranks, split, visible_gpus)

def recorded(name: str, tmp_path: Path) -> tuple[dict, Topology]:
    spec = json.loads((TOPOLOGIES / name / "topology.json").read_text())
    topo = topology.read(write_sysfs(spec, tmp_path / name))
    assert topo is not None
    return spec, topo


def all_cpus(topo: Topology) -> frozenset[int]:
    return frozenset().union(*topo.numa.values())


def places(topo: Topology, allowed: frozenset[int], ranks: int, order: str = "natural",
           shared: bool = True) -> list[Placement]:
    gpus = rank_gpus(list(range(len(topo.gpus))), 0, ranks, order)
    return [place(topo, "auto", allowed, k, gpus, shared) for k in range(ranks)]


# ------------------------------------------------------------------ the reader, on every machine

@pytest.mark.parametrize("name", MACHINES)
def test_the_reader_finds_every_gpu_nic_and_numa_node_the_source_records(name, tmp_path):
    spec, topo = recorded(name, tmp_path)
    assert [g.address for g in topo.gpus] == sorted(g["address"] for g in spec["gpus"])  # PCI order
    ordered = sorted(spec["gpus"], key=lambda g: g["address"])
    assert [(g.numa_node, g.uuid) for g in topo.gpus] == [(g["numa_node"], g.get("uuid", "")) for g in ordered]
    assert sorted(n.name for n in topo.nics) == sorted(n["name"] for n in spec["nics"])
    assert topo.numa == {int(k): parse_cpu_list(v) for k, v in spec["numa"].items() if v}  # CPU-less nodes out


def test_the_reader_says_nothing_of_a_node_it_cannot_read(tmp_path):
    assert topology.read(tmp_path) is None
    garbled = tmp_path / "garbled/sys/devices/system/node/node0"
    garbled.mkdir(parents=True)
    (garbled / "cpulist").write_text("0-x\n")  # never a failed rank over a file it cannot parse
    assert topology.read(tmp_path / "garbled") is None


def test_four_recorded_machines_of_the_families_the_presets_name():
    assert {"azure-ndv5-h100", "lumi-g-mi250x", "alcf-polaris-a100", "cscs-alps-gh200"} <= set(MACHINES)
    for name in MACHINES:
        assert "https://" in (TOPOLOGIES / name / "README.md").read_text(), f"{name} cites no source"


# ------------------------------------------------------------------ the decisions, machine by machine

def test_h100_8_gpu_torchrun_ranks_each_get_12_cpus_of_their_gpus_socket_and_its_own_nic(tmp_path):
    _, topo = recorded("azure-ndv5-h100", tmp_path)
    got = places(topo, all_cpus(topo), 8)
    assert [cpu_list(p.cpus) for p in got] == ["48-59", "60-71", "72-83", "84-95", "0-11", "12-23", "24-35", "36-47"]
    assert [p.memory_node for p in got] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [p.nic for p in got] == [f"mlx5_ib{k}" for k in range(8)]
    assert {p.threads for p in got} == {12} and all(p.rdma_nic and not p.far for p in got)


# LUMI's documented masks for GCDs 0..7 (lumi-userguide lumig-job.md; site-configs/lumi-g.yaml).
LUMI_MASKS = "0xfe000000000000,0xfe00000000000000,0xfe0000,0xfe000000,0xfe,0xfe00,0xfe00000000,0xfe0000000000"


def mask_cpus(mask: str) -> frozenset[int]:
    bits = int(mask, 16)
    return frozenset(i for i in range(bits.bit_length()) if bits >> i & 1)


@pytest.mark.parametrize("smt", [False, True], ids=["nomultithread", "two-threads-per-core"])
def test_mi250x_ranks_sharing_the_node_get_exactly_lumis_documented_masks(tmp_path, smt):
    spec, topo = recorded("lumi-g-mi250x", tmp_path)
    allowed = all_cpus(topo) - parse_cpu_list(spec["reserved"])
    if not smt:
        allowed = frozenset(c for c in allowed if c < 64)
    got = places(topo, allowed, 8)
    for gcd, (p, mask) in enumerate(zip(got, LUMI_MASKS.split(","))):
        want = mask_cpus(mask)
        assert p.cpus == (want | {c + 64 for c in want} if smt else want), f"GCD {gcd}: {cpu_list(p.cpus)}"
        assert p.threads == 7 and p.memory_node == topo.gpu_node(gcd)


def test_mi250x_ranks_that_srun_bound_with_the_masks_keep_them(tmp_path):
    _, topo = recorded("lumi-g-mi250x", tmp_path)
    for gcd, mask in enumerate(LUMI_MASKS.split(",")):
        gpus = rank_gpus([gcd], gcd, 8)  # --gpus-per-task=1: each rank sees its own GCD
        p = place(topo, "auto", mask_cpus(mask), gcd, gpus, shared=False)
        assert (p.cpus, p.why, p.far, p.memory_node) == (mask_cpus(mask), "own", False, topo.gpu_node(gcd))


def test_a100_4_gpu_ranks_follow_their_gpus_numa_node_in_either_gpu_order(tmp_path):
    _, topo = recorded("alcf-polaris-a100", tmp_path)
    natural = places(topo, all_cpus(topo), 4)
    assert [cpu_list(p.cpus) for p in natural] == ["24-31,56-63", "16-23,48-55", "8-15,40-47", "0-7,32-39"]
    assert [p.threads for p in natural] == [8, 8, 8, 8]
    # The NIC on the GPU's node where there is one (GPU1: mlx5_1, GPU3: mlx5_0), else in turn.
    assert [p.nic for p in natural] == ["mlx5_0", "mlx5_1", "mlx5_0", "mlx5_0"]
    reverse = places(topo, all_cpus(topo), 4, "reverse")  # ALCF's order: rank 0 -> GPU3 -> CPUs 0-7
    assert cpu_list(reverse[0].cpus) == "0-7,32-39" and reverse[0].gpu == 3


def test_srun_bound_ranks_on_a_board_whose_gpu0_sits_by_the_last_numa_node_take_gpu_n_minus_1_minus_i(tmp_path):
    """srun binds local rank i to NUMA node i's cores (-c 16 of the A100 board's 64 threads); GPU 0
    sits by NUMA 3 (ALCF's affinity table). In the natural order every rank drives a GPU across
    the socket; with the node type's gpu_order: reverse (SLURMTORCH_GPU_ORDER) rank i takes GPU
    3-i, the one beside the CPUs srun gave it."""
    _, topo = recorded("alcf-polaris-a100", tmp_path)
    bound = [topo.numa[i] for i in range(4)]  # what srun's block distribution gives rank i
    for order, far in (("natural", [True, True, True, True]), ("reverse", [False, False, False, False])):
        got = [place(topo, "auto", bound[i], i, rank_gpus([0, 1, 2, 3], i, 4, order), shared=False) for i in range(4)]
        assert [p.gpu for p in got] == ([0, 1, 2, 3] if order == "natural" else [3, 2, 1, 0])
        assert [p.far for p in got] == far and [p.cpus for p in got] == bound  # srun's CPUs are kept
    assert [p.memory_node for p in [place(topo, "auto", bound[i], i, rank_gpus([0, 1, 2, 3], i, 4, "reverse"),
                                          shared=False) for i in range(4)]] == [0, 1, 2, 3]


def test_gh200_ranks_get_their_own_grace_and_srun_bound_ranks_keep_what_srun_gave(tmp_path):
    _, topo = recorded("cscs-alps-gh200", tmp_path)
    shared = places(topo, all_cpus(topo), 4)
    assert [cpu_list(p.cpus) for p in shared] == ["0-71", "72-143", "144-215", "216-287"]  # CSCS's -c72 layout
    assert [p.nic for p in shared] == ["hsn0", "hsn1", "hsn2", "hsn3"] and not any(p.rdma_nic for p in shared)
    # srun -n4 --gpus-per-task=1 (CSCS's example): rank i on cores [72i:72i+7], GPU i.
    for i in range(4):
        own = frozenset(range(72 * i, 72 * i + 8))
        p = place(topo, "auto", own, i, rank_gpus([i], i, 4), shared=False)
        assert (p.cpus, p.memory_node, p.far) == (own, i, False)


def test_near_cpus_are_not_taken_at_the_price_of_most_of_a_ranks_share(tmp_path):
    _, topo = recorded("azure-ndv5-h100", tmp_path)
    # A cgroup with 2 CPUs on GPU0's socket (48-95) and 30 on the other: 2 torchrun workers
    # on GPUs 0 and 1 would get one CPU each near; they get 16 each instead.
    allowed = frozenset({48, 49} | set(range(30)))
    got = [place(topo, "auto", allowed, k, rank_gpus([0, 1], 0, 2), True) for k in range(2)]
    assert [(p.why, len(p.cpus)) for p in got] == [("share", 16), ("share", 16)]
    # 4 workers on GPUs 0-3, the whole node allowed: 12 near each (half of 24) is still near.
    four = [place(topo, "auto", all_cpus(topo), k, rank_gpus(list(range(8)), 0, 4), True) for k in range(4)]
    assert [cpu_list(p.cpus) for p in four] == ["48-59", "60-71", "72-83", "84-95"]


def test_a_gpu_named_by_uuid_is_found_through_the_drivers_information_file(tmp_path):
    # Some sites' prologues (and container runtimes) give CUDA_VISIBLE_DEVICES as UUIDs.
    _, topo = recorded("cscs-alps-gh200", tmp_path)
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-170b8198-a3e1-de6a-ff82-d440f71c05da"}, topo) == [2]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-0e184efb,GPU-2ae325c4"}, topo) == [3, 0]  # CUDA takes prefixes
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "MIG-4b1c2d3e-0000-1111-2222-333344445555"}, topo) is None
    p = place(topo, "auto", frozenset(range(288)), 0, rank_gpus([2], 0, 4), shared=False)
    assert (p.gpu, p.memory_node, p.nic) == (2, None, "hsn2")


def test_a_rank_bound_to_cpus_on_another_socket_than_its_gpu_is_marked_far(tmp_path):
    _, topo = recorded("azure-ndv5-h100", tmp_path)
    p = place(topo, "auto", frozenset(range(0, 12)), 0, rank_gpus([0], 0, 8), shared=False)  # GPU0 is on 48-95
    assert p.far and p.cpus == frozenset(range(12))


# ------------------------------------------------------------------ never wider, whatever the input

@pytest.fixture(scope="module")
def machines(tmp_path_factory) -> dict[str, Topology]:
    return {name: recorded(name, tmp_path_factory.mktemp("m"))[1] for name in MACHINES}


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(MACHINES), keep=st.integers(1, 2**30), ranks=st.integers(1, 8),
       policy=st.sampled_from(["auto", "share", "none"]), shared=st.booleans())
def test_a_placement_is_always_within_the_allowed_cpus_and_shares_never_overlap(
        machines, name, keep, ranks, policy, shared):
    topo = machines[name]
    cpus = sorted(all_cpus(topo))
    allowed = frozenset(c for i, c in enumerate(cpus) if keep >> (i % 30) & 1)
    gpus = rank_gpus(list(range(len(topo.gpus))), 0, ranks)
    got = [place(topo, policy, allowed, k, gpus, shared) for k in range(ranks)]
    assert all(p.cpus <= allowed for p in got)
    if policy != "none" and shared and len(allowed) >= 2 * ranks:
        assert all(p.cpus for p in got)
        if policy == "share":
            assert len(frozenset().union(*(p.cpus for p in got))) == sum(len(p.cpus) for p in got)


# ------------------------------------------------------------------ without a topology, and the inputs

def test_without_a_topology_shared_cpus_are_split_fairly_and_own_cpus_kept():
    allowed = frozenset(range(8))
    assert [place(None, "auto", allowed, k, [None] * 3, True).cpus for k in range(3)] == \
        [frozenset({0, 1, 2}), frozenset({3, 4, 5}), frozenset({6, 7})]
    assert place(None, "auto", allowed, 1, [None] * 3, False).cpus == allowed
    assert place(None, "none", allowed, 1, [None] * 3, True).cpus == allowed


def test_a_share_keeps_the_threads_of_a_core_together():
    cores = {c: c % 4 for c in range(8)}  # CPUs c and c+4 are one core
    assert split(range(8), 2, 0, cores) == {0, 1, 4, 5} and split(range(8), 2, 1, cores) == {2, 3, 6, 7}


def test_ranks_outnumbering_the_cores_all_keep_them_and_start_one_thread_each():
    # 8 torchrun workers on 2 cores: pinning them by fours would leave a core to whichever
    # four are busiest; unpinned, the scheduler balances. Never wider all the same.
    got = [place(None, "auto", frozenset({0, 1}), k, [None] * 8, True) for k in range(8)]
    assert {(p.cpus, p.threads) for p in got} == {(frozenset({0, 1}), 1)}


@pytest.mark.parametrize("env, allowed, host, local, want", [
    ({"TORCHELASTIC_RUN_ID": "x"}, 4, 64, 4, True),  # torchrun's workers share their agent's CPUs
    ({"SLURM_CPUS_ON_NODE": "2"}, 1, 2, 2, False),  # srun bound each task to one of the two
    ({"SLURM_CPUS_ON_NODE": "2"}, 2, 2, 2, True),  # --cpu-bind=none: each sees the node's two
    ({}, 1, 2, 2, False),  # mpirun's --map-by ... PE=1 outside Slurm
    ({}, 2, 2, 1, False),  # one rank: nothing to share
])
def test_ranks_share_their_cpus_when_no_launcher_divided_them(env, allowed, host, local, want):
    assert shared_by_local_ranks(env, allowed, host, local) is want


@pytest.mark.parametrize("env, count, want", [
    ({}, 4, [0, 1, 2, 3]),
    ({"CUDA_VISIBLE_DEVICES": "2,3"}, 4, [2, 3]),
    ({"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_STEP_GPUS": "2,3"}, 4, [2, 3]),  # ConstrainDevices: counted in the job's
    ({"CUDA_VISIBLE_DEVICES": "2", "SLURM_STEP_GPUS": "2,3"}, 4, [2]),
    ({"ROCR_VISIBLE_DEVICES": "5"}, 8, [5]),
    ({"CUDA_VISIBLE_DEVICES": "GPU-2ae325c4"}, 4, None),  # UUIDs: cannot be told without NVML
])
def test_a_ranks_visible_gpus_are_mapped_to_the_nodes_physical_ones(env, count, want):
    assert physical_gpus(env, count) == want
