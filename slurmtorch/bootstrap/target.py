"""What a rank runs once its world is set up: the user's SCRIPT or -m MODULE, or the self-check.

The target runs as `__main__` with the argv and sys.path[0] that `python SCRIPT ARGS`
(or `python -m MODULE ARGS`) would give it, so a script written for torchrun runs
unchanged. Without a target, the self-check prints the world and checks an all_reduce.
"""

from __future__ import annotations

import os
import runpy
import sys

from slurmtorch.bootstrap import contracts
from slurmtorch.bootstrap.options import BootstrapOptions
from slurmtorch.bootstrap.rankinfo import RankInfo
from slurmtorch.errors import BootstrapError


def run_target(opts: BootstrapOptions, info: RankInfo) -> None:
    """Run SCRIPT or -m MODULE as __main__, as `python SCRIPT ARGS` would."""
    args = list(opts.args)
    if opts.init_args:
        args += contracts.init_args(info, opts.init_args)
    if opts.module:
        sys.argv = [opts.module, *args]  # run_module puts the file path in argv[0]
        runpy.run_module(opts.module, run_name="__main__", alter_sys=True)
        return
    script = opts.script
    if not os.path.exists(script):
        raise BootstrapError(f"script {script!r} not found (cwd {os.getcwd()})")
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


def say(line: str) -> None:
    """One write per line: under PYTHONUNBUFFERED, print() writes the text and the newline
    separately, and a launcher that merges the ranks' output (MPICH's Hydra) interleaves them."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def self_check(info: RankInfo, initialised: bool, backend: str | None) -> int:
    """Print the world; with a group, all_reduce (rank+1) and compare with N(N+1)/2."""
    line = f"slurmtorch: {info.describe()}"
    if not initialised:
        say(line + " (no process group: --no-init)")
        return 0
    import torch  # lazy: the group's init has imported it already; --no-init never does
    import torch.distributed as dist

    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else "cpu"
    value = torch.tensor([float(info.rank + 1)], device=device)
    dist.all_reduce(value)
    got, expected = int(value.item()), info.world_size * (info.world_size + 1) // 2
    ok = got == expected
    say(f"{line} backend {backend} all_reduce {got} (expected {expected}) {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1
