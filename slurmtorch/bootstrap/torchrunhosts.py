"""Every node's host under a torchrun of several nodes, asked of its agents' store.

A torchrun worker knows its own node only (RANK, GROUP_RANK, LOCAL_WORLD_SIZE), so
CLUSTER_SPEC and TF_CONFIG, which name every rank's host, were left out on 2 nodes and a
Vertex-style script failed with `KeyError: 'CLUSTER_SPEC'`. The node ranks come from
torchrun's rendezvous, not from Slurm's node order, so the hosts cannot be read off
SLURM_JOB_NODELIST. But the workers share a store: with TORCHELASTIC_USE_AGENT_STORE=True,
MASTER_ADDR:MASTER_PORT is the store the agents met on (torch's env:// init connects there
too, under its own /worker/attempt_N). Each node's first worker writes its host there, rank 0
gathers them into one key and every worker reads that key: two store calls a worker.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace

from slurmtorch.bootstrap.rankinfo import RankInfo
from slurmtorch.errors import BootstrapError

PREFIX = "slurmtorch/hosts"


def wanted(info: RankInfo, env: Mapping[str, str]) -> bool:
    """Whether this rank lacks the other nodes' hosts and torchrun's agents have a store to ask."""
    return (info.source == "torchrun" and info.num_nodes > 1 and not info.rank_hosts
            and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True")


def hosts_of(nodes: Sequence[Sequence], world: int) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(each node's host, each rank's host) from each node's [host, first rank, ranks] in node
    order; None unless the nodes hold ranks 0..world-1 in order, as torchrun numbers them (pure)."""
    rank_hosts: list[str] = []
    for host, first, count in nodes:
        if first != len(rank_hosts) or count < 1:
            return None
        rank_hosts += [str(host)] * int(count)
    if len(rank_hosts) != world:
        return None
    return tuple(str(node[0]) for node in nodes), tuple(rank_hosts)


def with_hosts(info: RankInfo, env: Mapping[str, str], timeout: float) -> RankInfo:
    """`info` with every node's and rank's host, asked of the agents' store where `wanted`;
    else `info` itself. Imports torch: call it after the rank is placed (its threads inherit
    the CPUs it is given)."""
    if not wanted(info, env):
        return info
    import torch.distributed as dist  # lazy: seconds to import; only a multi-node torchrun's ranks need it here

    prefix = f"{PREFIX}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    try:
        store = dist.TCPStore(info.master_addr, info.master_port, is_master=False,
                              timeout=datetime.timedelta(seconds=timeout))
        if info.local_rank == 0:
            store.set(f"{prefix}/node/{info.node_rank}",
                      json.dumps([info.hostname, info.rank, info.local_world_size]))
        if info.rank == 0:
            gathered = [json.loads(store.get(f"{prefix}/node/{n}")) for n in range(info.num_nodes)]
            store.set(f"{prefix}/all", json.dumps(gathered))
        nodes = json.loads(store.get(f"{prefix}/all"))
    except (RuntimeError, ValueError) as exc:  # torch's DistStoreError is a RuntimeError
        raise BootstrapError(f"rank {info.rank}: cannot learn the other nodes' hosts from torchrun's store at "
                             f"{info.master_addr}:{info.master_port}: {' '.join(str(exc).split())}",
                             tip="a node that never started its workers, or one that cannot reach the first "
                                 "node's store (the site's interfaces)") from None
    hosts = hosts_of(nodes, info.world_size)
    return info if hosts is None else replace(info, nodes=hosts[0], rank_hosts=hosts[1])
