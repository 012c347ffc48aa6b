"""slurmtorch: launch PyTorch distributed training on Slurm and MPI clusters.

Nothing heavy is imported here: the CLI must render a script without torch or
mpi4py, so the public names are resolved lazily on first use.
"""

import importlib

__version__ = "0.1.0"

__all__ = ["__version__", "init", "RankInfo", "Distributor", "Job", "Chain", "ChainFailed", "RemoteError", "on_preempt", "restart_count",
           "checkpoint_dir", "run_id"]

_LAZY = {
    "init": ("slurmtorch.bootstrap", "init"),
    "RankInfo": ("slurmtorch.bootstrap.rankinfo", "RankInfo"),
    "Distributor": ("slurmtorch.api.distributor", "Distributor"),
    "Job": ("slurmtorch.api.job", "Job"),
    "Chain": ("slurmtorch.api.chain", "Chain"),
    "ChainFailed": ("slurmtorch.api.chain", "ChainFailed"),
    "RemoteError": ("slurmtorch.api.job", "RemoteError"),
    "on_preempt": ("slurmtorch.bootstrap.preempt", "on_preempt"),
    "restart_count": ("slurmtorch.bootstrap.preempt", "restart_count"),
    "checkpoint_dir": ("slurmtorch.bootstrap.preempt", "checkpoint_dir"),
    "run_id": ("slurmtorch.bootstrap.runid", "run_id"),
}


def __getattr__(name):
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'slurmtorch' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value
