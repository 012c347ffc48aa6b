"""Pure: a `RankInfo` in the shapes cloud platforms hand to training code.

- env:// variables (torchrun's names, plus NODE_RANK for Lightning-style code);
- CLUSTER_SPEC (AI Platform style: roles `master` and `worker`) and TF_CONFIG (roles
  `chief` and `worker`): rank 0 is the master/chief, rank r > 0 is worker r-1. With
  `--cluster-spec vertex`, CLUSTER_SPEC is Vertex AI's instead (`vertex_cluster_spec`). Ports
  are nominal (MASTER_PORT for rank 0, MASTER_PORT + r for rank r): nothing listens
  there unless the framework reading the map does. Both are exported only when every
  rank's host is known (MPI, srun block layouts, torchrun: on several nodes, from its agents'
  store, `torchrunhosts`);
- role jobs (`--role master=1 --role worker=3 --role ps=2 --role evaluator=1`): the same
  maps naming every role's host:port list (`role_cluster_spec`, `role_tf_config`);
- ModelArts-style arguments `--init_method tcp://ADDR:PORT --rank R --world_size N`,
  per process (`rank`) or per node (`node`: node rank / node count, for scripts that
  start one process per node and spawn their local workers themselves; that needs
  one task per node), under the script's own flag names where given (`initargs`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from slurmtorch import initargs, protocol
from slurmtorch.bootstrap.rankinfo import RankInfo
from slurmtorch.errors import BootstrapError
from slurmtorch.limits import fits_env


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


def role_cluster(info: RankInfo, leader: str) -> dict[str, list[str]]:
    """`{role: [host:port, ...]}` for every role of a role job (pure).

    One entry per replica, a node (with several tasks a node, its first rank's). The leader
    is at MASTER_ADDR:MASTER_PORT; the replica whose first job rank is r elsewhere at its host
    and the nominal port MASTER_PORT + r (nothing listens there unless the framework does).
    """
    layout, hosts = info.role_layout, info.job_rank_hosts
    cluster: dict[str, list[str]] = {}
    for role, count in layout.roles:
        name = leader if role in ("master", "chief") else role
        firsts = [layout.offset(role) + i * layout.tasks_of(role) for i in range(count)]
        cluster[name] = [f"{info.master_addr}:{info.master_port}" if rank == 0
                         else f"{hosts[rank]}:{_port(info.master_port, rank)}" for rank in firsts]
    return cluster


def replica_index(info: RankInfo) -> int:
    """The replica (node) of its role a rank of a role job runs on: every rank of a node gets
    that node's task, as in a job without roles."""
    assert info.role is not None
    return info.role_index // info.role_layout.tasks_of(info.role)


def _role_task(info: RankInfo, leader: str) -> dict:
    kind = leader if info.role in ("master", "chief") else info.role
    task = {"type": kind, "index": replica_index(info)}
    if info.trial is not None:
        task["trial"] = info.trial
    return task


def role_cluster_spec(info: RankInfo) -> dict:
    """CLUSTER_SPEC of a role job: the leader keeps the name it was given (master or chief)."""
    leader = info.role_layout.leader
    return {"cluster": role_cluster(info, leader), "task": _role_task(info, leader)}


def role_tf_config(info: RankInfo) -> dict:
    """TF_CONFIG of a role job: the leader is always `chief`, and the evaluator is not a
    member of the cluster (TF's convention: it only reads checkpoints)."""
    cluster = role_cluster(info, "chief")
    cluster.pop("evaluator", None)
    return {"cluster": cluster, "task": _role_task(info, "chief")}


def cluster_spec(info: RankInfo) -> dict | None:
    """AI Platform's CLUSTER_SPEC: {cluster: {master: [...], worker: [...]}, task: {...}}."""
    if info.layout is not None:
        return role_cluster_spec(info)
    hosts = cluster_hosts(info)
    if hosts is None:
        return None
    cluster = {"master": hosts[:1]}
    if len(hosts) > 1:
        cluster["worker"] = hosts[1:]
    return {"cluster": cluster, "task": _task(info, "master")}


def tf_config(info: RankInfo) -> dict | None:
    """TF_CONFIG: {cluster: {chief: [...], worker: [...]}, task: {type, index}}."""
    if info.layout is not None:
        return role_tf_config(info)
    hosts = cluster_hosts(info)
    if hosts is None:
        return None
    cluster = {"chief": hosts[:1]}
    if len(hosts) > 1:
        cluster["worker"] = hosts[1:]
    return {"cluster": cluster, "task": _task(info, "chief")}


# Vertex AI's worker pools by role: the primary replica, workers, parameter servers, evaluators.
VERTEX_POOLS = {"master": "workerpool0", "chief": "workerpool0", "worker": "workerpool1", "ps": "workerpool2",
                "evaluator": "workerpool3"}


def vertex_cluster_spec(info: RankInfo) -> dict | None:
    """Vertex AI's CLUSTER_SPEC: {cluster: {workerpool0: [...], ...}, environment: cloud, task: {...}}.

    One entry per replica (a node; a role job's replicas are its role ranks), the primary at
    MASTER_ADDR:MASTER_PORT, where the world meets, as AI Platform's master is: code that takes
    its rendezvous from workerpool0[0] (Lightning's VertexAICluster) meets torch there. Every rank
    of a node gets that node's task. None when the nodes' hosts are unknown.
    """
    if info.layout is not None:
        cluster = {VERTEX_POOLS[role]: entries for role, entries in role_cluster(info, "master").items()}
        pool, index = VERTEX_POOLS[info.role or "master"], replica_index(info)
    else:
        if len(info.nodes) != info.num_nodes or not info.nodes:
            return None
        cluster = {"workerpool0": [f"{info.master_addr}:{info.master_port}"]}
        if info.num_nodes > 1:
            cluster["workerpool1"] = [f"{host}:{_port(info.master_port, n)}" for n, host in enumerate(info.nodes)
                                      if n > 0]
        pool, index = ("workerpool0", 0) if info.node_rank == 0 else ("workerpool1", info.node_rank - 1)
    task: dict = {"type": pool, "index": index}
    if info.trial is not None:
        task["trial"] = info.trial
    return {"cluster": cluster, "environment": "cloud", "task": task}


def env_for(info: RankInfo, shape: str = "ai-platform") -> dict[str, str]:
    """Every variable the contracts define, as strings, for os.environ; CLUSTER_SPEC in the
    `shape` named (CLUSTER_SPEC_SHAPES)."""
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
        # torchrun's workers share one role (`default`): its rank and size are the world's.
        # Left to torchrun: TORCHELASTIC_RUN_ID and TORCH_NCCL_ASYNC_ERROR_HANDLING
        # (docs/rank-contract.md, "Variables beside torchrun's").
        "ROLE_RANK": str(info.rank),
        "ROLE_WORLD_SIZE": str(info.world_size),
        protocol.SOURCE: info.source,
        # This process's rank in the whole job, for every process, ps/evaluator included
        # (they have no RANK): preemption's requeue is done by job rank 0 alone.
        protocol.JOB_RANK: str(info.rank),
    }
    if info.trial is not None:
        env[protocol.TRIAL] = info.trial
    if info.role is not None:
        env[protocol.ROLE] = info.role
        env[protocol.ROLE_INDEX] = str(info.role_index)
        if not info.in_group:
            # A ps/evaluator is told where the torch world meets, and how big it is, but
            # has no rank in it: a stray init_process_group fails instead of colliding.
            for key in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE",
                        "ROLE_RANK", "ROLE_WORLD_SIZE"):
                env.pop(key)
            env["WORLD_SIZE"] = str(info.role_layout.training)
    omitted = []
    spec = vertex_cluster_spec(info) if shape == "vertex" else cluster_spec(info)
    for name, value in (("CLUSTER_SPEC", spec), ("TF_CONFIG", tf_config(info))):
        if value is None:
            continue
        text = json.dumps(value, separators=(",", ":"))
        if fits_env(name, text):
            env[name] = text
        else:
            # Thousands of ranks: the map outgrows what execve lets one variable hold, and
            # every program the rank started (a spawned DataLoader worker, a compiler)
            # would fail with E2BIG. Left out, and named, so scripts can tell why.
            omitted.append(name)
    if omitted:
        env[protocol.OMITTED] = ",".join(omitted)
    return env


# Contract variables a rank may not get: the cluster maps when other ranks' hosts are
# unknown, the torch-world ones for a ps/evaluator. A value inherited from a parent
# process (a launcher's own world, an outer job) would describe some other world.
OPTIONAL_KEYS = ("CLUSTER_SPEC", "TF_CONFIG", protocol.OMITTED, "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK",
                 "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE")


def unset_keys(exported: Mapping[str, str]) -> list[str]:
    """The contract variables to remove from os.environ: those `env_for` did not set."""
    return [key for key in OPTIONAL_KEYS if key not in exported]


def init_method(info: RankInfo) -> str:
    host = info.master_addr
    if ":" in host:  # a bare IPv6 address needs brackets in a URL
        host = f"[{host}]"
    return f"tcp://{host}:{info.master_port}"


def init_args(info: RankInfo, text: str = "rank") -> list[str]:
    """ModelArts-style arguments appended to the script's own (`initargs`: shape and flag names)."""
    try:
        shape, names = initargs.parse(text)
    except initargs.InitArgsError as exc:
        raise BootstrapError(str(exc), tip=initargs.TIP) from None
    if shape == "node":
        if info.local_world_size != 1:
            raise BootstrapError(
                f"--init-args={text} passes node rank / node count, but {info.local_world_size} tasks run on "
                f"node {info.node_rank}: each would claim the same rank",
                tip="start one task per node (srun --ntasks-per-node=1, mpirun --map-by ppr:1:node), "
                    "or use --init-args (per rank)",
            )
        rank, world = info.node_rank, info.num_nodes
    else:
        rank, world = info.rank, info.world_size
    return initargs.arguments(names, init_method(info), rank, world)


def slurm_task_env(info, env) -> dict[str, str]:
    """SLURM_* task and step variables that agree with `info`, where a launcher inherited others.

    Under `mpirun` inside an allocation every rank carries the SLURM_PROCID/NTASKS of
    the Open MPI daemon that started it (node index, node count), and the ranks on the
    first node those of the batch script. Lightning's SLURMEnvironment trusts them and then
    sees a wrong world (two "global rank 0"s). torchrun's workers carry their agent's srun
    task alike (SLURM_PROCID = node index, one task per node). IDRIS's idr_torch reads the
    step's variables too (SLURM_STEP_NUM_TASKS, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NODELIST,
    and SLURM_STEP_ID to tell it runs under Slurm), and preferred them to TORCHELASTIC_RUN_ID.
    The whole set is written on every rank, even where some values happen to agree already
    (rank 0 under `-N 2 -n 3`): skipping it left that rank without SLURM_NTASKS_PER_NODE
    while the others had it. Under srun (--mpi=pmix, or without MPI) the values are srun's own.
    Empty without SLURM_* at all.
    """
    if info.source not in ("mpi", "torchrun") or "SLURM_PROCID" not in env:
        return {}
    out = {"SLURM_PROCID": str(info.rank), "SLURM_LOCALID": str(info.local_rank),
           "SLURM_NODEID": str(info.node_rank), "SLURM_NTASKS": str(info.world_size),
           "SLURM_NPROCS": str(info.world_size), "SLURM_NNODES": str(info.num_nodes),
           "SLURM_NTASKS_PER_NODE": str(info.local_world_size),
           "SLURM_STEP_NUM_TASKS": str(info.world_size), "SLURM_STEP_NUM_NODES": str(info.num_nodes),
           "SLURM_STEP_TASKS_PER_NODE": tasks_per_node(info),
           # The ranks of one launch are one step to a script; the batch node's have none of their own.
           "SLURM_STEP_ID": str(env.get("SLURM_STEP_ID") or "0")}
    if info.nodes:  # in node order, the first being rank 0's, as srun writes a step's (not sorted)
        out["SLURM_STEP_NODELIST"] = ",".join(info.nodes)
    return out


def tasks_per_node(info) -> str:
    """Slurm's compressed per-node task counts, `2(x3),1`, in node order (pure)."""
    if info.nodes and len(info.rank_hosts) == info.world_size:
        counts = [info.rank_hosts.count(node) for node in info.nodes]
    else:
        counts = [info.local_world_size] * info.num_nodes  # torchrun: the same on every node
    runs: list[list[int]] = []
    for count in counts:
        if runs and runs[-1][0] == count:
            runs[-1][1] += 1
        else:
            runs.append([count, 1])
    return ",".join(f"{count}(x{times})" if times > 1 else str(count) for count, times in runs)
