"""What the job asks Slurm for, checked against the site before anything is rendered.

The partition and node type (from the options, else the preset, else the site's
default), the layout on them (GPUs, tasks and CPUs per node, a role job's node
counts, the number of nodes and ranks) and the time limit: each is refused here,
with the value that would fit, when the partition or node type cannot hold it.

The steps return plain tuples: a frozen dataclass for each would cost the dry run
more to define (about 4M instructions apiece) than building the spec does.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from slurmtorch.errors import BootstrapError, LimitError, SpecError
from slurmtorch.roles import RoleLayout, parse_roles
from slurmtorch.submit.sites.model import NodeType, Partition, Site, parse_time
from slurmtorch.options import Options, positive


def resolve_target(site: Site, o: Options) -> tuple[dict[str, Any], Partition, NodeType]:
    """(preset, partition, node type): the preset named, else `default`; the partition
    from the options, else the preset, else the site's default."""
    preset = site.preset(o.preset)
    # With a QOS asked for, the entry of that Slurm partition with that QOS, if the site has one.
    partition = site.partition(o.pick(preset, "partition"), qos=o.pick(preset, "qos"))
    return preset, partition, site.node_type(partition.node_type)


def per_node(o: Options, preset: dict[str, Any], partition: Partition, node: NodeType) -> tuple[int, int, int]:
    """(GPUs per node, tasks per node, CPUs per task): by default every GPU, one rank each."""
    gpus = o.pick(preset, "gpus_per_node", node.gpus)
    if gpus < 0:
        raise SpecError(f"--gpus-per-node must not be negative, got {gpus}")
    if gpus > node.gpus:
        raise SpecError(
            f"{gpus} GPUs per node requested, but node type {node.name!r} of partition {partition.name!r} has "
            f"{node.gpus or 'no GPUs'}",
            tip=f"use --gpus-per-node {node.gpus} or fewer, or another partition" if node.gpus else
                "leave --gpus-per-node out, or ask for a partition whose nodes have GPUs (-p PARTITION)",
        )
    ntasks_per_node = positive("--ntasks-per-node", o.pick(preset, "ntasks_per_node", _tasks_per_node(o, preset, gpus)))
    default_cpus = max(1, node.cpus // ntasks_per_node)
    cpus_per_task = positive("--cpus-per-task", o.pick(preset, "cpus_per_task", default_cpus))
    if ntasks_per_node * cpus_per_task > node.cpus:
        raise SpecError(
            f"{ntasks_per_node} tasks x {cpus_per_task} CPUs per node exceeds the {node.cpus} CPUs "
            f"of node type {node.name!r}",
            tip=f"use --cpus-per-task {default_cpus} or fewer tasks per node",
        )
    return gpus, ntasks_per_node, cpus_per_task


def _tasks_per_node(o: Options, preset: dict[str, Any], gpus: int) -> int:
    """The default ranks per node: one per GPU, else one; with -n over --nodes, the most a
    node is meant to hold (-N 2 -n 3: 2, and the default CPUs per rank leave room for 2)."""
    nodes = o.pick(preset, "nodes")
    if o.kind == "sbatch" and o.ntasks is not None and o.ntasks > 0 and nodes is not None and nodes > 0:
        return -(-o.ntasks // nodes)
    return gpus or 1


def role_layout(o: Options, partition: Partition, launcher: str, ntasks_per_node: int,
                check_total: bool = True) -> RoleLayout | None:
    """--role counts (None without --role): one srun step per role, each role's nodes running
    the job's tasks per node (one per GPU, else one; roles with tasks of their own: hetjob).
    `check_total` False: roles with resources of their own, checked per role (hetjob.components)."""
    if not o.roles:
        return None
    if o.kind != "sbatch":
        raise SpecError("--role needs slurmtorch sbatch")
    try:
        layout = parse_roles(list(o.roles))
    except BootstrapError as exc:
        raise SpecError(exc.message, tip=exc.tip) from None
    if launcher != "srun":
        raise SpecError(f"--role runs one srun step per role; launcher {launcher!r} cannot",
                        tip="use --launcher srun")
    if ntasks_per_node != 1:
        layout = replace(layout, tasks=tuple((role, ntasks_per_node) for role, _ in layout.roles))
    if o.nodes is not None and o.nodes != layout.nodes:
        raise SpecError(f"--nodes {o.nodes} but the roles add up to {layout.nodes} nodes",
                        tip="leave --nodes out with --role")
    if check_total:
        check_role_total(layout, partition)
    return layout


def check_role_total(layout: RoleLayout, partition: Partition) -> None:
    """Every role's nodes within the one partition of a role job that is one allocation."""
    if layout.nodes > partition.max_nodes:
        raise SpecError(
            f"roles {layout.format()} need {layout.nodes} nodes, but partition {partition.name!r} "
            f"allows at most {partition.max_nodes}",
            tip="lower the role counts, or use another partition",
        )


def node_count(o: Options, preset: dict[str, Any], partition: Partition, ntasks_per_node: int,
               roles: RoleLayout | None, launcher: str) -> tuple[int, int]:
    """(nodes, ranks): a batch job's nodes within the partition (with -n, the ranks spread
    over them, unevenly if need be); an mpirun job's -n on one host."""
    if o.kind != "sbatch":
        n = o.ntasks if o.ntasks is not None else preset.get("ntasks")
        if n is None:
            raise SpecError("mpirun needs the number of ranks", tip="pass -n N")
        return 1, positive("-n", n)
    if o.ntasks is not None:
        nodes, n = _spread(o, preset, ntasks_per_node, roles, launcher)
    else:
        nodes = roles.nodes if roles else positive("--nodes", o.pick(preset, "nodes", 1))
        n = roles.total if roles else nodes * ntasks_per_node
    return nodes, n  # within the partition's limits: check_limits, once the spares are known


def _spread(o: Options, preset: dict[str, Any], ntasks_per_node: int, roles: RoleLayout | None,
            launcher: str) -> tuple[int, int]:
    """(nodes, ranks) for -n: --nodes as given, else as many as -n needs at --ntasks-per-node."""
    assert o.ntasks is not None  # node_count calls this only with -n
    n = positive("-n/--ntasks", o.ntasks)
    if roles:
        raise SpecError("--role counts nodes; -n/--ntasks cannot apply",
                        tip="leave -n out with --role (a role's tasks per node: --role worker=2:tasks=4)")
    given = o.pick(preset, "nodes")
    nodes = positive("--nodes", given) if given is not None else -(-n // ntasks_per_node)
    if n < nodes:
        # sbatch would quietly shrink the job to -n nodes ("can't run 1 processes on 2 nodes").
        raise SpecError(f"-n {n} ranks cannot cover {nodes} nodes: every node runs at least one",
                        tip=f"use --nodes {n} or fewer, or -n {nodes} or more")
    if n > nodes * ntasks_per_node:
        raise SpecError(f"-n {n} ranks do not fit on {nodes} nodes of at most {ntasks_per_node} "
                        "(--ntasks-per-node)", tip=f"use --ntasks-per-node {-(-n // nodes)}, or more --nodes")
    if launcher == "torchrun" and n != nodes * ntasks_per_node:
        raise SpecError(f"torchrun starts the same number of ranks on every node; -n {n} on {nodes} nodes "
                        f"of {ntasks_per_node} is uneven",
                        tip=f"use --launcher srun (or mpirun) for an uneven layout, or -n {nodes * ntasks_per_node}")
    return nodes, n


def time_limit(o: Options, preset: dict[str, Any], partition: Partition) -> str | None:
    """--time, else the preset's, else the partition's default (its max_time: check_limits)."""
    time = o.pick(preset, "time", partition.default_time)
    if time is None:
        return None
    time = str(time)
    try:
        seconds = parse_time(time)
    except ValueError as exc:
        why = f": {exc}" if str(exc) != time.strip() else ""
        raise SpecError(
            f"invalid --time {time!r}{why}",
            tip="Slurm formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS",
        ) from None
    if seconds <= 0:
        raise SpecError(f"--time {time!r} is zero")
    return time


def check_limits(o: Options, preset: dict[str, Any], site: Site, partition: Partition, nodes: int,
                 time: str | None, spares: int = 0, role: str = "") -> None:
    """A batch job of `nodes` (`spares` of them spare: Slurm allocates them too) and `time`
    (None: the partition's default, else its maximum, as Slurm sets it) within its partition's
    or QOS's limits, each task of an array on its own; else one LimitError with every limit it
    breaks and the site's entry of the same node type that would take it, rather than sbatch's
    refusal or a job pending for ever (Leonardo's boost_qos_bprod below 65 nodes). `role`: the
    role of a heterogeneous job's component."""
    if o.kind != "sbatch":
        return
    asked = (f"role {role}: " if role else "") + _nodes(nodes) + (f" ({spares} of them spare)" if spares else "")
    broken = limit_problems(partition, nodes, time, asked)
    if not broken:
        return
    given = o.pick(preset, "time")  # the job's own time limit goes along; else each entry's default
    takers = [p for p in site.partitions if p.node_type == partition.node_type and p is not partition
              and not limit_problems(p, nodes, str(given) if given is not None else None, "")]
    how_long = f" for {_shown(str(given))}" if given is not None else ""
    if takers:
        taker = f"{_entry(takers[0])} would take {_nodes(nodes)}{how_long}"
        tip = f"pass -p {takers[0].name}, or {_fixes(broken)}"
    else:
        taker = f"no partition of site {site.name!r} takes {_nodes(nodes)}{how_long}"
        tip = f"use {_fixes(broken)}"
    raise LimitError(tuple(problem for problem, _ in broken), taker, tip)


def limit_problems(p: Partition, nodes: int, time: str | None, asked: str) -> list[tuple[str, str]]:
    """(problem, fix) for each limit of `p` that `nodes` and `time` break (pure)."""
    seconds = parse_time(time or p.default_time or p.max_time)
    limit = parse_time(p.max_time)
    out = []
    if nodes > p.max_nodes:
        out.append((f"{asked} requested, but {_entry(p)} allows at most {p.max_nodes}",
                    f"--nodes {p.max_nodes} or less"))
    if p.min_nodes is not None and nodes < p.min_nodes:
        out.append((f"{asked} requested, but {_entry(p)} takes at least {p.min_nodes} (min_nodes): sbatch would "
                    "refuse the job, or Slurm hold it for ever", f"--nodes {p.min_nodes} or more"))
    if seconds > limit:
        out.append((f"time limit {time} exceeds the maximum {p.max_time} of {_entry(p)}",
                    f"--time {p.max_time} or less"))
    if p.max_node_minutes is not None and nodes * seconds > p.max_node_minutes * 60:
        most = p.max_node_minutes // nodes
        spent = "UNLIMITED" if seconds == float("inf") else f"{nodes * seconds / 60:g}"
        out.append((f"{asked} x {_shown(time or p.default_time or p.max_time)} is {spent} node-minutes, but "
                    f"{_entry(p)} allows at most {p.max_node_minutes} per job (max_node_minutes)",
                    f"--time {_clock(most)} or less" if most else
                    f"--nodes {max(1, int(p.max_node_minutes * 60 // seconds))} or fewer"))
    return out


def _fixes(broken: list[tuple[str, str]]) -> str:
    """The fixes of `broken`, the first for each option (max_nodes' before the node-minutes')."""
    seen: dict[str, str] = {}
    for _, fix in broken:
        seen.setdefault(fix.split()[0], fix)
    return " and ".join(seen.values())


def _entry(p: Partition) -> str:
    """`partition 'NAME'`, with its QOS where it has one (a route, or one QOS of a Slurm partition)."""
    return f"partition {p.name!r}" + (f" (QOS {p.qos})" if p.qos and p.qos != p.name else "")


def _nodes(n: int) -> str:
    return f"{n} node{'' if n == 1 else 's'}"


def _shown(time: str) -> str:
    """A time limit as Slurm writes it back (`-t 40`: 00:40:00)."""
    seconds = parse_time(time)
    return _clock(int(seconds) // 60) if seconds != float("inf") and not seconds % 60 else time


def _clock(minutes: int) -> str:
    """Minutes as a Slurm time limit (D-HH:MM:SS past a day)."""
    days, rest = divmod(minutes, 1440)
    return (f"{days}-" if days else "") + f"{rest // 60:02d}:{rest % 60:02d}:00"


_REQUIRED_FLAGS = {"account": ("-A ACCOUNT", "sacctmgr show associations user=$USER format=account"),
                   "qos": ("-q QOS", "sacctmgr show associations user=$USER format=qos")}


def account_and_qos(o: Options, preset: dict[str, Any], partition: Partition, site: Site
                    ) -> tuple[str | None, str | None]:
    """(account, QOS): the option, else the preset's, else the partition's default. A batch
    job on a partition (or site) that `required:` one and has none is refused here, before
    sbatch, rather than by slurmctld's "Invalid account or account/partition combination"."""
    account = o.pick(preset, "account", partition.account)
    qos = o.pick(preset, "qos", partition.qos)
    required = partition.required if partition.required is not None else site.required
    if o.kind == "sbatch":
        for name, value in (("account", account), ("qos", qos)):
            if name in required and not value:
                flag, lookup = _REQUIRED_FLAGS[name]
                raise SpecError(f"partition {partition.name!r} of site {site.name!r} requires a Slurm {name} "
                                f"and the job names none", tip=f"pass {flag} (yours: {lookup})")
        # IDRIS charges each partition's hours to its own form of the project (-A xyz@h100 on
        # gpu_p6); slurmctld would refuse another form only once the job reaches it.
        problem = partition.account_problem(account) if account else None
        if problem:
            raise SpecError(problem[0], tip=problem[1])
    return account, qos


def check_required_time(o: Options, time: str | None, partition: Partition, site: Site) -> str | None:
    """`time`, if a batch job on a partition (or site) that `required: [time]` has one (TACC:
    "-t: Required"); refused here rather than by sbatch's submit filter."""
    required = partition.required if partition.required is not None else site.required
    if o.kind == "sbatch" and "time" in required and time is None:
        raise SpecError(f"partition {partition.name!r} of site {site.name!r} requires a time limit and the job "
                        "names none", tip=f"pass --time HH:MM:SS (at most {partition.max_time})")
    return time
