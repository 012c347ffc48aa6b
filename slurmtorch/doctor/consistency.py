"""The rank layout of an allocation: what each rank reports about itself, and whether
the reports add up to one consistent world (ranks 0..N-1, one host per node, local
ranks 0..n-1 on every node, one MASTER_ADDR:PORT). Pure: rank 0 of the allocation
check gathers the records and prints these lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slurmtorch.doctor.checks import FAIL, OK, WARN, Check


@dataclass(frozen=True)
class RankRecord:
    """What each rank reports about itself in the allocation check."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    host: str
    master: str  # MASTER_ADDR:MASTER_PORT as this rank sees it
    connect_ms: float  # TCP connect to the master's listener
    device: str = "cpu"
    cpus: str = ""  # the CPUs this rank may run on (sched_getaffinity, as "0-1"), binding.cpu_list
    share: int = 0  # the CPUs it should have: binding.cpu_share
    gpu: str = "-"  # its GPU as the node numbers it (PCI order, bootstrap.placement), "-": none or unknown
    numa: str = "-"  # the NUMA node holding all its CPUs (where its memory goes), "-": none or several
    nic: str = "-"  # the network card nearest its GPU
    gpu_numa: str = "-"  # its GPU's NUMA node
    far: bool = False  # none of its CPUs is on its GPU's NUMA node


def layout_table(records: Sequence[RankRecord]) -> list[str]:
    rows = [("rank", "local", "node", "host", "device", "master", "connect", "gpu", "numa", "nic", "cpus")]
    for r in sorted(records, key=lambda r: r.rank):
        rows.append((str(r.rank), f"{r.local_rank}/{r.local_world_size}", f"{r.node_rank}/{r.num_nodes}",
                     r.host, r.device, r.master, f"{r.connect_ms:.1f} ms", r.gpu, r.numa, r.nic, r.cpus))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def check_layout(records: Sequence[RankRecord], nt=None) -> list[Check]:
    """The world every rank reported is one consistent layout."""
    problems = []
    records = sorted(records, key=lambda r: r.rank)
    n = len(records)
    if [r.rank for r in records] != list(range(n)):
        problems.append(f"ranks {[r.rank for r in records]} are not 0..{n - 1}")
    if {r.world_size for r in records} != {n}:
        problems.append(f"world sizes {sorted({r.world_size for r in records})} but {n} ranks reported")
    if len({r.master for r in records}) != 1:
        problems.append(f"ranks disagree on MASTER_ADDR:PORT ({', '.join(sorted({r.master for r in records}))})")
    by_node: dict[int, list[RankRecord]] = {}
    for r in records:
        by_node.setdefault(r.node_rank, []).append(r)
    num_nodes = {r.num_nodes for r in records}
    if num_nodes != {len(by_node)} or sorted(by_node) != list(range(len(by_node))):
        problems.append(f"node ranks {sorted(by_node)} do not match the node count {sorted(num_nodes)}")
    for node, rs in sorted(by_node.items()):
        hosts = {r.host for r in rs}
        if len(hosts) != 1:
            problems.append(f"node {node} spans hosts {', '.join(sorted(hosts))}")
        if sorted(r.local_rank for r in rs) != list(range(len(rs))) or {r.local_world_size for r in rs} != {len(rs)}:
            problems.append(f"node {node}: local ranks {sorted(r.local_rank for r in rs)} of "
                            f"{sorted({r.local_world_size for r in rs})} for {len(rs)} ranks")
    hosts_per_node = [next(iter({r.host for r in rs})) for _, rs in sorted(by_node.items())]
    if len(set(hosts_per_node)) != len(hosts_per_node):
        problems.append(f"one host appears as several nodes ({', '.join(hosts_per_node)})")
    if records and records[0].node_rank != 0:
        problems.append("rank 0 is not on node 0")
    if problems:
        return [Check(FAIL, "rank layout: " + "; ".join(problems),
                      "launch one step over the whole allocation (srun without -w/-r), and report this if it persists")]
    out = [Check(OK, f"rank layout: {n} ranks on {len(by_node)} nodes, local ranks consistent")]
    if nt is not None and nt.gpus > 0:
        per_node = {len(rs) for rs in by_node.values()}
        if per_node != {nt.gpus}:
            out.append(Check(WARN, f"{'/'.join(map(str, sorted(per_node)))} ranks per node, node type "
                                   f"{nt.name!r} has {nt.gpus} GPUs",
                             f"--ntasks-per-node {nt.gpus} (one rank per GPU)"))
    return out


def check_reach(records: Sequence[RankRecord]) -> list[Check]:
    """Every node connected to the master's listener (a rank that could not never gets here)."""
    worst = max(records, key=lambda r: r.connect_ms)
    nodes = sorted({r.host for r in records})
    return [Check(OK, f"MASTER_ADDR {records[0].master} reachable from all {len(nodes)} nodes "
                      f"(slowest connect {worst.connect_ms:.1f} ms, rank {worst.rank} on {worst.host})")]
