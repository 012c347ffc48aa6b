"""Roles of a role job (`--role master=1 --role worker=3 --role ps=2`): one owner for the names.

Shared by both flows: the submit side checks and renders the layout, the in-rank side
finds its place in it. Pure; no imports from either side.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from slurmtorch.errors import BootstrapError

LEADER_ROLES = ("master", "chief")
TRAINING_ROLES = ("master", "chief", "worker")
ROLE_ORDER = ("master", "chief", "worker", "ps", "evaluator")
ROLES_TIP = "e.g. --role master=1 --role worker=3 --role ps=2 --role evaluator=1 (counts in nodes)"
# What a `--role` item may ask of its role's nodes, after ROLE=NODES (submit/launch/hetjob.py).
ROLE_KEYS = ("partition", "gpus", "tasks", "spare")
ROLE_TIP = ("e.g. --role master=1 --role worker=2:partition=fat:gpus=4 "
            "(ROLE=NODES[:partition=P][:gpus=N][:tasks=N][:spare=N])")


@dataclass(frozen=True)
class RoleItem:
    """One `--role` item, `ROLE=NODES[:partition=P][:gpus=N][:tasks=N][:spare=N]` (None: the job's)."""

    role: str
    count: int
    partition: str | None = None
    gpus: int | None = None
    tasks: int | None = None  # ranks per node
    spare: int = 0  # spare nodes of the role's own kind (--max-restarts)


@dataclass(frozen=True)
class RoleLayout:
    """Roles in launch order (leader, workers, ps, evaluator) with their node counts, and the
    tasks (ranks) each runs per node: one unless `tasks` says otherwise (`worker=2:tasks=4`).

    Role r occupies the job's nodes, and ranks, right after those of the roles before it;
    a node's ranks are consecutive (srun's block distribution). The torch world is the
    training roles' prefix of the ranks. A role replica, as AI Platform and Azure ML count
    them in CLUSTER_SPEC, is a node.
    """

    roles: tuple[tuple[str, int], ...]
    tasks: tuple[tuple[str, int], ...] = ()  # (role, tasks per node) where not 1

    def tasks_of(self, role: str) -> int:
        return dict(self.tasks).get(role, 1)

    def count(self, role: str) -> int:
        """The role's nodes."""
        return dict(self.roles).get(role, 0)

    def ranks(self, role: str) -> int:
        return self.count(role) * self.tasks_of(role)

    @property
    def nodes(self) -> int:
        return sum(n for _, n in self.roles)

    @property
    def total(self) -> int:
        """Every rank of the job."""
        return sum(self.ranks(r) for r, _ in self.roles)

    @property
    def training(self) -> int:
        """The torch world's ranks."""
        return sum(self.ranks(r) for r, _ in self.roles if r in TRAINING_ROLES)

    @property
    def training_nodes(self) -> int:
        return sum(n for r, n in self.roles if r in TRAINING_ROLES)

    @property
    def leader(self) -> str:
        return self.roles[0][0]

    def offset(self, role: str) -> int:
        """First job rank of `role`."""
        return self._before(role, self.ranks)

    def node_offset(self, role: str) -> int:
        """First node (index in the job's nodes) of `role`."""
        return self._before(role, self.count)

    def _before(self, role: str, size: Callable[[str], int]) -> int:
        off = 0
        for name, _ in self.roles:
            if name == role:
                return off
            off += size(name)
        raise BootstrapError(f"role {role!r} is not in the layout {self.format()}", tip=ROLES_TIP)

    def role_of(self, job_rank: int) -> tuple[str, int]:
        """(role, index of the rank within the role) of a job rank."""
        off = 0
        for name, _ in self.roles:
            if job_rank < off + self.ranks(name):
                return name, job_rank - off
            off += self.ranks(name)
        raise BootstrapError(f"job rank {job_rank} is outside the layout {self.format()}", tip=ROLES_TIP)

    def node_of(self, job_rank: int) -> int:
        """The job node index a rank runs on."""
        role, index = self.role_of(job_rank)
        return self.node_offset(role) + index // self.tasks_of(role)

    def rank_hosts(self, nodes: Sequence[str]) -> tuple[str, ...]:
        """The host of every job rank, from the job's nodes in role order."""
        return tuple(nodes[self.node_of(r)] for r in range(self.total))

    def format(self) -> str:
        """`master=1,worker=2:tasks=4`: what parse_roles reads back (SLURMTORCH_ROLES, job.json)."""
        return ",".join(f"{r}={n}" + (f":tasks={self.tasks_of(r)}" if self.tasks_of(r) != 1 else "")
                        for r, n in self.roles)


def parse_role_item(item: str) -> RoleItem:
    """`worker=2:partition=fat:tasks=4` -> RoleItem (pure): the one parser of the role grammar, for
    `--role` (the submit side) and for SLURMTORCH_ROLES, job.json and the supervisor's --roles."""
    head, *pairs = str(item).split(":")
    name, sep, count = head.partition("=")
    name = name.strip()
    if not sep or not name:
        raise BootstrapError(f"malformed --role {head!r}: expected ROLE=COUNT", tip=ROLES_TIP)
    if name not in ROLE_ORDER:
        raise BootstrapError(f"unknown role {name!r} in --role {head!r}", tip=f"roles: {', '.join(ROLE_ORDER)}")
    if not count.strip().isdigit() or not count.strip().isascii():
        raise BootstrapError(f"malformed --role {head!r}: COUNT must be a whole number of nodes", tip=ROLES_TIP)
    found: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or key not in ROLE_KEYS or not value:
            raise BootstrapError(f"malformed --role {item!r}: {pair!r} is not one of "
                                 f"{', '.join(k + '=...' for k in ROLE_KEYS)}", tip=ROLE_TIP)
        if key in found:
            raise BootstrapError(f"malformed --role {item!r}: {key} given twice", tip=ROLE_TIP)
        found[key] = value
    for key, what in (("gpus", "GPUs per node"), ("tasks", "tasks per node, at least 1"), ("spare", "spare nodes")):
        given = found.get(key)
        if given is not None and not (given.isascii() and given.isdigit() and (key != "tasks" or int(given) >= 1)):
            raise BootstrapError(f"malformed --role {item!r}: {key} must be a whole number of {what}", tip=ROLE_TIP)
    number = {k: int(v) for k, v in found.items() if k != "partition"}
    return RoleItem(name, int(count), found.get("partition"), number.get("gpus"), number.get("tasks"),
                    number.get("spare", 0))


def parse_roles(items: Sequence[str] | str) -> RoleLayout:
    """`["master=1", "worker=3", "ps=2"]` or "master=1,worker=3:tasks=4,ps=2" -> RoleLayout (pure);
    what else an item asks (its partition, GPUs, spares) is the submit side's (hetjob.split_roles)."""
    if isinstance(items, str):
        items = [i for i in items.split(",") if i.strip()] if items.strip() else []
    counts: dict[str, int] = {}
    tasks: dict[str, int] = {}
    for item in map(parse_role_item, items):
        if item.role in counts:
            raise BootstrapError(f"role {item.role!r} given twice", tip=ROLES_TIP)
        counts[item.role] = item.count
        if item.tasks not in (None, 1):
            tasks[item.role] = item.tasks
    leaders = [r for r in LEADER_ROLES if r in counts]
    if len(leaders) != 1:
        raise BootstrapError("a role job needs exactly one of master=1 or chief=1" if not leaders
                             else "give master or chief, not both (chief is TF's name for the master)",
                             tip=ROLES_TIP)
    if counts[leaders[0]] != 1:
        raise BootstrapError(f"{leaders[0]}={counts[leaders[0]]}: there is exactly one {leaders[0]}",
                             tip=f"--role {leaders[0]}=1 and put the rest in --role worker=N")
    roles = tuple((r, counts[r]) for r in ROLE_ORDER if counts.get(r))
    return RoleLayout(roles=roles, tasks=tuple((r, tasks[r]) for r in ROLE_ORDER if r in tasks and counts.get(r)))
