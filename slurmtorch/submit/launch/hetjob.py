"""Roles on different node types: each role's own partition and GPUs, and the Slurm
heterogeneous job that gives each role its own resources (pure).

`--role worker=2:partition=fat:gpus=4` asks for a role's nodes in another partition (its
node type, environment and limits from the site), with other GPUs per node, or with
`tasks=N` ranks per node (default: the node type's, one per GPU); `spare=N` (with
--max-restarts) holds N more of the role's nodes, to replace a failed one at once. When every
role lands on the same resources the job stays one allocation, rendered as before; when
they differ, each role is a component of one heterogeneous job (`#SBATCH hetjob` between
the components' lines; its srun step `--het-group=K`), the leader's first: the batch script
runs on the first component's first node, where rank 0 and MASTER_ADDR are.
Slurm's heterogeneous jobs: https://slurm.schedmd.com/heterogeneous_jobs.html (22.05, 24.11).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from slurmtorch import shell
from slurmtorch.errors import BootstrapError, SpecError
from slurmtorch.roles import LEADER_ROLES, RoleLayout, parse_role_item
from slurmtorch.submit.launch.allocation import account_and_qos, check_limits, check_role_total, per_node, time_limit
from slurmtorch.submit.launch.environment import job_env
from slurmtorch.options import Options
from slurmtorch.submit.sites.model import NodeType, Partition, Site


@dataclass(frozen=True)
class RoleAsk:
    """What one `--role` item asked of its role's resources (None: the job's)."""

    role: str
    partition: str | None = None
    gpus: int | None = None
    spare: int = 0  # spare nodes of the role's own kind (--max-restarts)
    tasks: int | None = None  # ranks per node


@dataclass(frozen=True)
class RoleAsks:
    """Each role's own resources, and the job's as typed (-p, --gpus-per-node), which the
    roles that name none get."""

    asks: tuple[RoleAsk, ...] = ()
    partition: str | None = None
    gpus: int | None = None
    tasks: int | None = None

    def of(self, role: str) -> RoleAsk:
        return next((a for a in self.asks if a.role == role), RoleAsk(role))

    @property
    def spares(self) -> int:
        return sum(a.spare for a in self.asks)


@dataclass(frozen=True)
class HetComponent:
    """One role's component of a heterogeneous job: its `#SBATCH` options (the first
    component's are the job's header), and the environment its step changes from the batch
    script's (its own node type's), unquoted."""

    role: str
    group: int  # srun --het-group
    nodes: int  # the role's, and its spares
    cpus_per_task: int
    tasks_per_node: int
    gpus_per_node: int
    directives: tuple[tuple[str, str], ...] = ()  # after `#SBATCH hetjob`; () for the first
    env: tuple[tuple[str, str], ...] = ()  # set for this role's step
    unset: tuple[str, ...] = ()  # the batch script's variables this role's node type has not

    @property
    def env_argv(self) -> tuple[str, ...]:
        """`env -u NAME... NAME=VALUE...` before its steps' srun; () when nothing changes. A
        job-time value (a site's `{expand: ...}`) stays one, so its variables expand there, as
        the batch script's own `export` of a plain job's does."""
        args = (*(a for name in self.unset for a in ("-u", name)), *(_assignment(k, v) for k, v in self.env))
        return ("env", *args) if args else ()


def _assignment(name: str, value: str) -> str:
    """`NAME=VALUE` as one argv word; a job-time value's word is a job-time word too."""
    word = f"{name}={value}"
    return shell.JobTimeWord(word) if isinstance(value, shell.JobTimeWord) else word


def split_roles(o: Options) -> tuple[Options, RoleAsks]:
    """`--role` items with resources (`worker=2:partition=fat`) -> the options with plain
    ROLE=NODES items (roles.parse_roles checks those) and each role's own resources. The
    leader's own partition, GPUs and tasks are the job's: its component is the batch job itself."""
    if not any(":" in item for item in o.roles):
        return o, RoleAsks()
    try:
        items = [parse_role_item(item) for item in o.roles]
    except BootstrapError as exc:
        raise SpecError(exc.message, tip=exc.tip) from None
    for item in items:
        if item.partition is not None:
            shell.directive_value(item.partition, what=f"--role {item.role} partition")  # no newline/NUL
    asks = [RoleAsk(i.role, i.partition, i.gpus, i.spare, i.tasks) for i in items]
    leader = next((a for a in asks if a.role in LEADER_ROLES), None)
    typed = RoleAsks(tuple(asks), o.partition, o.gpus_per_node, o.ntasks_per_node)
    if leader is not None:
        o = replace(o, partition=leader.partition or o.partition,
                    gpus_per_node=leader.gpus if leader.gpus is not None else o.gpus_per_node,
                    ntasks_per_node=leader.tasks if leader.tasks is not None else o.ntasks_per_node)
    return replace(o, roles=tuple(f"{i.role}={i.count}" for i in items)), typed


def components(site: Site, o: Options, preset: dict[str, Any], layout: RoleLayout | None, asks: RoleAsks,
               leader: tuple[Partition, NodeType]) -> tuple[tuple[HetComponent, ...], RoleLayout | None]:
    """Each role's component when the roles need different resources, else () (one allocation),
    and the layout with each role's tasks per node (one allocation: the job's, as it was)."""
    if layout is None or not asks.asks:
        return (), layout
    comps = _components(site, o, preset, layout, asks, leader)
    if not comps:
        return (), layout
    return comps, replace(layout, tasks=tuple((c.role, c.tasks_per_node) for c in comps if c.tasks_per_node != 1))


def _components(site: Site, o: Options, preset: dict[str, Any], layout: RoleLayout, asks: RoleAsks,
                leader: tuple[Partition, NodeType]) -> tuple[HetComponent, ...]:
    o_job = replace(o, partition=asks.partition, gpus_per_node=asks.gpus, ntasks_per_node=asks.tasks)
    placed = [_place(site, o_job, preset, role, count + asks.of(role).spare, asks.of(role))
              for role, count in layout.roles]
    key = [(p[1].slurm_name, p[2].name, p[3]) for p in placed]
    if all(k == key[0] for k in key):
        check_role_total(layout, leader[0])  # one allocation, in the leader's partition
        return ()
    if o.array or o.sweep:
        raise SpecError("roles on different resources run as one Slurm heterogeneous job, which cannot be a job "
                        "array (Slurm has no arrays of heterogeneous jobs)", tip="leave --array/--sweep out, or "
                        "run every role on one node type")
    for name, max_nodes in {p[1].name: p[1].max_nodes for p in placed}.items():
        on = [(p[0], layout.count(p[0]) + asks.of(p[0]).spare) for p in placed if p[1].name == name]
        if sum(n for _, n in on) > max_nodes:
            spares = " (spares included)" if asks.spares else ""
            raise SpecError(f"roles {RoleLayout(tuple(on)).format()}{spares} need {sum(n for _, n in on)} "
                            f"nodes of partition {name!r}, which allows at most {max_nodes}",
                            tip="lower the role counts, or give a role another partition")
    base_env, base_paths = job_env(site, leader[1], leader[0], preset, o, layout.nodes)
    out = []
    for group, (role, partition, node, per, directives) in enumerate(placed):
        env, paths = job_env(site, node, partition, preset, o, layout.nodes)
        _check_step_setup(site, role, partition, node, leader, paths != base_paths)
        out.append(HetComponent(
            role=role, group=group, nodes=layout.count(role) + asks.of(role).spare, cpus_per_task=per[2],
            tasks_per_node=per[1], gpus_per_node=per[0],
            directives=directives if group else (),
            env=tuple((k, v) for k, v in env.items() if base_env.get(k) != v),
            unset=tuple(k for k in base_env if k not in env)))
    return tuple(out)


def _check_step_setup(site: Site, role: str, partition: Partition, node: NodeType,
                      leader: tuple[Partition, NodeType], paths_differ: bool) -> None:
    """What the batch script sets up once, for the leader's node type, must fit every role: a
    role's step gets its own node type's variables, not its modules, path compositions or node
    prologue (one step over the job's nodes: the first component's only)."""
    if (partition.name, node.name) == (leader[0].name, leader[1].name):
        return
    why = ("its own modules" if (node.modules, partition.modules) != (leader[1].modules, leader[0].modules)
           else "a node prologue" if site.node_prologue or node.node_prologue or leader[1].node_prologue
           else "its own path compositions (prepend_path/append_path)" if paths_differ else "")
    if why:
        raise SpecError(f"role {role}: partition {partition.name!r} (node type {node.name!r}) needs {why}, which "
                        "a role's step of a heterogeneous job cannot have",
                        tip="run every role on one node type, or give them what they need in the site's env")


def _place(site: Site, o: Options, preset: dict[str, Any], role: str, count: int, ask: RoleAsk
           ) -> tuple[str, Partition, NodeType, tuple[int, int, int], tuple[tuple[str, str], ...]]:
    """(role, partition, node type, (GPUs, tasks, CPUs) per node, its component's `#SBATCH` options);
    `count`: the role's nodes and its spares."""
    o = replace(o, partition=ask.partition or o.partition,
                ntasks_per_node=ask.tasks if ask.tasks is not None else o.ntasks_per_node,
                gpus_per_node=ask.gpus if ask.gpus is not None else o.gpus_per_node)
    partition = site.partition(o.pick(preset, "partition"), qos=o.pick(preset, "qos"))
    node = site.node_type(partition.node_type)
    try:
        per = per_node(o, preset, partition, node)
    except SpecError as exc:
        raise SpecError(f"role {role}: {exc.message}", tip=exc.tip) from None
    if count > partition.max_nodes:
        spares = f" ({ask.spare} of them spare)" if ask.spare else ""
        raise SpecError(f"role {role} needs {count} nodes{spares}, but partition {partition.name!r} allows at most "
                        f"{partition.max_nodes}", tip="lower the role's count, or give it another partition")
    directives: dict[str, str] = {"partition": partition.slurm_name, "nodes": str(count),
                                  "ntasks-per-node": str(per[1]), "cpus-per-task": str(per[2])}
    gpus = per[0]
    if gpus and site.gpu_request_for(partition, node) == "gres":
        directives["gres"] = f"gpu:{gpus}"
    elif gpus and site.gpu_request_for(partition, node) == "gpus-per-node":
        directives["gpus-per-node"] = str(gpus)
    time = time_limit(o, preset, partition)
    check_limits(o, preset, site, partition, count, time, ask.spare, role)
    account, qos = account_and_qos(o, preset, partition, site)
    for name, value in (("time", time), ("account", account), ("qos", qos)):
        if value:
            directives[name] = value
    return role, partition, node, per, tuple(sorted(directives.items()))
