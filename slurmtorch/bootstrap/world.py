"""This rank's world, derived where it is (the side-effecting edge of the pure derivations).

`derive` reads the launcher's environment (`launchers`) or asks MPI (`mpi`), and on the
rank that hosts the store holds MASTER_PORT (`rendezvous`) until torch binds it.
`place_rank` puts the rank on the CPUs nearest its GPU (`placement`, from the node's
`topology`); `thread_defaults` gives each rank its share of its node's CPUs (a rank alone: all it may use); `own_session`
gives an mpirun rank the session of its own that srun and torchrun give theirs (CPU scheduling).
"""

from __future__ import annotations

import os

from slurmtorch import protocol
from slurmtorch.bootstrap import placement, rendezvous, topology
from slurmtorch.bootstrap import fromenv
from slurmtorch.bootstrap.options import FROM
from slurmtorch.errors import BootstrapError


def derive(source: str = "auto", backend: str = "auto", env=None, hostname: str | None = None,
           role: str | None = None, timeout: float = 0.0):
    """The world and (on the master) the held MASTER_PORT; the side-effecting edge of `launchers`.

    `timeout` (seconds, 0 for none) also bounds MPI_Init: a world that never comes up ends the
    rank at that deadline instead of at the job's time limit."""
    environ = os.environ if env is None else env
    hostname = hostname or os.uname().nodename  # gethostname(2)
    if role is not None:
        info = fromenv.from_roles(environ, hostname, role)
        reservation = None
        if info.rank == 0 and info.in_group:
            reservation = rendezvous.reserve_port(info.master_port)
        else:
            rendezvous.check_reachable(rendezvous.host_address(info.master_addr), info.role_layout.total)
        return info, reservation
    src = fromenv.detect_source(environ) if source == "auto" else source
    backend_hint = "nccl" if backend == "nccl" else "gloo"
    reservation = None
    if src == "mpi":
        from slurmtorch.bootstrap import mpi  # lazy: ~0.7 ms, for MPI worlds only

        mpi.apply_mca_defaults(environ, backend)
        info, reservation = mpi.from_comm(dict(environ), hostname, backend_hint, init_deadline=timeout)
    elif src == "slurm":
        info = fromenv.from_env(environ, hostname, "slurm")
        if info.rank == 0:
            reservation = rendezvous.reserve_port(info.master_port)
        elif info.node_rank != 0:
            rendezvous.check_reachable(rendezvous.host_address(info.master_addr), info.num_nodes)
    elif src in ("env", "torchrun"):
        info = fromenv.from_env(environ, hostname, src)
    elif src == "single":
        port = environ.get("MASTER_PORT", "").strip()
        reservation = rendezvous.reserve_port(int(port) if port.isdigit() else 0)
        addr = environ.get("MASTER_ADDR", "").strip() or "127.0.0.1"
        info = fromenv.single(hostname, addr, reservation.port, environ)
    else:
        raise BootstrapError(f"unknown world source {src!r}", tip=f"use one of {', '.join(FROM)}")
    if src != "slurm":
        rendezvous.check_reachable(info.master_addr, info.num_nodes)
    return info, reservation


def cpus_available() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def place_rank(environ, local_rank: int, local_world_size: int, root: str = "/") -> placement.Placement | None:
    """Decide this rank's placement and apply it: its CPUs (every thread of the process, so
    MPI's progress threads too; what it starts later, data-loader workers included, inherits
    them), OMP_NUM_THREADS and UCX_NET_DEVICES where the user set neither. None (and nothing
    done, nothing said) under `none`, or where the allowed CPUs cannot be read.

    Memory needs no call: Linux allocates a page on the node of the CPU that first touches
    it, which is now the GPU's node; a hard bind (set_mempolicy) could only add an OOM."""
    policy = environ.get(protocol.PLACEMENT, "").strip() or "auto"
    if policy not in protocol.PLACEMENTS or policy == "none":
        return None
    try:
        allowed = frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    shared = placement.shared_by_local_ranks(environ, len(allowed), os.cpu_count() or len(allowed), local_world_size)
    topo = topology.read(root, allowed if shared else ())  # `share` too: it divides by whole cores
    gpus = placement.rank_gpus(placement.visible_gpus(environ, topo), local_rank, local_world_size,
                               environ.get(protocol.GPU_ORDER, "natural"))
    chosen = placement.place(topo, policy, allowed, local_rank, gpus, shared)
    if chosen.cpus and chosen.cpus < allowed:
        _set_affinity(chosen.cpus)
    if chosen.why != "own" and chosen.cpus and "OMP_NUM_THREADS" not in environ:
        environ["OMP_NUM_THREADS"] = str(chosen.threads)
    if chosen.nic and chosen.rdma_nic and "UCX_NET_DEVICES" not in environ:
        environ["UCX_NET_DEVICES"] = f"{chosen.nic}:1"  # UCX (and Open MPI's UCX PML) pick no card by GPU
    return chosen


def _set_affinity(cpus: frozenset[int]) -> None:
    """Every thread of this process onto `cpus` (sched_setaffinity(0) moves the caller only)."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass  # a thread that ended meanwhile


def thread_defaults(environ, local_world_size: int, cpus: int) -> dict[str, str]:
    """Pure: OMP_NUM_THREADS for every rank, unless the user or the site set it.

    Like torchrun, which sets 1 when several ranks share a node: N ranks each starting
    a thread per core oversubscribe the node badly. We give each rank its share:
    srun's SLURM_CPUS_PER_TASK when present, else the CPUs this process may use
    divided by the ranks on the node; a rank alone on its node, all it may use (left
    unset, accelerate warns in every job and gives torch the host's physical cores,
    whatever the job was allotted). Must be set before torch is imported.
    """
    if "OMP_NUM_THREADS" in environ:
        return {}
    per_task = environ.get("SLURM_CPUS_PER_TASK", "").strip()
    threads = int(per_task) if per_task.isdigit() and int(per_task) > 0 else max(1, cpus // max(1, local_world_size))
    return {"OMP_NUM_THREADS": str(threads)}


def own_session(environ) -> bool:
    """Move a rank that Open MPI's mpirun started into a session of its own; True if moved.

    srun starts every task in a session of its own and torchrun every worker; mpirun
    leaves all its ranks in the session it was started from. A kernel with autogroup
    scheduling (kernel.sched_autogroup_enabled=1, the default of most distributions'
    kernels) shares the CPU between sessions first, so there the ranks of one mpirun
    were scheduled as one task against everything else on the node: small gloo
    all_reduces at 8 ranks on 2 cores ran at 0.75-0.8x torchrun's bus bandwidth, and
    at torchrun's with a session per rank (the bootstrap moves a rank once MPI has derived
    its world: Open MPI's ranks wait in a collective by yielding the CPU, and a rank alone
    in its session has nobody to yield to). prterun puts each rank in a process group of
    its own (so its signals reach them by pid) and a group leader cannot start a
    session: the rank joins its parent's group for a moment, then starts its session,
    which is again a group with the rank's pid, so nothing that signals the rank or its
    group changes. Only for Open MPI's ranks (OMPI_COMM_WORLD_SIZE), never for a
    process a shell started in the foreground, whose Ctrl-C would then miss it.
    """
    if "OMPI_COMM_WORLD_SIZE" not in environ:
        return False
    pid = os.getpid()
    try:
        if os.getsid(0) == pid or os.getpgid(0) != pid:
            return False  # already a session's leader (srun --mpi=pmix), or not in a group of its own
        os.setpgid(0, os.getpgid(os.getppid()))
    except OSError:
        return False
    try:
        os.setsid()
    except OSError:
        try:
            os.setpgid(0, 0)  # back to a group of its own, as prterun made it
        except OSError:
            pass
        return False
    return True
