"""Which launcher started this process, and the world its environment describes.

Every function here is pure: it takes a mapping (normally a copy of `os.environ`) and
the host name, and returns a frozen `RankInfo` or raises `BootstrapError`.

Sources:
- torchrun (and any env:// launcher): RANK, WORLD_SIZE, LOCAL_RANK, ... taken as they are.
- srun without MPI: SLURM_PROCID/NTASKS/LOCALID/NODEID and the *step* node list and
  tasks per node (a batch script's SLURM_NODELIST describes the job, not the step).
- a role job's step (`--role`): srun's variables, the job's node list and SLURMTORCH_ROLES.
- MPI (Open MPI, MPICH/Hydra, PMI, PMIx): the environment only *hints* (it cannot name
  the nodes or the master); `slurmtorch.bootstrap.mpi` asks the communicator and
  `mpiworld` assembles the answer.
- nothing: a lone process is a world of 1 (unless the Slurm job around it asked for more:
  see `detect_source`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slurmtorch import protocol
from slurmtorch.bootstrap.rankinfo import RankInfo, env_int, env_opt_int, seen, trial_id, validate
from slurmtorch.errors import BootstrapError
from slurmtorch.roles import ROLES_TIP, TRAINING_ROLES, RoleLayout, parse_roles

# Variables whose presence means an MPI process manager started us. PMI_RANK/PMI_SIZE
# come from MPICH's Hydra and from `srun --mpi=pmi2`; PMIX_RANK from `srun --mpi=pmix`
# and from Open MPI 5's prterun; OMPI_COMM_WORLD_* from Open MPI's mpirun.
MPI_MARKERS = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "PMI_SIZE")
TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "GROUP_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
SLURM_KEYS = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NODEID",
              "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES", "SLURM_STEP_TASKS_PER_NODE",
              "SLURM_STEP_ID", "SLURMD_NODENAME", "SLURM_DISTRIBUTION", "SLURM_MPI_TYPE",
              "SLURM_JOB_ID", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "MASTER_ADDR", "MASTER_PORT")


# ---------------------------------------------------------------- detection

# Step ids from here up are Slurm's special steps (batch 0xfffffffb, extern 0xfffffffc,
# salloc's interactive step 0xfffffffa, ...), not an srun of tasks.
SPECIAL_STEP_IDS = 0xFFFFFFF0


def in_task_step(env: Mapping[str, str]) -> bool:
    """Whether srun started this process as a task of a step.

    Not for the batch script, the extern step or salloc's interactive step (shown as a
    special number or as a name like `batch`, depending on the Slurm version).
    """
    step = env.get("SLURM_STEP_ID", "").strip()
    if step:
        return step.isdigit() and int(step) < SPECIAL_STEP_IDS
    return "SLURM_STEP_NODELIST" in env


def _count(env: Mapping[str, str], key: str) -> int | None:
    text = env.get(key, "").strip()
    return int(text) if text.isdigit() else None


def detect_source(env: Mapping[str, str]) -> str:
    """Which launcher started us, for `--from auto`.

    torchrun first: its children inherit SLURM_* when torchrun itself runs under srun,
    and its variables are the ones that describe them. MPI before Slurm: under
    `srun --mpi=pmix` both are present and MPI is the one that can be cross-checked.

    A lone process (no launcher, not a task of an srun step) is a world of 1, except
    inside a Slurm job that asked for more: several tasks (SLURM_NTASKS > 1), or several
    nodes (SLURM_JOB_NUM_NODES/SLURM_NNODES/SLURM_STEP_NUM_NODES > 1) without saying
    SLURM_NTASKS=1. There it is almost always the batch script (or an salloc shell)
    missing its `srun`, and a world of 1 would train on one process while the other
    nodes idle. The environment cannot tell that from a one-off on purpose (a
    preprocessing step on the batch node), so that one says so: `--from single`
    (`slurmtorch.init(source="single")`). Plain `python` that never asks slurmtorch for
    its world is not affected, nor is a one-node, one-task job's batch script.
    """
    if "TORCHELASTIC_RUN_ID" in env and "RANK" in env:
        return "torchrun"
    if any(k in env for k in MPI_MARKERS):
        return "mpi"
    if in_task_step(env):
        return "slurm"
    if "RANK" in env and "WORLD_SIZE" in env:
        return "env"
    if "SLURM_JOB_ID" in env:
        tasks = _count(env, "SLURM_NTASKS")
        nodes = max(_count(env, k) or 0 for k in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_STEP_NUM_NODES"))
        what = (f"{tasks}-task" if tasks is not None and tasks > 1
                else f"{nodes}-node" if nodes > 1 and tasks != 1 else None)
        if what:
            raise BootstrapError(
                f"running outside any srun step (the batch script or an salloc shell) of a {what} Slurm job, "
                f"where a world of 1 is almost always a forgotten srun; seen: {seen(env, SLURM_KEYS)}",
                tip="start it with `srun python -m slurmtorch.bootstrap ...`, "
                    "or pass --from single to run one process on purpose",
            )
    return "single"


# ---------------------------------------------------------------- torchrun / env://

_ENV_TIP = ("launch with torchrun, or export RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, "
            "MASTER_ADDR and MASTER_PORT (and GROUP_RANK/NODE_RANK for several nodes)")


def from_torchrun(env: Mapping[str, str], hostname: str) -> RankInfo:
    """env:// variables taken as they are (torchrun, or a platform that sets them)."""
    what = "cannot read the env:// world"
    keys = TORCHRUN_KEYS
    rank = env_int(env, "RANK", what, keys, _ENV_TIP)
    world = env_int(env, "WORLD_SIZE", what, keys, _ENV_TIP)
    local_rank = env_int(env, "LOCAL_RANK", what, keys, _ENV_TIP)
    local_world = env_int(env, "LOCAL_WORLD_SIZE", what, keys, _ENV_TIP)
    node_rank = env_opt_int(env, "GROUP_RANK", what, keys, _ENV_TIP)
    node_rank2 = env_opt_int(env, "NODE_RANK", what, keys, _ENV_TIP)
    if node_rank is not None and node_rank2 is not None and node_rank != node_rank2:
        raise BootstrapError(f"{what}: GROUP_RANK={node_rank} and NODE_RANK={node_rank2} disagree; "
                             f"seen: {seen(env, keys)}", tip="unset the stale one")
    node_rank = node_rank if node_rank is not None else node_rank2
    num_nodes = env_opt_int(env, "GROUP_WORLD_SIZE", what, keys, _ENV_TIP)
    if local_world == world:
        node_rank = 0 if node_rank is None else node_rank
        num_nodes = 1 if num_nodes is None else num_nodes
    if node_rank is None or num_nodes is None:
        raise BootstrapError(f"{what}: several nodes (WORLD_SIZE {world} > LOCAL_WORLD_SIZE {local_world}) "
                             f"but GROUP_RANK/NODE_RANK or GROUP_WORLD_SIZE is missing; seen: {seen(env, keys)}",
                             tip="export GROUP_RANK (or NODE_RANK) and GROUP_WORLD_SIZE, as torchrun does")
    if "MASTER_ADDR" not in env or not env["MASTER_ADDR"].strip():
        raise BootstrapError(f"{what}: MASTER_ADDR is missing; seen: {seen(env, keys)}", tip=_ENV_TIP)
    port = env_int(env, "MASTER_PORT", what, keys, _ENV_TIP)
    source = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env"
    hosts = (hostname,) * world if num_nodes == 1 else ()
    info = RankInfo(rank=rank, world_size=world, local_rank=local_rank, local_world_size=local_world,
                    node_rank=node_rank, num_nodes=num_nodes, master_addr=env["MASTER_ADDR"].strip(),
                    master_port=port, hostname=hostname, source=source, launcher=source,
                    nodes=(hostname,) if num_nodes == 1 else (), rank_hosts=hosts, trial=trial_id(env))
    return validate(info, env, keys, _ENV_TIP)


# ---------------------------------------------------------------- srun without MPI

_SLURM_TIP = ("start every rank with `srun` (these variables come from the step); "
              "inside an salloc/sbatch shell a plain `python` is not a step")

# Ports for a step without MPI: the ranks have no channel to agree on a random free
# port, so the port is a function of (job, step). Kept below Linux's ephemeral range
# (32768+) so outgoing connections never take it; 31 and the span are coprime, so jobs
# sharing a node collide only when their ids differ by a multiple of the span.
SLURM_PORT_BASE = 11000
SLURM_PORT_SPAN = 20000


def slurm_port(env: Mapping[str, str]) -> int:
    """MASTER_PORT if set, else a port derived from SLURM_JOB_ID and SLURM_STEP_ID."""
    if env.get("MASTER_PORT", "").strip():
        return env_int(env, "MASTER_PORT", "cannot read MASTER_PORT", ("MASTER_PORT",),
                       "set MASTER_PORT to a port number")
    job = env_int(env, "SLURM_JOB_ID", "cannot choose a master port", SLURM_KEYS, _SLURM_TIP)
    step_text = env.get("SLURM_STEP_ID", "0").strip()
    step = int(step_text) if step_text.isdigit() else 0
    return SLURM_PORT_BASE + (job * 31 + step) % SLURM_PORT_SPAN


def step_layout(env: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Node names and tasks per node of this step (uneven layouts like `2(x3),1`)."""
    import hostlist  # lazy: only srun worlds read a node list (python-hostlist: Slurm's node[01-04,07])

    what = "cannot read srun's step layout"
    for key in ("SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"):
        if not env.get(key, "").strip():
            raise BootstrapError(f"{what}: {key} is missing; seen: {seen(env, SLURM_KEYS)}", tip=_SLURM_TIP)
    try:
        nodes = tuple(hostlist.expand_hostlist(env["SLURM_STEP_NODELIST"]))
        per_node = tuple(hostlist.parse_slurm_tasks_per_node(env["SLURM_STEP_TASKS_PER_NODE"]))
    except Exception as exc:  # hostlist raises BadHostlist or ValueError
        raise BootstrapError(f"{what}: {exc}; seen: {seen(env, SLURM_KEYS)}", tip=_SLURM_TIP) from None
    if len(nodes) != len(per_node):
        raise BootstrapError(f"{what}: {len(nodes)} nodes but tasks for {len(per_node)}; "
                             f"seen: {seen(env, SLURM_KEYS)}", tip=_SLURM_TIP)
    return nodes, per_node


def block_rank_hosts(nodes: Sequence[str], per_node: Sequence[int]) -> tuple[str, ...]:
    """Host of every rank under Slurm's default block distribution."""
    return tuple(host for host, n in zip(nodes, per_node) for _ in range(n))


def from_slurm(env: Mapping[str, str], hostname: str) -> RankInfo:
    """The world of a plain `srun` step (no MPI): every rank reads the same step layout.

    The master is the step's first node: srun places task 0 there under every
    distribution (block, cyclic, plane). Rank 0 checks that (SLURM_NODEID must be 0).
    """
    what = "cannot derive the rank from srun's environment"
    keys = SLURM_KEYS
    rank = env_int(env, "SLURM_PROCID", what, keys, _SLURM_TIP)
    world_key = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS"
    world = env_int(env, world_key, what, keys, _SLURM_TIP)
    local_rank = env_int(env, "SLURM_LOCALID", what, keys, _SLURM_TIP)
    node_rank = env_int(env, "SLURM_NODEID", what, keys, _SLURM_TIP)
    nodes, per_node = step_layout(env)
    contradictions = []
    if sum(per_node) != world:
        contradictions.append(f"tasks per node add up to {sum(per_node)}, not {world_key}={world}")
    if "SLURM_STEP_NUM_NODES" in env and env["SLURM_STEP_NUM_NODES"].strip() != str(len(nodes)):
        contradictions.append(f"SLURM_STEP_NUM_NODES={env['SLURM_STEP_NUM_NODES']} but the node list has {len(nodes)}")
    if not 0 <= node_rank < len(nodes):
        contradictions.append(f"SLURM_NODEID={node_rank} is outside the step's {len(nodes)} nodes")
    elif env.get("SLURMD_NODENAME") and env["SLURMD_NODENAME"] != nodes[node_rank]:
        contradictions.append(f"SLURMD_NODENAME={env['SLURMD_NODENAME']} but node {node_rank} of the step is "
                              f"{nodes[node_rank]} (variables inherited from another step?)")
    if not 0 <= rank < world:
        contradictions.append(f"SLURM_PROCID={rank} is outside the step's {world} tasks ({world_key}={world})")
    dist = env.get("SLURM_DISTRIBUTION", "block").split(":")[0]
    tip = _SLURM_TIP
    if rank == 0 and node_rank != 0:
        contradictions.append("rank 0 is not on the step's first node")
        if len(contradictions) == 1:  # srun did start it: only the placement is wrong
            tip = _first_node_tip(nodes[0], dist)
    if contradictions:
        raise BootstrapError(f"contradictory srun environment: {'; '.join(contradictions)}; seen: {seen(env, keys)}",
                             tip=tip)
    # With one task per node every distribution places rank r on node r. That case
    # matters: inside sbatch SLURM_DISTRIBUTION defaults to cyclic.
    one_each = all(n == 1 for n in per_node)
    hosts = block_rank_hosts(nodes, per_node) if dist in ("", "block") or one_each else ()
    if hosts and hosts[rank] != nodes[node_rank]:
        hosts = ()  # an arbitrary layout: do not claim to know where the others are
    addr = env.get("MASTER_ADDR", "").strip() or nodes[0]
    info = RankInfo(rank=rank, world_size=world, local_rank=local_rank, local_world_size=per_node[node_rank],
                    node_rank=node_rank, num_nodes=len(nodes), master_addr=addr, master_port=slurm_port(env),
                    hostname=hostname, source="slurm", launcher="srun", nodes=nodes, rank_hosts=hosts,
                    trial=trial_id(env))
    return validate(info, env, keys, _SLURM_TIP)


def _first_node_tip(first: str, dist: str) -> str:
    """Rank 0 elsewhere than the step's first node: the master address (that node, or the
    address the batch script took there) would not be rank 0's. Block, cyclic and plane
    put task 0 there; only an arbitrary distribution (SLURM_HOSTFILE, one line per task)
    can move it."""
    where = "srun --distribution=arbitrary put task 0 on SLURM_HOSTFILE's first host" if dist == "arbitrary" \
        else "task 0 must start on the step's first node"
    return (f"{where}; the master address is on the step's first node, {first}: make {first} the first line of "
            "SLURM_HOSTFILE, or leave the distribution to srun (block, cyclic or plane)")


def from_env(env: Mapping[str, str], hostname: str, source: str = "auto") -> RankInfo:
    """The world from launcher variables alone (everything but MPI, which needs its
    communicator, and a lone process, which needs a port): torchrun/env or srun."""
    source = detect_source(env) if source == "auto" else source
    if source in ("torchrun", "env"):
        return from_torchrun(env, hostname)
    if source == "slurm":
        return from_slurm(env, hostname)
    raise BootstrapError(f"the {source!r} world is not derived from variables alone",
                         tip="use slurmtorch.bootstrap.mpi.from_comm for MPI, launchers.single for one process")


def from_roles(env: Mapping[str, str], hostname: str, role: str, layout: RoleLayout | None = None) -> RankInfo:
    """The world of one role's srun step in a role job (pure).

    Each role runs as its own step (`srun --nodelist=ITS_NODES -N COUNT`), so srun's
    SLURM_PROCID counts within the role; the job's node list and the layout give
    every rank's place: job rank = the role's offset + SLURM_PROCID, its node the role's
    (SLURM_PROCID // the role's tasks per node)th, its local rank the rest. In a heterogeneous
    job a step's SLURM_JOB_NODELIST is its component's: the batch script lists every
    role's nodes in SLURMTORCH_ROLE_NODES.
    """
    what = f"cannot derive the {role} rank of a role job"
    keys = (*SLURM_KEYS, "SLURM_JOB_NODELIST", protocol.ROLES, protocol.ROLE_NODES)
    if layout is None:
        if not env.get(protocol.ROLES, "").strip():
            raise BootstrapError(f"{what}: {protocol.ROLES} is missing; seen: {seen(env, keys)}",
                                 tip="--role is set by `slurmtorch sbatch --role ...`; it needs SLURMTORCH_ROLES")
        layout = parse_roles(env[protocol.ROLES])
    if layout.count(role) == 0:
        raise BootstrapError(f"{what}: the layout {layout.format()} has no {role}", tip=ROLES_TIP)
    import hostlist  # lazy: only srun worlds read a node list

    try:
        job_nodes = tuple(hostlist.expand_hostlist(env.get(protocol.ROLE_NODES) or env.get("SLURM_JOB_NODELIST", "")))
    except Exception as exc:
        raise BootstrapError(f"{what}: {exc}; seen: {seen(env, keys)}", tip=_SLURM_TIP) from None
    if len(job_nodes) < layout.nodes:
        raise BootstrapError(f"{what}: the layout {layout.format()} needs {layout.nodes} nodes, the job has "
                             f"{len(job_nodes)}; seen: {seen(env, keys)}", tip=_SLURM_TIP)
    procid = env_int(env, "SLURM_PROCID", what, keys, _SLURM_TIP)
    if not 0 <= procid < layout.ranks(role):
        raise BootstrapError(f"{what}: SLURM_PROCID={procid} but the role has {layout.ranks(role)} tasks; "
                             f"seen: {seen(env, keys)}", tip=_SLURM_TIP)
    job_rank = layout.offset(role) + procid
    nodes = job_nodes[:layout.nodes]
    hosts = layout.rank_hosts(nodes)  # a node's tasks are consecutive ranks (srun's block distribution)
    if env.get("SLURMD_NODENAME") and env["SLURMD_NODENAME"] != hosts[job_rank]:
        raise BootstrapError(f"{what}: {role} {procid} should run on {hosts[job_rank]} but runs on "
                             f"{env['SLURMD_NODENAME']}; seen: {seen(env, keys)}", tip=_SLURM_TIP)
    addr = env.get("MASTER_ADDR", "").strip() or hosts[0]
    per_node = layout.tasks_of(role)
    common: dict[str, Any] = dict(local_rank=procid % per_node, local_world_size=per_node, master_addr=addr,
                                  master_port=slurm_port(env), hostname=hostname, source="slurm", launcher="srun",
                                  trial=trial_id(env), role=role, role_index=procid, layout=layout,
                                  job_rank_hosts=hosts, node_rank=layout.node_of(job_rank))
    if role in TRAINING_ROLES:
        n = layout.training
        info = RankInfo(rank=job_rank, world_size=n, num_nodes=layout.training_nodes,
                        nodes=nodes[:layout.training_nodes], rank_hosts=hosts[:n], **common)
    else:
        info = RankInfo(rank=job_rank, world_size=layout.total, num_nodes=layout.nodes, nodes=nodes,
                        rank_hosts=hosts, **common)
    return validate(info, env, keys, _SLURM_TIP)


# ---------------------------------------------------------------- a lone process

def single(hostname: str, addr: str, port: int, env: Mapping[str, str] | None = None) -> RankInfo:
    """A process nobody launched: a world of 1 on this host."""
    return RankInfo(rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0, num_nodes=1,
                    master_addr=addr, master_port=port, hostname=hostname, source="single", launcher="none",
                    nodes=(hostname,), rank_hosts=(hostname,), trial=trial_id(env or {}))

