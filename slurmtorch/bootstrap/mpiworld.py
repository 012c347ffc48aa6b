"""Pure: the MPI world, cross-checked against the launcher and assembled into a `RankInfo`.

`slurmtorch.bootstrap.mpi` (the only module importing mpi4py) asks the communicator;
what it learns (rank, size, local rank, one allgather of hosts and node leaders) comes
here, with the environment, to be checked and turned into the world.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurmtorch.bootstrap.fromenv import in_task_step
from slurmtorch.bootstrap.rankinfo import RankInfo, env_int, seen, trial_id, validate
from slurmtorch.errors import BootstrapError

MPI_KEYS = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
            "MPI_LOCALNRANKS", "PMIX_RANK", "PMIX_NAMESPACE", "SLURM_PROCID", "SLURM_NTASKS",
            "SLURM_STEP_NUM_TASKS", "SLURM_STEP_ID", "SLURM_MPI_TYPE")


@dataclass(frozen=True)
class LauncherWorld:
    """What the process manager says about the world, to cross-check MPI against."""

    rank: int
    size: int
    by: str  # the variables it came from, for messages


def launcher_world(env: Mapping[str, str]) -> LauncherWorld | None:
    """The world the launcher announced, or None when it announced nothing.

    Open MPI's and Hydra's variables win over SLURM_*: mpirun inside an allocation
    starts its daemons with srun, so SLURM_PROCID/NTASKS then describe the daemons.
    """
    what = "cannot read the MPI launcher's environment"
    tip = "unset stale MPI variables, or pass --from slurm/env to ignore MPI"
    for rank_key, size_key in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")):
        if size_key in env:
            rank = env_int(env, rank_key, what, MPI_KEYS, tip)
            return LauncherWorld(rank, env_int(env, size_key, what, MPI_KEYS, tip), f"{rank_key}/{size_key}")
    if in_task_step(env) and "SLURM_PROCID" in env:
        size_key = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS"
        if size_key in env:
            return LauncherWorld(env_int(env, "SLURM_PROCID", what, MPI_KEYS, tip),
                                 env_int(env, size_key, what, MPI_KEYS, tip), f"SLURM_PROCID/{size_key}")
    return None


def check_mpi_world(rank: int, size: int, env: Mapping[str, str]) -> None:
    """Stop when MPI's world is not the one the launcher started (the pmi2-singleton trap)."""
    told = launcher_world(env)
    if told is None or (told.rank, told.size) == (rank, size):
        return
    in_srun = in_task_step(env)
    if size == 1 and told.size > 1:
        mpi_type = env.get("SLURM_MPI_TYPE", "")
        tip = ("launch with `srun --mpi=pmix` (Open MPI 5 cannot read pmi2; check `srun --mpi=list`)"
               if in_srun else "launch with the mpirun/mpiexec of the MPI that mpi4py was built against")
        raise BootstrapError(
            f"MPI came up as a world of 1 but the launcher started {told.size} tasks "
            f"({told.by}={told.rank}/{told.size}"
            + (f", SLURM_MPI_TYPE={mpi_type}" if mpi_type else "")
            + f"): every rank is a singleton; seen: {seen(env, MPI_KEYS)}",
            tip=tip,
        )
    raise BootstrapError(
        f"MPI says rank {rank} of {size} but the launcher says {told.rank} of {told.size} ({told.by}); "
        f"seen: {seen(env, MPI_KEYS)}",
        tip="mpi4py and the launcher belong to different MPI installations, or the variables are stale",
    )


def world_from_mpi(rank: int, size: int, local_rank: int, local_size: int,
                   records: Sequence[tuple[str, int]], master: tuple[str, int],
                   env: Mapping[str, str], launcher: str = "mpi") -> RankInfo:
    """Assemble the world from one allgather of (hostname, lowest world rank on my node).

    Node order is the order of those lowest ranks, so node 0 holds rank 0 and nodes
    are numbered as the ranks fill them, whatever order the hosts were listed in.
    """
    if len(records) != size:
        raise BootstrapError(f"MPI gathered {len(records)} records for a world of {size}")
    leaders = sorted({leader for _, leader in records})
    index = {leader: i for i, leader in enumerate(leaders)}
    hostname, my_leader = records[rank]
    info = RankInfo(rank=rank, world_size=size, local_rank=local_rank, local_world_size=local_size,
                    node_rank=index[my_leader], num_nodes=len(leaders), master_addr=master[0],
                    master_port=int(master[1]), hostname=hostname, source="mpi", launcher=launcher,
                    nodes=tuple(records[leader][0] for leader in leaders),
                    rank_hosts=tuple(host for host, _ in records), trial=trial_id(env))
    return validate(info, env, MPI_KEYS, "report this: MPI gave an impossible layout")


def mpi_flavor(env: Mapping[str, str]) -> str:
    """Which process manager started us, for messages."""
    if "OMPI_COMM_WORLD_SIZE" in env:
        return "mpirun (Open MPI)"
    if "SLURM_STEP_ID" in env and ("PMIX_RANK" in env or "PMI_RANK" in env):
        return f"srun --mpi={env.get('SLURM_MPI_TYPE', '?')}"
    if "PMI_RANK" in env:
        return "mpiexec (PMI)"
    if "PMIX_RANK" in env:
        return "PMIx"
    return "mpi"


def init_stalled(env: Mapping[str, str], seconds: float) -> str:
    """Pure: the one line a rank ends with when MPI_Init has not returned by the deadline.

    Known case: MPICH under `srun --mpi=pmi2` aborts or hangs in MPI_Init when one of its
    PMI-1 lines is longer than the 1024 bytes slurmstepd takes in one read (slurmstepd logs
    `mpi/pmi2: invalid client request`; doctor.node.mpich_pmi2_check says when; every launch
    of PyPI's MPICH on Slurm 24.11, some on 22.05). PyPI's MPICH refuses
    `--mpi=pmix` ("unsupported PMI version PMIx"), so the fixes are an MPI built with PMIx, or
    MPICH's own launcher. Otherwise: some task never reached MPI_Init, or the MPI cannot read
    the launcher's PMI.
    """
    after = f"MPI_Init did not return within {seconds:g} s (the bootstrap's --timeout)"
    if in_task_step(env) and env.get("SLURM_MPI_TYPE", "").startswith("pmi2"):
        return (f"{after} under srun --mpi=pmi2: MPICH can hang there (slurmstepd: "
                "`mpi/pmi2: invalid client request`); fix: launch with srun --mpi=pmix and an MPI built with "
                "PMIx, or with MPICH's own mpiexec inside the allocation (launcher: mpirun)")
    return (f"{after} under {mpi_flavor(env)}: the world never came up; fix: check that every task started "
            "and that the MPI speaks this launcher's PMI (`srun --mpi=list`, `slurmtorch doctor`)")
