"""The in-rank side: everything that runs inside a rank, started by mpirun, srun or torchrun.

launcher -> `world` (a `rankinfo.RankInfo` from the launcher's env: `launchers`, or from
the communicator: `mpi` + `mpiworld`) -> `rendezvous` (MASTER_ADDR/PORT) -> `contracts`
(env for torch and the cloud contracts) -> `group` (torch.distributed) -> `target` (the
user's script) -> `exits`. `runner` strings them together (`python -m slurmtorch.bootstrap`,
`slurmtorch.init()`), parsing `options`, keeping `state`, recording `timings`; `device`
picks the backend and GPU.

Nothing is imported here: a Ray node's `python -m slurmtorch.bootstrap.raynode` (and the
rendezvous entry that scripts of before issue 45 run) must not pay for the runner, and ranks
pay only for what they use.
"""

__all__ = ["init", "main"]


def __getattr__(name):
    if name in __all__:
        from slurmtorch.bootstrap import runner  # lazy: see the module docstring

        return getattr(runner, name)
    raise AttributeError(f"module 'slurmtorch.bootstrap' has no attribute {name!r}")
