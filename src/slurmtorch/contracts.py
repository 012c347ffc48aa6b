"""Pure: a `RankInfo` in the shapes cloud platforms hand to training code.

- env:// variables (torchrun's names, plus NODE_RANK for Lightning-style code);
- CLUSTER_SPEC (AI Platform style: roles `master` and `worker`) and TF_CONFIG (roles
  `chief` and `worker`): rank 0 is the master/chief, rank r > 0 is worker r-1. Ports
  are nominal (MASTER_PORT for rank 0, MASTER_PORT + r for rank r): nothing listens
  there unless the framework reading the map does. Both are exported only when every
  rank's host is known (MPI, srun block layouts, single-node torchrun);
- ModelArts-style arguments `--init_method tcp://ADDR:PORT --rank R --world_size N`,
  per process (`rank`) or per node (`node`: node rank / node count, for scripts that
  start one process per node and spawn their local workers themselves; that needs
  one task per node).
"""

from __future__ import annotations

import json

from .errors import BootstrapError
from .rankinfo import RankInfo

INIT_ARGS_SHAPES = ("rank", "node")


def _port(base: int, offset: int) -> int:
    """Nominal port of rank `offset`, wrapped into 1024..65535."""
    port = base + offset
    return port if port <= 65535 else 1024 + (port - 1024) % (65536 - 1024)


def cluster_hosts(info: RankInfo) -> list[str] | None:
    """`host:port` of every rank, rank 0 at MASTER_ADDR; None when hosts are unknown."""
    if len(info.rank_hosts) != info.world_size:
        return None
    hosts = [f"{info.master_addr}:{info.master_port}"]
    hosts += [f"{host}:{_port(info.master_port, r)}" for r, host in enumerate(info.rank_hosts) if r > 0]
    return hosts


def _task(info: RankInfo, master_role: str) -> dict:
    task = {"type": master_role, "index": 0} if info.rank == 0 else {"type": "worker", "index": info.rank - 1}
    if info.trial is not None:
        task["trial"] = info.trial
    return task


def cluster_spec(info: RankInfo) -> dict | None:
    """AI Platform's CLUSTER_SPEC: {cluster: {master: [...], worker: [...]}, task: {...}}."""
    hosts = cluster_hosts(info)
    if hosts is None:
        return None
    cluster = {"master": hosts[:1]}
    if len(hosts) > 1:
        cluster["worker"] = hosts[1:]
    return {"cluster": cluster, "task": _task(info, "master")}


def tf_config(info: RankInfo) -> dict | None:
    """TF_CONFIG: {cluster: {chief: [...], worker: [...]}, task: {type, index}}."""
    hosts = cluster_hosts(info)
    if hosts is None:
        return None
    cluster = {"chief": hosts[:1]}
    if len(hosts) > 1:
        cluster["worker"] = hosts[1:]
    return {"cluster": cluster, "task": _task(info, "chief")}


def env_for(info: RankInfo) -> dict[str, str]:
    """Every variable the contracts define, as strings, for os.environ."""
    env = {
        "MASTER_ADDR": info.master_addr,
        "MASTER_PORT": str(info.master_port),
        "RANK": str(info.rank),
        "WORLD_SIZE": str(info.world_size),
        "LOCAL_RANK": str(info.local_rank),
        "LOCAL_WORLD_SIZE": str(info.local_world_size),
        "NODE_RANK": str(info.node_rank),
        "GROUP_RANK": str(info.node_rank),
        "GROUP_WORLD_SIZE": str(info.num_nodes),
        "SLURMTORCH_SOURCE": info.source,
    }
    if info.trial is not None:
        env["SLURMTORCH_TRIAL"] = info.trial
    spec, tf = cluster_spec(info), tf_config(info)
    if spec is not None:
        env["CLUSTER_SPEC"] = json.dumps(spec, separators=(",", ":"))
    if tf is not None:
        env["TF_CONFIG"] = json.dumps(tf, separators=(",", ":"))
    return env


def init_method(info: RankInfo) -> str:
    host = info.master_addr
    if ":" in host:  # a bare IPv6 address needs brackets in a URL
        host = f"[{host}]"
    return f"tcp://{host}:{info.master_port}"


def init_args(info: RankInfo, shape: str = "rank") -> list[str]:
    """ModelArts-style arguments appended to the script's own."""
    if shape == "rank":
        rank, world = info.rank, info.world_size
    elif shape == "node":
        if info.local_world_size != 1:
            raise BootstrapError(
                f"--init-args=node passes node rank / node count, but {info.local_world_size} tasks run on "
                f"node {info.node_rank}: each would claim the same rank",
                tip="start one task per node (srun --ntasks-per-node=1, mpirun --map-by ppr:1:node), "
                    "or use --init-args (per rank)",
            )
        rank, world = info.node_rank, info.num_nodes
    else:
        raise BootstrapError(f"unknown --init-args shape {shape!r}", tip="use --init-args or --init-args=node")
    return ["--init_method", init_method(info), "--rank", str(rank), "--world_size", str(world)]
