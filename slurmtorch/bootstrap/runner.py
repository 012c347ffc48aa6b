"""The in-rank entry point: `python -m slurmtorch.bootstrap` (`main`) and `slurmtorch.init()`.

Whatever started this process (mpirun, srun with or without MPI, torchrun, nothing),
derive the world (`world`), export the env:// / NODE_RANK / CLUSTER_SPEC / TF_CONFIG
contract (`contracts`), set up `torch.distributed` unless --no-init (`group`), then run
the user's SCRIPT or -m MODULE as `__main__` (`target`) and end the rank (`exits`).
"""

from __future__ import annotations

# First: the phase clock (SLURMTORCH_TIMINGS) starts when `timings` is imported.
from slurmtorch.bootstrap import timings  # isort: skip

import atexit
import os
import sys

from slurmtorch import protocol, rankfiles
from slurmtorch.bootstrap import contracts, orphans, runid, stacks, torchrunhosts
from slurmtorch.bootstrap.exits import fail, finish, interrupted
from slurmtorch.bootstrap.group import init_group, install_patch_hook, teardown
from slurmtorch.backends import timeout_problem
from slurmtorch.bootstrap.options import DEFAULT_TIMEOUT, UsageError, parse_args
from slurmtorch.bootstrap.rankinfo import RankInfo
from slurmtorch.bootstrap.state import STATE
from slurmtorch.bootstrap.target import run_target, self_check, user_traceback
from slurmtorch.bootstrap.terminal import pipe_stdout
from slurmtorch.bootstrap.world import cpus_available, derive, own_session, place_rank, thread_defaults
from slurmtorch.errors import BootstrapError
from slurmtorch.limits import MAX_ENV_STRING

__all__ = ["init", "main", "RankInfo"]


def init(backend: str = "auto", timeout: float = DEFAULT_TIMEOUT, source: str = "auto",
         process_group: bool = True, role: str | None = None, cluster_spec: str = "ai-platform") -> RankInfo:
    """Derive this rank's world, export the contracts, and (by default) init torch.distributed.

    Idempotent: a second call returns the first call's `RankInfo`. `source` is
    auto | mpi | slurm | env | torchrun | single; `backend` auto | nccl | gloo | mpi;
    `timeout` in seconds goes to init_process_group; `cluster_spec` is CLUSTER_SPEC's shape
    (ai-platform | vertex).
    """
    if STATE.info is not None:
        return STATE.info
    problem = timeout_problem(float(timeout))
    if problem:
        raise BootstrapError(f"timeout={timeout!r} {problem}", tip="e.g. timeout=600 (seconds)")
    if cluster_spec not in protocol.CLUSTER_SPEC_SHAPES:
        raise BootstrapError(f"cluster_spec={cluster_spec!r} is not one of {', '.join(protocol.CLUSTER_SPEC_SHAPES)}")
    STATE.timeout = float(timeout)
    info, reservation = derive(source, backend, role=role, timeout=STATE.timeout)
    if STATE.main:
        # After MPI's collectives, not before: Open MPI waits in them by yielding the CPU,
        # which yields to nothing in a session of one (~2x our CPU at 8-16 ranks on 2 cores).
        own_session(os.environ)
    process_group = process_group and info.in_group
    timings.mark("detect")
    STATE.reservation = reservation
    STATE.info = info
    export_contracts(info, cluster_spec)
    os.environ.update(contracts.slurm_task_env(info, os.environ))
    # Before torch and the script's data loaders start their threads, which inherit it.
    STATE.placement = place_rank(os.environ, info.local_rank, info.local_world_size)
    os.environ.update(thread_defaults(os.environ, info.local_world_size, cpus_available()))
    if torchrunhosts.wanted(info, os.environ):  # after placement: it imports torch, whose threads inherit it
        STATE.info = info = torchrunhosts.with_hosts(info, os.environ, STATE.timeout)
        export_contracts(info, cluster_spec)  # now with CLUSTER_SPEC and TF_CONFIG
    # One run across restarts: SLURMTORCH_RUN_ID, and the trackers' resume variables where safe.
    runid.apply(runid.run_env(runid.run_id(os.environ), info.rank, os.environ))
    install_patch_hook()
    if os.environ.get(protocol.HEARTBEAT_S):  # --hang-timeout: the supervisor watches for stopped ranks
        from slurmtorch.bootstrap import heartbeat  # lazy: only jobs that asked for hang detection

        heartbeat.start(info.rank, info.hostname)
    stacks.install(info.rank, info.hostname or os.uname().nodename)  # `slurmtorch stacks` asks; ~0.2 ms
    if os.environ.get(protocol.LIVE_S):  # the batch script's default: `slurmtorch top` reads the samples
        from slurmtorch.bootstrap import live  # lazy: only ranks of a job that samples

        live.start(info.rank, info.hostname or os.uname().nodename, info.local_rank)
    if process_group:
        init_group(info, backend, timeout)
        timings.mark("init_process_group")
    if not STATE.main:
        atexit.register(teardown)
    return info


def export_contracts(info: RankInfo, cluster_spec: str) -> None:
    """Every contract variable of `info` into os.environ, and out of it those it has none of
    (inherited from a parent process, not ours)."""
    exported = contracts.env_for(info, cluster_spec)
    if info.rank == 0 and protocol.OMITTED in exported:
        sys.stderr.write(f"slurmtorch: note: {exported[protocol.OMITTED]} not exported: with "
                         f"{info.world_size} ranks it is over the {MAX_ENV_STRING} bytes execve lets one "
                         "variable hold, and every program a rank started would fail (E2BIG)\n")
    os.environ.update(exported)
    for key in contracts.unset_keys(exported):
        os.environ.pop(key, None)


def note_started(environ=os.environ) -> None:
    """Leave the file the batch script names in SLURMTORCH_STARTED (srun's task 0 only).

    srun exits 0 when its step never launched (slurmstepd failing to set up PMIx, say):
    this file is how the batch script tells that apart from a job whose ranks all ended
    well. Best effort: a folder this process cannot write leaves no file, and the batch
    script only checks where the ranks see the job folder (no container).
    """
    path = environ.get(protocol.STARTED)
    if path and environ.get("SLURM_PROCID") == "0":
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
        except OSError:
            pass


def line_atomic_stdio(streams=None) -> None:
    """Unbuffered stdout/stderr become line-buffered: still live, one write per line.

    torchrun starts its workers with `python -u`, and PYTHONUNBUFFERED is common on
    clusters; print() then writes the text and the newline separately, and ranks that
    share one log (torchrun's per-node file, Hydra's merged stream) cut each other's
    lines in half. Line buffering flushes at every newline, so nothing waits that a
    reader would miss, except a partial line until its newline or an explicit flush.
    """
    for stream in (sys.stdout, sys.stderr) if streams is None else streams:
        if getattr(stream, "write_through", False):
            try:
                stream.reconfigure(write_through=False, line_buffering=True)  # type: ignore[union-attr]  # as getattr
            except (AttributeError, ValueError, OSError):
                pass


def main(argv: list[str] | None = None) -> int:
    """`python -m slurmtorch.bootstrap ...`; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        sys.stderr.write(exc.render() + "\n")
        return exc.exit_code
    STATE.main = True
    note_started()
    line_atomic_stdio()
    pipe_stdout(os.environ)  # not a terminal under Open MPI's pty, as under srun (bootstrap/terminal.py)
    code = 0
    try:
        info = init(opts.backend, opts.timeout, opts.source, process_group=opts.init, role=opts.role,
                    cluster_spec=opts.cluster_spec)
        if opts.script or opts.module:
            if os.environ.get(protocol.PREEMPT_SIGNAL):  # the job asked for --signal
                from slurmtorch.bootstrap import preempt  # lazy: only a rank with a handler to set needs it

                preempt.install()
            orphans.adopt()
            timings.mark("handover")
            timings.write_timings(info, STATE.timings)
            run_target(opts, info)
        else:
            code = self_check(info, opts.init and info.in_group, STATE.backend)
    except SystemExit as exc:
        if exc.code is None or exc.code == 0:
            code = 0
        elif isinstance(exc.code, int):
            fail(exc.code, rankfiles.exit_text(exc.code))
        else:
            fail(1, str(exc.code))
    except BootstrapError as exc:
        fail(exc.exit_code, exc.render())
    except KeyboardInterrupt:
        interrupted()
    except BaseException as exc:
        fail(1, user_traceback(exc))
    teardown()
    finish(code)
    return code  # not reached: finish() ends the process
