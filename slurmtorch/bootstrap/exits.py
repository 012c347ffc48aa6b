"""How a rank ends: the whole job at once when it fails, without interpreter finalization when not.

Ctrl-C ends a rank as it ends `python x.py` (killed by SIGINT), with one line from rank 0.
An exception in any rank prints `rank R on HOST failed:` and the traceback (a
BootstrapError: its one-line message and tip), then ends the whole job at once:
MPI_Abort under MPI (mpirun and srun then kill every rank), otherwise an immediate
exit 1 (torchrun kills the others; under srun use --kill-on-bad-exit=1, else the
peers fail on the closed connection within seconds). A failing rank skips atexit
handlers: promptness first. SystemExit codes pass through (a non-zero one ends the
job the same way, with that code).

A rank whose script returned leaves `rank-R.exit` in the job folder (note_exit): a rank
that returns while its peers still run collectives says nothing else, and srun prints
nothing for an exit 0, so without it the report could only guess at a lost node.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import time

from slurmtorch import protocol
from slurmtorch import rankfiles
from slurmtorch.bootstrap import orphans, stacks
from slurmtorch.bootstrap.rankinfo import rank_hint
from slurmtorch.bootstrap.state import STATE


# How long a rank that failed only because a peer died or hung (a timeout, a reset
# connection) waits before it ends the job: its peers, failing at about the same moment,
# get to report too, so the one rank that said nothing is the one that hung.
CONSEQUENCE_GRACE_S = 1.0


def fail(code: int, text: str) -> None:
    """Report and end the whole job now (a consequence of a peer's failure: nearly now)."""
    info = STATE.info
    who = info.rank if info is not None else rank_hint(os.environ)
    try:
        sys.stdout.flush()
    except Exception:
        pass
    sys.stderr.write(f"{rankfiles.failure_header(who, os.uname().nodename)}\n{text.rstrip()}\n")
    sys.stderr.flush()
    if info is not None and os.environ.get(protocol.HEARTBEAT_S):
        from slurmtorch.bootstrap import heartbeat  # lazy: only jobs that asked for hang detection

        heartbeat.stop(info.rank)  # it said why it ended: not a rank that stopped answering
    from slurmtorch.bootstrap import mpi  # lazy: ~0.7 ms off a non-MPI rank's start; needed at its end only

    if info is not None and info.world_size > 1 and rankfiles.is_consequence(text):
        stacks.write_end(sys.exc_info()[2])  # where it waited, for the report beside the hung rank's
        time.sleep(CONSEQUENCE_GRACE_S)
    orphans.end()

    mpi.abort(code)  # returns only when MPI is not running
    os._exit(code)


def interrupted() -> None:
    """Ctrl-C (SIGINT, as torchrun, srun and our guard pass it on): end as `python x.py` does,
    killed by SIGINT (a shell shows 130), with one line for the whole job, from rank 0: not
    a failure report per rank, and no MPI_Abort (Open MPI's box; the launcher is ending
    the job already)."""
    info = STATE.info
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if info is None or info.rank == 0:
        who = info.rank if info is not None else rank_hint(os.environ)
        try:
            sys.stderr.write(f"rank {who} on {os.uname().nodename}: interrupted (Ctrl-C)\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
    if info is not None and os.environ.get(protocol.HEARTBEAT_S):
        from slurmtorch.bootstrap import heartbeat  # lazy: as in fail()

        heartbeat.stop(info.rank)  # it said why it ended
    orphans.end()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(128 + signal.SIGINT)  # not reached unless SIGINT is blocked


def note_exit(code: int, environ=os.environ) -> None:
    """Leave `rank-R.exit` in $SLURMTORCH_JOB_DIR (or a local run's folder): `rank R on HOST exited CODE restart N`
    (rankfiles.exit_line; submit.failures reads it). Best effort and cheap (one small
    write, nothing imported): a folder this rank cannot write (a container without it, a
    full disk) leaves no file and never fails the rank.
    """
    folder, info = protocol.rank_folder(environ), STATE.info
    if not folder or info is None:
        return
    from slurmtorch.bootstrap.preempt import restart_count  # lazy: at the rank's end only

    restart = restart_count(environ)
    line = rankfiles.exit_line(info.rank, info.hostname or os.uname().nodename, code, restart)
    try:
        fd = os.open(os.path.join(folder, protocol.exit_note_name(info.rank)), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def finish(code: int) -> None:
    """End a rank whose script returned: what interpreter exit does, minus its abort.

    Python's finalization can kill a finished rank: a gloo worker thread still alive
    (a DDP reducer or a future callback holding the group) wakes up, tries to take the
    GIL to drop a tensor, is ended with pthread_exit inside a noexcept frame, and
    libstdc++ calls `terminate called without an active exception` (SIGABRT; srun then
    kills the step). Seen in 1 of 15 srun launches of examples/train_ddp.py. So we do
    the parts of exit the user can observe ourselves, in Python's order (non-daemon
    threads joined, atexit handlers, buffers flushed, MPI finalized), then leave with
    os._exit: no finalization, no C++ destructors of threads torch still runs.
    """
    threading = sys.modules.get("threading")
    if threading is not None:
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()  # the user's and libraries' handlers (logging, multiprocessing)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken pipe: nothing more can be said there
    try:
        import ctypes  # lazy: only at exit; ~5 ms kept off every rank's start

        ctypes.CDLL(None).fflush(None)  # C-level stdio buffers (printf from extensions)
    except (OSError, AttributeError):
        pass
    orphans.end()  # what the script left running (under mpirun: a rank's own output held open)
    note_exit(code)  # before MPI_Finalize, which can wait for peers that never come
    if STATE.info is not None and os.environ.get(protocol.HEARTBEAT_S):
        from slurmtorch.bootstrap import heartbeat  # lazy: as in runner.init

        heartbeat.stop(STATE.info.rank)  # a rank that ended is not a rank that stopped
    from slurmtorch.bootstrap import mpi  # lazy: as in fail()

    mpi.finalize()  # mpirun counts a rank that skips MPI_Finalize as failed
    os._exit(code)
