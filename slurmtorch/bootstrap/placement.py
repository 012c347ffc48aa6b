"""Pure: which CPUs, memory node and network card a rank should use, from its node's topology.

A rank whose CPUs sit on another socket than its GPU pays for every host-device copy and
kernel launch across the socket link; torchrun's workers all share their agent's CPUs and
their data-loader workers pile onto each other. The rank's place is decided here, from a
`Topology` (read off the node by `topology.read`, or recorded in tests), the policy, the
rank's GPU and the CPUs it may use (os.sched_getaffinity: what Slurm's cgroup and the
launcher allowed). The result is always a subset of those CPUs: placement narrows, never
widens.

Policies (protocol.PLACEMENTS; SLURMTORCH_PLACEMENT, `--placement`, a site's `placement:`):
- `auto` (default): the CPUs of the GPU's NUMA node, shared fairly (whole cores, in order)
  among the local ranks whose GPUs sit on that node; without a GPU or topology, or where that
  part would be under half the rank's fair share of its allowed CPUs, `share`.
- `share`: a fair share of the allowed CPUs per local rank, GPUs ignored.
- `none`: leave affinity alone.
A launcher that already gave each rank CPUs of its own (srun's task/affinity, mpirun's
--map-by ... PE=N) leaves nothing to share: the rank keeps them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Device:
    """A PCI device as sysfs shows it: its address, NUMA node (-1: unknown) and local CPUs."""

    address: str
    numa_node: int = -1
    cpus: frozenset[int] = frozenset()
    name: str = ""  # a NIC's: its RDMA device (mlx5_0) or, without one, its interface (hsn0)
    rdma: bool = False  # a NIC under /sys/class/infiniband: UCX and MPI name it as DEVICE:PORT
    uuid: str = ""  # an NVIDIA GPU's (GPU-...), which CUDA_VISIBLE_DEVICES may give instead of an index


@dataclass(frozen=True)
class Topology:
    """A node: its NUMA nodes' CPUs, its GPUs in the order CUDA/ROCm count them (PCI order),
    its network cards, and which CPUs are threads of one core (cpu -> the core's first CPU)."""

    numa: Mapping[int, frozenset[int]]
    gpus: tuple[Device, ...] = ()
    nics: tuple[Device, ...] = ()
    cores: Mapping[int, int] = field(default_factory=dict)

    def gpu_node(self, gpu: int) -> int:
        """The NUMA node of GPU `gpu` (a physical index), or -1."""
        if not 0 <= gpu < len(self.gpus):
            return -1
        dev = self.gpus[gpu]
        if dev.numa_node >= 0:
            return dev.numa_node
        holders = [n for n, cpus in self.numa.items() if dev.cpus and dev.cpus <= cpus]
        return holders[0] if len(holders) == 1 else -1


@dataclass(frozen=True)
class Placement:
    """Where a rank runs: its CPUs (a subset of the allowed ones), memory node, NIC, threads;
    `why` says which rule chose them (gpu, share, own, none); `gpu` and `gpu_node` are its GPU
    (physical index) and that GPU's NUMA node, `far` that none of its CPUs is on that node."""

    cpus: frozenset[int]
    memory_node: int | None = None
    nic: str | None = None
    threads: int = 0
    why: str = "none"
    gpu: int | None = None
    gpu_node: int = -1
    far: bool = False
    rdma_nic: bool = False


def parse_cpu_list(text: str) -> frozenset[int]:
    """The kernel's list format ("0-3,8,10-11") as a set; "" -> empty."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


def cpu_list(cpus: Iterable[int]) -> str:
    """CPU ids as the kernel's list format: [0, 1, 2, 5] -> "0-2,5"."""
    out: list[str] = []
    ids = sorted(set(cpus))
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def cores_of(cpus: Iterable[int], cores: Mapping[int, int]) -> list[list[int]]:
    """`cpus` grouped by core (threads of one core together), cores in order of their first CPU."""
    groups: dict[int, list[int]] = {}
    for cpu in sorted(cpus):
        groups.setdefault(cores.get(cpu, cpu), []).append(cpu)
    return [groups[k] for k in sorted(groups, key=lambda k: groups[k][0])]


def split(cpus: Iterable[int], parts: int, index: int, cores: Mapping[int, int]) -> frozenset[int]:
    """Share `index` of `parts` near-equal shares of `cpus`, whole cores each, in CPU order.

    With fewer cores than parts (8 ranks on 2 cores), no share is fair: each keeps them all
    and the scheduler balances, rather than ranks pinned by twos to a core one of them may be
    keeping busy with its data loader (`threads` still divides the cores)."""
    groups = cores_of(cpus, cores)
    if not groups or parts < 1:
        return frozenset()
    if len(groups) < parts:
        return frozenset(cpus)
    base, extra = divmod(len(groups), parts)
    start = index * base + min(index, extra)
    size = base + (1 if index < extra else 0)
    return frozenset(c for g in groups[start:start + size] for c in g)


def gpu_cpus(topo: Topology, gpu: int) -> frozenset[int]:
    """The CPUs nearest GPU `gpu`: its NUMA node's (else its PCI local_cpulist)."""
    node = topo.gpu_node(gpu)
    if node in topo.numa and topo.numa[node]:
        return topo.numa[node]
    return topo.gpus[gpu].cpus if 0 <= gpu < len(topo.gpus) else frozenset()


def nearest_nic(topo: Topology, gpu: int) -> str | None:
    """The network card for GPU `gpu`: the cards on its NUMA node, shared in turn by the GPUs
    there (the k-th GPU of the node takes card k mod n); with none on its node, cards in turn
    by GPU number."""
    if not topo.nics or gpu < 0:
        return None
    node = topo.gpu_node(gpu)
    local = [n for n in topo.nics if node >= 0 and n.numa_node == node]
    if local:
        peers = sorted({g for g in range(len(topo.gpus)) if topo.gpu_node(g) == node})
        return local[peers.index(gpu) % len(local)].name if gpu in peers else local[0].name
    return topo.nics[gpu % len(topo.nics)].name


def cores_count(cpus: Iterable[int], cores: Mapping[int, int]) -> int:
    return len(cores_of(cpus, cores))


def place(topo: Topology | None, policy: str, allowed: frozenset[int], local_rank: int,
          gpus_of_ranks: Sequence[int | None], shared: bool) -> Placement:
    """Pure: this rank's placement.

    `gpus_of_ranks[k]` is local rank k's GPU (a physical index, None: none or unknown);
    `shared`: whether every local rank was started with these same `allowed` CPUs (torchrun's
    workers; a launcher that bound nothing), so they are to be divided, not kept."""
    local_world = max(1, len(gpus_of_ranks))
    gpu = gpus_of_ranks[local_rank] if 0 <= local_rank < len(gpus_of_ranks) else None
    node = topo.gpu_node(gpu) if topo is not None and gpu is not None else -1
    if policy == "none" or not allowed:
        return _placed(allowed, topo, gpu, node, "none")
    if policy == "auto" and topo is not None and gpu is not None and node >= 0:
        near = gpu_cpus(topo, gpu) & allowed
        peers = [k for k, g in enumerate(gpus_of_ranks) if g is not None and topo.gpu_node(g) == node]
        # Near first, but not at any price: a rank whose part of its GPU's node is under half its
        # fair share of what it may use (a cgroup that holds few CPUs there) takes the share instead.
        fair = cores_count(allowed, topo.cores) // local_world
        if shared and near and local_rank in peers and 2 * (cores_count(near, topo.cores) // len(peers)) >= fair:
            return _placed(split(near, len(peers), peers.index(local_rank), topo.cores), topo, gpu, node, "gpu",
                           crowded=cores_count(near, topo.cores) < len(peers))
    if not shared:
        return _placed(allowed, topo, gpu, node, "own")
    cores = topo.cores if topo is not None else {}
    return _placed(split(allowed, local_world, local_rank, cores), topo, gpu, node, "share",
                   crowded=cores_count(allowed, cores) < local_world)


def _placed(cpus: frozenset[int], topo: Topology | None, gpu: int | None, node: int, why: str,
            crowded: bool = False) -> Placement:
    """The placement of `cpus`: the memory node that holds them all, the GPU's network card,
    and the threads to start: one per core, or one in all where ranks outnumber the cores
    (`crowded`: they all keep the CPUs, `split`)."""
    if topo is None:
        return Placement(cpus, threads=1 if crowded else max(1, len(cpus)), why=why, gpu=gpu)
    holders = [n for n, have in topo.numa.items() if have and cpus <= have]
    nic = nearest_nic(topo, gpu) if gpu is not None and node >= 0 else None
    far = node >= 0 and bool(cpus) and not cpus & gpu_cpus(topo, gpu if gpu is not None else -1)
    threads = 1 if crowded else max(1, cores_count(cpus, topo.cores))
    return Placement(cpus, holders[0] if len(holders) == 1 else None, nic, threads, why, gpu, node, far,
                     any(n.name == nic and n.rdma for n in topo.nics))


def shared_by_local_ranks(env: Mapping[str, str], allowed: int, host_cpus: int, local_world: int) -> bool:
    """Pure: whether the local ranks all started with the same CPUs, to be divided among them.

    torchrun starts every worker with its agent's CPUs. Otherwise: the rank may use all of
    its node's CPUs in the job (SLURM_CPUS_ON_NODE; outside Slurm the host's), so no launcher
    bound it (srun --cpu-bind=none, mpirun --bind-to none)."""
    if local_world <= 1:
        return False
    if env.get("TORCHELASTIC_RUN_ID"):
        return True
    on_node = env.get("SLURM_CPUS_ON_NODE", "").strip()
    node_cpus = int(on_node) if on_node.isdigit() and int(on_node) > 0 else host_cpus
    return allowed >= node_cpus


def physical_gpus(env: Mapping[str, str], count: int, uuids: Sequence[str] = ()) -> list[int] | None:
    """The physical GPUs (PCI order) this rank's visible ones are, in visible order; None if
    they cannot be told (a MIG instance, a UUID no GPU here has).

    CUDA_VISIBLE_DEVICES (ROCR_VISIBLE_DEVICES on AMD) names them, by index or by UUID (or a
    unique prefix of one, as CUDA takes it; `uuids`: the node's GPUs' in PCI order). Under
    Slurm's ConstrainDevices an index counts within the job's GPUs, which SLURM_STEP_GPUS
    (else SLURM_JOB_GPUS) names physically; Slurm numbers them as CUDA does, in PCI order."""
    visible = env.get("CUDA_VISIBLE_DEVICES", env.get("ROCR_VISIBLE_DEVICES", "")).strip()
    if not visible:
        return list(range(count))
    ids = _numbers(visible)
    if ids is None:
        return _by_uuid(visible, uuids)
    slurm = _numbers(env.get("SLURM_STEP_GPUS", env.get("SLURM_JOB_GPUS", "")).strip() or "x")
    if slurm and not set(ids) <= set(slurm) and all(i < len(slurm) for i in ids):
        ids = [slurm[i] for i in ids]
    return [i for i in ids if i < count] if count else ids


def visible_gpus(env: Mapping[str, str], topo: Topology | None) -> list[int] | None:
    """`physical_gpus` on `topo`'s GPUs; None without a topology."""
    return physical_gpus(env, len(topo.gpus), [g.uuid for g in topo.gpus]) if topo is not None else None


def _by_uuid(text: str, uuids: Sequence[str]) -> list[int] | None:
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        match = [i for i, u in enumerate(uuids) if u and part.startswith("GPU-") and u.startswith(part)]
        if len(match) != 1:
            return None
        out.append(match[0])
    return out or None


def _numbers(text: str) -> list[int] | None:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    return [int(p) for p in parts] if parts and all(p.isdigit() for p in parts) else None


def rank_gpus(visible: Sequence[int] | None, local_rank: int, local_world: int,
              order: str = "natural") -> list[int | None]:
    """Each local rank's physical GPU, as the bootstrap picks it (device.pick_device): local
    rank k takes visible GPU k (reverse: n-1-k) when every rank sees them all; a rank bound to
    one GPU (--gpus-per-task) takes it, its peers' unknown; None where it cannot be told."""
    out: list[int | None] = [None] * local_world
    if not visible:
        return out
    if len(visible) >= local_world:
        n = len(visible)
        return [visible[n - 1 - k if order == "reverse" else k] for k in range(local_world)]
    if len(visible) == 1 and 0 <= local_rank < local_world:
        out[local_rank] = visible[0]
    return out
