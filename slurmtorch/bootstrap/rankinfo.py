"""Who am I in the job: the `RankInfo` type, its validation and the env reading it shares.

`RankInfo` is what every derivation returns: `launchers` (from a launcher's environment:
torchrun, srun, a role job's step, a lone process) and `mpiworld` (from what the MPI
communicator said). All of it is pure: functions take a mapping (normally a copy of
`os.environ`) and return a frozen `RankInfo` or raise `BootstrapError`. Nothing reads
`os.environ` itself, so each layout is a plain unit test.

A missing rank is never defaulted to 0: a world where every process believes it is
rank 0 trains N copies of one model and looks healthy. Errors list the variables that
were seen and say what to change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurmtorch import protocol
from slurmtorch.errors import BootstrapError
from slurmtorch.roles import TRAINING_ROLES, RoleLayout


@dataclass(frozen=True)
class RankInfo:
    """This process's place in the job, and where the world meets (MASTER_ADDR:PORT).

    `nodes` are node host names in node order; `rank_hosts` the host of every rank
    (index = rank). Both are empty where the launcher cannot tell (multi-node torchrun).
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int
    hostname: str
    source: str
    launcher: str = ""
    nodes: tuple[str, ...] = ()
    rank_hosts: tuple[str, ...] = ()
    trial: str | None = None
    # Role jobs (`slurmtorch sbatch --role ...`): this rank's role and index in it, the
    # layout, and the host of every rank of the *job* (all roles, job-rank order). For a
    # training role (master/chief/worker) rank/world_size describe the torch world; for
    # ps/evaluator they describe the job and `in_group` is False.
    role: str | None = None
    role_index: int = 0
    layout: "RoleLayout | None" = None
    job_rank_hosts: tuple[str, ...] = ()

    @property
    def role_layout(self) -> RoleLayout:
        """The layout of a role job (`from_roles` sets it with `role`)."""
        assert self.layout is not None, "role_layout of a RankInfo that is not a role job's"
        return self.layout

    @property
    def in_group(self) -> bool:
        return self.role is None or self.role in TRAINING_ROLES

    def describe(self) -> str:
        """One line for logs and the self-check."""
        return (f"rank {self.rank}/{self.world_size} local {self.local_rank}/{self.local_world_size} "
                f"node {self.node_rank}/{self.num_nodes} host {self.hostname} "
                f"master {self.master_addr}:{self.master_port} source {self.source}"
                + (f" ({self.launcher})" if self.launcher and self.launcher != self.source else ""))


# ---------------------------------------------------------------- helpers

def seen(env: Mapping[str, str], keys: Sequence[str]) -> str:
    """`K=V, ...` for the keys present, for error messages."""
    items = [f"{k}={env[k]}" for k in keys if k in env]
    return ", ".join(items) if items else "(none of them)"


def env_int(env: Mapping[str, str], key: str, what: str, keys: Sequence[str], tip: str) -> int:
    if key not in env:
        raise BootstrapError(f"{what}: {key} is missing; seen: {seen(env, keys)}", tip=tip)
    try:
        return int(str(env[key]).strip())
    except ValueError:
        raise BootstrapError(f"{what}: {key}={env[key]!r} is not an integer; seen: {seen(env, keys)}",
                             tip=tip) from None


def env_opt_int(env: Mapping[str, str], key: str, what: str, keys: Sequence[str], tip: str) -> int | None:
    return env_int(env, key, what, keys, tip) if key in env else None


def trial_id(env: Mapping[str, str]) -> str | None:
    """Trial of a sweep: SLURMTORCH_TRIAL, else the Slurm array index."""
    for key in (protocol.TRIAL, "SLURM_ARRAY_TASK_ID"):
        value = env.get(key, "").strip()
        if value:
            return value
    return None


def validate(info: RankInfo, env: Mapping[str, str], keys: Sequence[str], tip: str) -> RankInfo:
    """Reject worlds that cannot exist (rank past the world, local rank past the node, ...)."""
    problems = []
    if info.world_size < 1:
        problems.append(f"world size {info.world_size} < 1")
    if not 0 <= info.rank < info.world_size:
        problems.append(f"rank {info.rank} outside 0..{info.world_size - 1}")
    if not 1 <= info.local_world_size <= info.world_size:
        problems.append(f"local world size {info.local_world_size} outside 1..{info.world_size}")
    if not 0 <= info.local_rank < info.local_world_size:
        problems.append(f"local rank {info.local_rank} outside 0..{info.local_world_size - 1}")
    if not 1 <= info.num_nodes <= info.world_size:
        problems.append(f"node count {info.num_nodes} outside 1..{info.world_size}")
    if not 0 <= info.node_rank < info.num_nodes:
        problems.append(f"node rank {info.node_rank} outside 0..{info.num_nodes - 1}")
    if not 0 < info.master_port < 65536:
        problems.append(f"master port {info.master_port} outside 1..65535")
    if not info.master_addr:
        problems.append("master address is empty")
    if problems:
        raise BootstrapError(f"contradictory {info.source} world: {'; '.join(problems)}; "
                             f"seen: {seen(env, keys)}", tip=tip)
    return info



def rank_hint(env: Mapping[str, str]) -> str:
    """Best-effort rank for a failure message printed before the world is known."""
    for key in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if env.get(key, "").strip():
            return f"?({key}={env[key]})"
    return "?"
