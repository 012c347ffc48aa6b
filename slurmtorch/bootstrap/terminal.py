"""A rank's stdout is a terminal where srun's would be: never under Open MPI's pseudo-terminal.

Open MPI 5's mpirun (PRRTE 3) connects every rank's stdout to a pseudo-terminal of its own
(built in; no option turns it off; stderr is a pipe), whatever mpirun's own output is. A
rank then believes it writes to a terminal (`sys.stdout.isatty()`), and progress bars and
colour libraries put their escape codes and carriage returns into the job's log files.
srun gives its tasks pipes. So before anything else runs, the bootstrap of an Open MPI rank
whose stdout is a terminal puts a pipe in its place, and a relay process copies the pipe
to the pseudo-terminal: Open MPI forwards the same bytes as before, but nothing in the rank
sees a terminal, with or without a file behind mpirun.

The relay is forked before MPI_Init and before any thread, holds only the two ends it
copies between, ignores the signals meant for the rank (it is in a session of its own, and
ends when the last writer closes the pipe: the rank and whatever it started), so
nothing written before a rank dies, even by SIGKILL, is lost.
"""

from __future__ import annotations

import os
import signal

# Signals a launcher or a terminal sends to the rank or its process group: the relay
# outlives the rank by the moment it takes to copy what is left, and must not die first.
_IGNORED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
            signal.SIGPIPE)


def under_open_mpis_pty(environ, isatty=os.isatty) -> bool:
    """Pure but for `isatty`: whether stdout is the terminal Open MPI's mpirun made for this rank.

    OMPI_COMM_WORLD_SIZE comes from mpirun before MPI_Init (srun --mpi=pmix gives it only
    after, and a pipe anyway; `srun --pty` stays a terminal, as asked).
    """
    return "OMPI_COMM_WORLD_SIZE" in environ and isatty(1)


def pipe_stdout(environ) -> bool:
    """Under Open MPI's pseudo-terminal, give this process a pipe as stdout (fd 1), copied to
    the terminal by a relay process; True if done. Call it while the process has one thread."""
    if not under_open_mpis_pty(environ):
        return False
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return False
    if pid == 0:
        _relay(read_end, write_end)  # never returns
    os.dup2(write_end, 1)
    os.close(write_end)
    os.close(read_end)
    return True


def _relay(read_end: int, write_end: int) -> None:
    """The relay process: pipe -> the terminal on fd 1, until every writer has closed the pipe."""
    try:
        os.close(write_end)
        os.setsid()
        for sig in _IGNORED:
            signal.signal(sig, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 2)  # Open MPI's stderr pipe ends with the rank, not with the relay
        os.closerange(3, read_end)
        os.closerange(read_end + 1, max(os.sysconf("SC_OPEN_MAX"), read_end + 1))
        while True:
            data = os.read(read_end, 65536)
            if not data:
                break
            while data:
                data = data[os.write(1, data):]
    except BaseException:  # noqa: BLE001 - the terminal is gone (EIO): nothing left to copy to
        pass
    finally:
        os._exit(0)
