"""The in-rank side: everything that runs inside a rank, started by mpirun, srun or torchrun.

launcher -> `rankinfo` (from the launcher's env) or `mpi` (from the communicator)
-> `rendezvous` (MASTER_ADDR/PORT) -> `contracts` (env for torch and the cloud
contracts) -> torch.distributed -> the user's script (`python -m slurmtorch.bootstrap`).

Nothing is imported here: `python -m slurmtorch.bootstrap.rendezvous` in a batch
script must not pay for the runner, and ranks pay only for what they use.
"""

__all__ = ["init", "main"]


def __getattr__(name):
    if name in __all__:
        from slurmtorch.bootstrap import runner  # lazy: see the module docstring

        return getattr(runner, name)
    raise AttributeError(f"module 'slurmtorch.bootstrap' has no attribute {name!r}")
