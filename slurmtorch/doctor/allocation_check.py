"""The in-allocation check: one process per rank, started as
`python -m slurmtorch.bootstrap --no-init -m slurmtorch.doctor` (what
`slurmtorch doctor --allocation` launches with srun).

The bootstrap derives the world and exports it (env://) but starts no process group, so
every rank can connect to rank 0's store listener (MASTER_ADDR:MASTER_PORT) before any
collective: a node that cannot reach the master says so itself instead of hanging in
init. Then rank 0 prints the rank layout table, an all_reduce correctness check and a
bandwidth table per message size, compared with the node type's link speed when the
site gives one.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import socket
import time
from collections.abc import Mapping, Sequence

from slurmtorch import protocol
from slurmtorch.bootstrap import placement, rendezvous, topology
from slurmtorch.bootstrap.device import bound_per_rank, choose_backend, pick_device
from slurmtorch.bootstrap.fromenv import from_env
from slurmtorch.bootstrap.rankinfo import RankInfo
from slurmtorch.doctor import facts, sitechoice
from slurmtorch.doctor.binding import check_binding, check_placement, cpu_list, cpu_share
from slurmtorch.doctor.bandwidth import DEFAULT_SIZES, Sample, bandwidth_table, check_bandwidth, sweep
from slurmtorch.doctor.consistency import RankRecord, check_layout, check_reach, layout_table
from slurmtorch.doctor.checks import FAIL, OK, Check, any_failed, summary
from slurmtorch.errors import BootstrapError


@dataclasses.dataclass(frozen=True)
class RankOptions:
    site: str | None = None
    node_type: str | None = None
    partition: str | None = None
    budget_s: float = 0.15  # seconds of all_reduce per message size
    connect_timeout: float = 30.0
    sizes: tuple[int, ...] = DEFAULT_SIZES


def parse_rank_args(argv: Sequence[str]) -> RankOptions:
    p = argparse.ArgumentParser(prog="python -m slurmtorch.bootstrap --no-init -m slurmtorch.doctor",
                                description="allocation checks, one process per rank")
    p.add_argument("--site")
    p.add_argument("--node-type")
    p.add_argument("--partition")
    p.add_argument("--max-bytes", type=int, default=DEFAULT_SIZES[-1])
    p.add_argument("--budget", type=float, default=0.15, help="seconds of all_reduce per message size")
    p.add_argument("--connect-timeout", type=float, default=30.0)
    a = p.parse_args(list(argv))
    sizes = tuple(s for s in DEFAULT_SIZES if s <= a.max_bytes) or DEFAULT_SIZES[:1]
    return RankOptions(a.site, a.node_type, a.partition, a.budget, a.connect_timeout, sizes)


def bootstrap_world(env: Mapping[str, str], hostname: str) -> RankInfo:
    """The world the bootstrap derived and exported as env:// variables before running us."""
    if "RANK" not in env or "MASTER_ADDR" not in env:
        raise BootstrapError("the allocation check runs under the bootstrap",
                             tip="python -m slurmtorch.bootstrap --no-init -m slurmtorch.doctor, "
                                 "or `slurmtorch doctor --allocation` inside salloc/sbatch")
    return from_env(env, hostname, "env")


def connect_ms(addr: str, port: int, deadline_s: float) -> float:
    """Milliseconds for a TCP connect to addr:port, retrying refusals until the deadline
    (rank 0 may not listen yet). Raises BootstrapError with the last error."""
    start = time.monotonic()
    last: Exception | None = None
    while True:
        t = time.perf_counter()
        try:
            with socket.create_connection((addr, port), timeout=max(0.5, min(5.0, deadline_s))):
                return (time.perf_counter() - t) * 1e3
        except OSError as exc:
            last = exc
        if time.monotonic() - start > deadline_s:
            raise BootstrapError(
                f"{socket.gethostname()} cannot reach MASTER_ADDR {addr}:{port} within {deadline_s:g} s: {last}",
                tip="check that rank 0's node is reachable on that address (firewall, wrong interface: "
                    "GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME via the site's interfaces)")
        time.sleep(0.1)


def join_group(dist, info: RankInfo, backend: str, connect_timeout: float) -> tuple[str, float]:
    """(backend, connect ms): the process group up, and the master's listener reached.

    Rank 0 starts the store listener inside init_process_group (it then waits for the
    others); everyone else first proves it can reach that listener.
    """
    addr, port = info.master_addr, info.master_port
    if dist.is_initialized():
        return str(dist.get_backend()), connect_ms(addr, port, connect_timeout)
    timeout = datetime.timedelta(seconds=max(60.0, connect_timeout * 2))
    if info.rank == 0:
        dist.init_process_group(backend, timeout=timeout)
        return backend, connect_ms(addr, port, connect_timeout)
    ms = connect_ms(addr, port, connect_timeout)
    dist.init_process_group(backend, timeout=timeout)
    return backend, ms


def allocation_main(argv: Sequence[str]) -> int:
    """One rank of the allocation check (run under `python -m slurmtorch.bootstrap`)."""
    import torch  # lazy: seconds to import, and only a rank's run needs it
    import torch.distributed as dist  # lazy: as above

    opts = parse_rank_args(argv)
    info = bootstrap_world(os.environ, socket.gethostname())
    nt = sitechoice.allocation_node_type(opts.site, opts.node_type, opts.partition, os.environ)
    backend = choose_backend("auto", torch.cuda.is_available(), dist.is_nccl_available(),
                             dist.is_gloo_available(), dist.is_mpi_available(), f"torch {torch.__version__}")
    backend, ms = join_group(dist, info, backend, opts.connect_timeout)
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", pick_device(info.local_rank, info.local_world_size,
                                                  torch.cuda.device_count(), bound_per_rank(os.environ)))
        torch.cuda.set_device(device)
    record = RankRecord(rank=info.rank, world_size=info.world_size, local_rank=info.local_rank,
                        local_world_size=info.local_world_size, node_rank=info.node_rank,
                        num_nodes=info.num_nodes, host=info.hostname,
                        master=f"{info.master_addr}:{info.master_port}", connect_ms=ms, device=str(device),
                        cpus=cpu_list(os.sched_getaffinity(0)),
                        share=cpu_share(os.environ, _node_index(os.environ, info.node_rank),
                                        info.local_world_size, os.cpu_count() or 1),
                        **placement_fields(where_placed(info.local_rank, info.local_world_size)))
    # Plain dicts on the wire: all_gather_object pickles, and a dict needs no class to unpickle.
    gathered: list = [None] * info.world_size
    dist.all_gather_object(gathered, dataclasses.asdict(record))
    value = torch.tensor([float(info.rank + 1)], device=device)
    dist.all_reduce(value)
    samples = sweep(dist, torch, opts.sizes, device, opts.budget_s)
    if info.rank != 0:
        return 0
    return report([RankRecord(**r) for r in gathered], float(value.item()), samples, backend, nt)


def where_placed(local_rank: int, local_world_size: int, root: str = "/") -> placement.Placement:
    """Where this rank runs now (after the bootstrap placed it): its GPU, the NUMA node of its
    CPUs, the NIC nearest its GPU, and whether its CPUs are far from that GPU."""
    topo = topology.read(root, cores_for=())  # where it runs, not how to divide: no cores needed
    gpus = placement.rank_gpus(placement.visible_gpus(os.environ, topo), local_rank, local_world_size,
                               os.environ.get(protocol.GPU_ORDER, "natural"))
    return placement.place(topo, "none", frozenset(os.sched_getaffinity(0)), local_rank, gpus, shared=False)


def placement_fields(p: placement.Placement) -> dict:
    """The RankRecord fields for placement `p` ("-" where there is nothing to name)."""
    def name(value) -> str:
        return "-" if value is None or value == -1 else str(value)
    return {"gpu": name(p.gpu), "numa": name(p.memory_node), "nic": name(p.nic), "gpu_numa": name(p.gpu_node),
            "far": p.far}


def _node_index(env: Mapping[str, str], node_rank: int) -> int:
    """This node's place in the job's node list (SLURM_NODEID), else the world's node rank."""
    nodeid = env.get("SLURM_NODEID", "").strip()
    return int(nodeid) if nodeid.isdigit() else node_rank


def interface_mbps(env: Mapping[str, str], backend: str) -> int | None:
    """The speed of the interface the backend is pinned to (*_SOCKET_IFNAME), if any."""
    ifname = rendezvous.ifname_spec(env, backend)
    if not ifname:
        return None
    picked = rendezvous.pick_interface(ifname, [n for _, n in socket.if_nameindex()])
    return facts.interface_speed(picked) if picked else None


def report(records: Sequence[RankRecord], got: float, samples: Sequence[Sample], backend: str, nt) -> int:
    """Rank 0: print the layout and bandwidth tables and the checks; the exit code."""
    world = len(records)
    print(f"rank layout ({backend}):")
    for line in layout_table(records):
        print(line)
    checks: list[Check] = (check_layout(records, nt) + check_reach(records) + check_binding(records)
                           + check_placement(records))
    expected = world * (world + 1) / 2
    right = got == expected
    checks.append(Check(OK if right else FAIL,
                        f"all_reduce of rank+1 over {world} ranks: {got:g} (expected {expected:g})",
                        "" if right else "report this: a collective gave a wrong sum"))
    num_nodes = len({r.node_rank for r in records})
    print(f"all_reduce bandwidth ({backend}, {world} ranks on {num_nodes} nodes, float32):")
    for line in bandwidth_table(samples, world):
        print(line)
    checks += check_bandwidth(samples, world, num_nodes, nt, interface_mbps(os.environ, backend))
    for c in checks:
        print(c.line())
    print(summary(checks), flush=True)
    return 1 if any_failed(checks) else 0
