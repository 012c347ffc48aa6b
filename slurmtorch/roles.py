"""Roles of a role job (`--role master=1 --role worker=3 --role ps=2`): one owner for the names.

Shared by both flows: the submit side checks and renders the layout, the in-rank side
finds its place in it. Pure; no imports from either side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slurmtorch.errors import BootstrapError

LEADER_ROLES = ("master", "chief")
TRAINING_ROLES = ("master", "chief", "worker")
ROLE_ORDER = ("master", "chief", "worker", "ps", "evaluator")
ROLES_TIP = "e.g. --role master=1 --role worker=3 --role ps=2 --role evaluator=1 (counts in nodes)"


@dataclass(frozen=True)
class RoleLayout:
    """Roles in launch order (leader, workers, ps, evaluator) with their node counts.

    One task per node: a role replica is a machine, as on AI Platform and Azure ML.
    Role r occupies the job's nodes (and ranks) right after those of the roles before
    it, so job rank == job node index; the torch world is the training roles' prefix.
    """

    roles: tuple[tuple[str, int], ...]

    @property
    def total(self) -> int:
        return sum(n for _, n in self.roles)

    @property
    def training(self) -> int:
        return sum(n for r, n in self.roles if r in TRAINING_ROLES)

    @property
    def leader(self) -> str:
        return self.roles[0][0]

    def offset(self, role: str) -> int:
        """First job rank (and node index) of `role`."""
        off = 0
        for name, n in self.roles:
            if name == role:
                return off
            off += n
        raise BootstrapError(f"role {role!r} is not in the layout {self.format()}", tip=ROLES_TIP)

    def count(self, role: str) -> int:
        return dict(self.roles).get(role, 0)

    def role_of(self, job_rank: int) -> tuple[str, int]:
        """(role, index within the role) of a job rank."""
        off = 0
        for name, n in self.roles:
            if job_rank < off + n:
                return name, job_rank - off
            off += n
        raise BootstrapError(f"job rank {job_rank} is outside the layout {self.format()}", tip=ROLES_TIP)

    def format(self) -> str:
        return ",".join(f"{r}={n}" for r, n in self.roles)


def parse_roles(items: Sequence[str] | str) -> RoleLayout:
    """`["master=1", "worker=3", "ps=2"]` or "master=1,worker=3,ps=2" -> RoleLayout (pure)."""
    if isinstance(items, str):
        items = [i for i in items.split(",") if i.strip()] if items.strip() else []
    counts: dict[str, int] = {}
    for item in items:
        name, sep, count = str(item).partition("=")
        name = name.strip()
        if not sep or not name:
            raise BootstrapError(f"malformed --role {item!r}: expected ROLE=COUNT", tip=ROLES_TIP)
        if name not in ROLE_ORDER:
            raise BootstrapError(f"unknown role {name!r} in --role {item!r}",
                                 tip=f"roles: {', '.join(ROLE_ORDER)}")
        if name in counts:
            raise BootstrapError(f"role {name!r} given twice", tip=ROLES_TIP)
        if not count.strip().isdigit() or not count.strip().isascii():
            raise BootstrapError(f"malformed --role {item!r}: COUNT must be a whole number of nodes", tip=ROLES_TIP)
        counts[name] = int(count)
    leaders = [r for r in LEADER_ROLES if r in counts]
    if len(leaders) != 1:
        raise BootstrapError("a role job needs exactly one of master=1 or chief=1" if not leaders
                             else "give master or chief, not both (chief is TF's name for the master)",
                             tip=ROLES_TIP)
    if counts[leaders[0]] != 1:
        raise BootstrapError(f"{leaders[0]}={counts[leaders[0]]}: there is exactly one {leaders[0]}",
                             tip=f"--role {leaders[0]}=1 and put the rest in --role worker=N")
    roles = tuple((r, counts[r]) for r in ROLE_ORDER if counts.get(r))
    return RoleLayout(roles=roles)
