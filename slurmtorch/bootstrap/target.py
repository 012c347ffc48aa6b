"""What a rank runs once its world is set up: the user's SCRIPT or -m MODULE, or the self-check.

The target runs as `__main__` with the argv and sys.path[0] that `python SCRIPT ARGS`
(or `python -m MODULE ARGS`) would give it, so a script written for torchrun runs
unchanged. Without a target, the self-check prints the world and checks an all_reduce.
"""

from __future__ import annotations

import importlib.util
import io
import marshal
import os
import runpy
import sys
import types

from slurmtorch.bootstrap import contracts
from slurmtorch.bootstrap.options import BootstrapOptions
from slurmtorch.bootstrap.rankinfo import RankInfo
from slurmtorch.errors import BootstrapError
from slurmtorch.localrank import local_rank_arg


def run_target(opts: BootstrapOptions, info: RankInfo) -> None:
    """Run SCRIPT or -m MODULE as __main__, as `python SCRIPT ARGS` would."""
    args = list(opts.args)
    if opts.local_rank_arg:  # where torch.distributed.launch and DeepSpeed's launcher put it
        args.insert(0, local_rank_arg(opts.local_rank_arg, info.local_rank))
    if opts.init_args:
        args += contracts.init_args(info, opts.init_args)
    if opts.module:
        if opts.import_from:
            import_from(opts.import_from)
        sys.argv = [opts.module, *args]  # run_module puts the file path in argv[0]
        runpy.run_module(opts.module, run_name="__main__", alter_sys=True)
        return
    script = opts.script
    if script is None:
        raise BootstrapError("nothing to run: give SCRIPT or -m MODULE")
    if not os.path.exists(script):
        raise BootstrapError(f"script {script!r} not found (cwd {os.getcwd()})")
    run_script(script, args)


_HERE = os.path.dirname(os.path.abspath(__file__))


def user_traceback(exc: BaseException) -> str:
    """`exc`'s traceback as `python SCRIPT` prints it: the frames above the user's first (the
    bootstrap's, runpy's) left out, so a rank's report starts in the user's code; a failure
    in the bootstrap itself, with no frame of the user's, keeps them all."""
    import traceback  # lazy: only a failing rank formats one

    def ours(filename: str) -> bool:
        return os.path.dirname(os.path.abspath(filename)) == _HERE or "runpy" in os.path.basename(filename)

    tb = exc.__traceback__
    while tb is not None and ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))


def import_from(folder: str) -> None:
    """Imports come from `folder` (a job's copy of its code) where `python -m` would take the
    working folder (sys.path[0]; none under PYTHONSAFEPATH: then first)."""
    if sys.path and sys.path[0] in ("", os.getcwd()):
        sys.path[0] = os.path.abspath(folder)
    else:
        sys.path.insert(0, os.path.abspath(folder))


def run_script(script: str, args: list[str]) -> None:
    """`python SCRIPT ARGS`: argv as typed, sys.path[0] the script's real folder, then the file
    (or a folder or zip holding `__main__.py`, with runpy's semantics) as `__main__`."""
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    if is_path_entry(script):
        runpy.run_path(script, run_name="__main__")
        return
    run_file(script)


def run_file(script: str) -> None:
    """Run a script file as `__main__`, with the names `python SCRIPT` gives it.

    Python 3.9+ sets `__file__` (and the code's file name) to the working folder joined with
    the path as typed, not normalised, while `sys.argv[0]` stays as typed; torchrun runs
    `python SCRIPT`, so does it. `runpy.run_path` gives both the path it was handed, so a
    script that changes folder before opening a file beside itself would not find it.
    Compiled like runpy does (a .pyc too), without our module's `__future__` flags.
    """
    path = os.path.join(os.getcwd(), script)
    with io.open_code(path) as f:
        if f.read(4) == importlib.util.MAGIC_NUMBER:
            f.read(12)  # the rest of a .pyc header
            code = marshal.load(f)
        else:
            f.seek(0)
            code = compile(f.read(), path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __loader__=None, __package__=None, __spec__=None)
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = main  # pickle and multiprocessing find the script's names here, as runpy's do
    try:
        exec(code, main.__dict__)
    finally:
        sys.modules["__main__"] = saved


def is_path_entry(path: str) -> bool:
    """Whether Python would run `path` as a folder or zip holding `__main__.py`: a path hook
    takes it (pkgutil.get_importer's test, without the ~7 ms of importing pkgutil)."""
    for hook in sys.path_hooks:
        try:
            hook(path)
        except ImportError:
            continue
        return True
    return False


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
