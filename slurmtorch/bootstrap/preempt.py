"""Preemption: checkpoint hooks, the rank's signal handler, and requeue.

The flow (submit with `--signal USR1@60`, which also sets `--requeue`):

1. Slurm sends SIGUSR1 to every rank 60 s before the time limit (or when an admin or a
   preemption policy does it: `scancel --signal=USR1 JOBID`). The batch shell is not
   signalled (no `B:`): the ranks are where the state lives.
2. `install()` (called by the bootstrap before it runs the user's script) has set a
   handler for that signal. In each rank it runs the hooks registered with
   `on_preempt(fn)`, in order (a typical hook saves a checkpoint on rank 0).
3. Every process runs its hooks, leaves a mark that it did (the job folder's
   `.preempted/start-S/rank-R`) and *returns* to training at once. It must not wait inside
   the handler: Python runs a handler between bytecodes only, so a rank blocked in a
   collective (gloo, NCCL) runs its handler once that collective completes, which needs
   every other rank to reach it too.
4. Exactly one process requeues: job rank 0 ($SLURMTORCH_JOB_RANK, which the bootstrap
   sets for every process, ps/evaluator included). After its hooks, a thread of it waits
   until every rank of the world has left its mark (at most WAIT_FOR_RANKS_S), then runs
   `scontrol requeue JOBID` (an array task is `ARRAYJOBID_TASKID`) and exits; Slurm ends
   every rank, puts the job back in the queue with the same id and folder, and starts the
   batch script again with SLURM_RESTART_COUNT incremented. Requeueing at once would end
   a rank still waiting in a collective before its own hooks ran (its shard of a
   checkpoint lost; seen on a loaded machine). Every other process (and one whose job
   rank is unknown: it never acts as rank 0) arms a fallback timer: if it is still alive
   WAIT_FOR_RANK0_S later (rank 0 never saw the signal, or died), it requeues itself.
5. The next run reads `restart_count()` and resumes from its checkpoint.

Hooks run at a different point of the training loop in each rank, so a hook must not
use collectives (no all_reduce, no barrier, no gathering a sharded state dict): it would
meet the other ranks' training collectives instead. Save what this rank holds, locally;
typically rank 0 saves and the others do nothing. Keep it shorter than WAIT_FOR_RANKS_S.

A script that sets its own handler for the signal (Lightning's SLURMEnvironment sets one
for SIGUSR1 that saves `hpc_ckpt_N.ckpt` and runs `scontrol requeue`) keeps it, as under
plain srun: while ours holds the signal, `signal.getsignal` reports the script's handler
(SIG_DFL before it sets one, so Lightning's "is a handler set already?" check passes) and
`signal.signal` chains the script's handler behind ours instead of dropping ours. On the
signal the on_preempt hooks run, then the script's handler, which owns the requeue:
slurmtorch does not requeue a second time.

Without requeue (`--signal` with `--no-requeue`) the signal only runs the hooks and
the job carries on. Everything here is in-rank and imports nothing heavy; the requeue
itself is `slurmtorch.requeue`'s, the one path the restart supervisor takes too.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Mapping

from slurmtorch import events, protocol
from slurmtorch.errors import SlurmtorchError

__all__ = ["on_preempt", "install", "restart_count", "checkpoint_dir", "requeue_target", "preempt_signal",
           "job_rank"]

ENV_SIGNAL = protocol.PREEMPT_SIGNAL  # e.g. USR1; set by the rendered script for --signal
ENV_REQUEUE = protocol.PREEMPT_REQUEUE  # 1 (default) or 0
ENV_JOB_RANK = protocol.JOB_RANK  # set by the bootstrap (contracts.env_for)
ENV_RESTARTS = protocol.RESTART_COUNT  # starts before this one; set by the restart supervisor
# How long job rank 0 waits, after its own hooks, for every rank to have run theirs before
# it requeues anyway (naming the ranks that did not).
WAIT_FOR_RANKS_S = 20.0
# How long after the signal a process other than job rank 0 requeues the job itself,
# should it still be running (rank 0's requeue ends it first). Longer than rank 0's wait,
# short enough to leave a `--signal ...@60` warning time to requeue.
WAIT_FOR_RANK0_S = 30.0
# What a rank says on the signal in a job submitted with --no-requeue (Slurm refuses `scontrol requeue`):
# a script's own requeue (Lightning's auto-requeue) would otherwise fail without a word of ours.
NO_REQUEUE = "this job cannot be requeued (--no-requeue)"

_HOOKS: list[Callable[[], object]] = []
_STATE: dict = {"installed": None, "handling": False, "chained": None}
# signal's own functions, before `install` puts `_set_handler`/`_get_handler` in their place.
_real_signal, _real_getsignal = signal.signal, signal.getsignal


def on_preempt(fn: Callable[[], object]) -> Callable[[], object]:
    """Register `fn()` to run in this rank when the preemption signal arrives.

    Hooks run in registration order, in every rank, in the main thread between two
    Python statements of the training loop (so never inside a half-done step). Usable
    as a decorator. An exception in a hook is printed and the job is still requeued.
    Ranks reach their hooks at different points of the loop: a hook must not use
    collectives; save this rank's own state (typically: rank 0 saves, others do nothing).
    """
    if not callable(fn):
        raise TypeError(f"on_preempt needs a callable, got {fn!r}")
    _HOOKS.append(fn)
    return fn


def restart_count(environ: Mapping[str, str] | None = None) -> int:
    """How many times this job's script has started before this start (0 on the first).

    Every start counts: a restart on spare nodes after a failure (`--max-restarts`: the
    supervisor sets SLURMTORCH_RESTART_COUNT) and a requeue (SLURM_RESTART_COUNT, which
    Slurm increments), so a script resumes from its checkpoint whenever this is > 0.
    """
    environ = os.environ if environ is None else environ
    for key in (ENV_RESTARTS, "SLURM_RESTART_COUNT"):
        text = str(environ.get(key, "") or "").strip()
        if text.isdigit():
            return int(text)
    return 0


def checkpoint_dir(environ: Mapping[str, str] | None = None):
    """A folder for this job's checkpoints that outlives restarts and requeues (a `Path`).

    `checkpoints/` in the job's folder ($SLURMTORCH_JOB_DIR: an array trial's own), else
    $SLURMTORCH_CHECKPOINT_DIR, else `./checkpoints`. Made if missing (by every rank that
    asks: that is safe). A restarted or requeued job finds there what its last start saved.
    """
    from pathlib import Path  # lazy: only scripts that checkpoint ask

    environ = os.environ if environ is None else environ
    job = environ.get(protocol.JOB_DIR, "").strip()
    folder = Path(job) / protocol.CHECKPOINTS if job else Path(environ.get(protocol.CHECKPOINT_DIR, "") or "checkpoints")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def requeue_target(environ: Mapping[str, str] | None = None) -> str:
    """The id `scontrol requeue` needs (`slurmtorch.requeue.target`): `A_T` for an array task."""
    from slurmtorch import requeue as requeuing  # lazy: subprocess and hostlist, for a requeuing rank only

    return requeuing.target(os.environ if environ is None else environ)


def preempt_signal(text: str) -> signal.Signals:
    """`USR1`, `SIGUSR1`, `10` or `USR1@60` -> signal.SIGUSR1 (the `@` time is Slurm's business)."""
    name = str(text).strip().split("@", 1)[0]
    if ":" in name:
        name = name.rsplit(":", 1)[1]
    if name.isdigit():
        return signal.Signals(int(name))
    name = name.upper()
    return signal.Signals[name if name.startswith("SIG") else "SIG" + name]


def install(sig: str | int | None = None, *, requeue: bool | None = None, runner=None,
            environ: Mapping[str, str] | None = None) -> signal.Signals | None:
    """Set this rank's preemption handler; returns the signal, or None when there is none.

    `sig` defaults to $SLURMTORCH_PREEMPT_SIGNAL (written by `slurmtorch sbatch --signal`);
    without either this does nothing, so the bootstrap may always call it. `requeue`
    defaults to $SLURMTORCH_PREEMPT_REQUEUE (1). Call it in the main thread.
    """
    environ = os.environ if environ is None else environ
    if sig is None:
        sig = environ.get(ENV_SIGNAL) or None
    if sig is None:
        return None
    signum = signal.Signals(sig) if isinstance(sig, int) else preempt_signal(sig)
    if requeue is None:
        requeue = environ.get(ENV_REQUEUE, "1").strip() not in ("0", "false", "no", "")
    _STATE.update(installed=signum, requeue=requeue, runner=runner, environ=environ, handling=False, chained=None)
    _real_signal(signum, _handle)
    signal.signal, signal.getsignal = _set_handler, _get_handler  # chain a script's own handler (below)
    return signum


def _ours(signum) -> bool:
    try:
        return _STATE["installed"] is not None and int(signum) == int(_STATE["installed"])
    except (TypeError, ValueError):
        return False


def _get_handler(signum):
    """`signal.getsignal`, except that our handler holding the preemption signal reads as the
    script's own (SIG_DFL when it has none): frameworks that set theirs only where none is set
    (Lightning) set it, and one that restores what it found gives the signal back to us."""
    real = _real_getsignal(signum)
    if _ours(signum) and real is _handle:
        return _STATE["chained"] or signal.SIG_DFL
    return real


def _set_handler(signum, handler):
    """`signal.signal`, except that a script's handler for the preemption signal is chained behind
    ours (`_handle` runs the hooks, then it) rather than replacing ours; SIG_IGN is obeyed."""
    if not _ours(signum):
        return _real_signal(signum, handler)
    previous = _get_handler(signum)
    if handler is signal.SIG_IGN:
        _STATE["chained"] = None
        _real_signal(signum, signal.SIG_IGN)
    else:
        _STATE["chained"] = None if handler in (signal.SIG_DFL, None) else handler
        _real_signal(signum, _handle)
    return previous


def job_rank(environ: Mapping[str, str]) -> int | None:
    """This process's rank in the whole job, or None when unknown (never guessed as 0).

    $SLURMTORCH_JOB_RANK under the bootstrap; else RANK (torchrun's and env:// worlds
    are job-wide). Not SLURM_PROCID or PMIX_RANK: they count within one srun step, and
    a job with several steps (roles) would have several zeros.
    """
    for key in (ENV_JOB_RANK, "RANK"):
        value = str(environ.get(key, "")).strip()
        if value.isdigit():
            return int(value)
    return None


def _say(text: str) -> None:
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - a closed stdout must not stop the requeue
        pass
    sys.stderr.write(f"slurmtorch: {text}\n")
    sys.stderr.flush()


def run_hooks() -> bool:
    """Run every hook; False when one raised (it is printed, the rest still run)."""
    ok = True
    for fn in list(_HOOKS):
        try:
            fn()
        except BaseException:  # noqa: BLE001 - a failing checkpoint must not block the requeue
            ok = False
            import traceback  # lazy: only a failing hook formats one

            _say(f"preemption hook {getattr(fn, '__name__', fn)!r} failed:\n{traceback.format_exc().rstrip()}")
    return ok


def requeue(environ: Mapping[str, str] | None = None, runner=None) -> str:
    """`scontrol requeue` this job (array-aware); returns the id requeued."""
    from slurmtorch import requeue as requeuing  # lazy: as in requeue_target

    target = requeue_target(environ)
    requeuing.requeue(target, runner or requeuing.run)
    return target


def _requeue_and_exit(who: str, host: str, environ: Mapping[str, str]) -> None:
    # Said first: the requeue ends this step at once (Slurm sends TERM to every rank), and a
    # line printed after scontrol returns was lost about one run in ten on the testbed.
    try:
        _say(protocol.requeueing_line(who, host, requeue_target(environ), restart_count(environ) + 1))
        folder = protocol.rank_folder(environ)
        if folder:  # before the requeue, as the line: Slurm's TERM may come the moment it is done
            events.append(folder, "requeued", by=f"{who} on {host}", why=f"{_STATE['installed'].name} received",
                          attempt=restart_count(environ))
        requeue(environ, _STATE["runner"])
    except SlurmtorchError as e:
        _say(f"{who} on {host}: requeue failed:\n{e.render()}")
        os._exit(1)
    os._exit(0)


def _fallback(who: str, host: str, environ: Mapping[str, str]) -> None:
    _say(f"{who}: job rank 0 did not requeue within {WAIT_FOR_RANK0_S:g} s; requeueing")
    _requeue_and_exit(who, host, environ)


def world_size(environ: Mapping[str, str]) -> int:
    """The ranks that may meet job rank 0 in a collective (the torch world; 1 when unknown)."""
    text = str(environ.get("WORLD_SIZE", "")).strip()
    return int(text) if text.isdigit() and int(text) > 0 else 1


def _marks(environ: Mapping[str, str]) -> str | None:
    """This start's folder of hooks-done marks, or None outside a job folder."""
    folder = protocol.rank_folder(environ)
    if not folder:
        return None
    return os.path.join(folder, protocol.PREEMPTED, os.path.dirname(protocol.preempted_name(restart_count(environ), 0)))


def _mark_name(rank: int) -> str:
    return os.path.basename(protocol.preempted_name(0, rank))


def _mark_hooks_done(environ: Mapping[str, str], rank: int | None) -> None:
    """Leave this rank's mark that its hooks ran (nothing for a rank whose job rank is unknown)."""
    marks = _marks(environ)
    if marks is None or rank is None:
        return
    try:
        os.makedirs(marks, exist_ok=True)
        os.close(os.open(os.path.join(marks, _mark_name(rank)), os.O_WRONLY | os.O_CREAT, 0o644))
    except OSError as e:  # a mark that cannot be written only makes rank 0 wait its longest
        _say(f"rank {rank}: cannot note that its preemption hooks ran ({e.strerror or e})")


def missing_ranks(names: set[str], size: int) -> list[int]:
    """The ranks of a world of `size` that left no mark among `names` (pure)."""
    return [r for r in range(size) if _mark_name(r) not in names]


def _requeue_when_every_rank_is_done(who: str, host: str, environ: Mapping[str, str]) -> None:
    """Job rank 0's thread: wait (bounded) for every rank's hooks, then requeue and exit."""
    marks, size = _marks(environ), world_size(environ)
    assert marks is not None  # _handle requeues at once without a job folder
    deadline = time.monotonic() + WAIT_FOR_RANKS_S
    missing = missing_ranks({_mark_name(0)}, size)
    while missing and time.monotonic() < deadline:
        time.sleep(0.2)
        try:
            missing = missing_ranks(set(os.listdir(marks)), size)
        except OSError:
            pass
    if missing:
        shown = ",".join(map(str, missing[:8])) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        _say(f"{who}: rank(s) {shown} did not finish their preemption hooks within {WAIT_FOR_RANKS_S:g} s; "
             f"requeueing anyway")
    _requeue_and_exit(who, host, environ)


def _handle(signum, frame) -> None:
    if _STATE["handling"]:
        return  # a second signal while the first is being handled
    _STATE["handling"] = True
    environ = _STATE["environ"]
    rank, host, name = job_rank(environ), os.uname().nodename, signal.Signals(signum).name
    who = f"rank {'?' if rank is None else rank}"
    chained = _STATE["chained"]
    if callable(chained):
        theirs = getattr(chained, "__qualname__", type(chained).__qualname__)
        then = "which requeues as it sees fit" if _STATE["requeue"] else (
            f"{NO_REQUEUE}: a requeue it asks for (Lightning's auto-requeue) is refused, and the job runs on until "
            "Slurm ends it at its time limit; without --no-requeue it would go on in a new allocation")
        _say(f"{who} on {host}: {name} received (restart {restart_count(environ)}); running {len(_HOOKS)} "
             f"preemption hook(s), then the script's own handler ({theirs}); {then}")
        run_hooks()
        try:
            chained(signum, frame)
        finally:
            _STATE["handling"] = False
        return
    _say(f"{who} on {host}: {name} received (restart {restart_count(environ)}); "
         f"running {len(_HOOKS)} preemption hook(s)")
    run_hooks()
    if not _STATE["requeue"]:
        _say(f"{who}: hooks done; {NO_REQUEUE}: it runs on until Slurm ends it at its time limit (without "
             "--no-requeue it would be requeued, to go on from what the hooks saved)")
        _STATE["handling"] = False
        return
    _mark_hooks_done(environ, rank)
    import threading  # lazy: only a signalled rank starts a thread; kept off every rank's start

    # Back to training now, whichever rank this is: a rank waiting for this one in a
    # collective runs its own handler only once this one meets it there.
    if rank == 0 and (_marks(environ) is None or world_size(environ) == 1):
        _requeue_and_exit(who, host, environ)  # nobody to wait for
    if rank == 0:
        threading.Thread(target=_requeue_when_every_rank_is_done, args=(who, host, environ), daemon=True).start()
        return
    timer = threading.Timer(WAIT_FOR_RANK0_S, _fallback, args=(who, host, environ))
    timer.daemon = True
    timer.start()
