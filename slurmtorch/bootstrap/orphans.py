"""What an mpirun rank's script starts ends with the rank, as under srun (Slurm's proctrack).

mpirun waits for every process that holds a rank's output open: a background child left
running (`sleep &`, a daemon, a setsid child) kept prterun, and the whole local run, alive
after the script returned. So an Open MPI rank becomes the subreaper of what it starts
(`adopt`): a daemon whose parent exits, or a setsid child, stays below it rather than
escaping to init; and when the rank ends (`end`), whatever is still below it gets SIGTERM,
then SIGKILL (slurmtorch/guard.py's end_leftovers, the same steps the guard of a local run
takes once the launch has ended). srun and torchrun ranks are left as they are: Slurm's
step end already does this, and torchrun's workers are Slurm's tasks or the user's.
"""

from __future__ import annotations

import os

PR_SET_CHILD_SUBREAPER = 36
ADOPTED: list[bool] = []  # this rank adopted its orphans: `end` has work to do


def adopt(environ=os.environ) -> bool:
    """Make this Open MPI rank the subreaper of its descendants (Linux); True if it is now."""
    if "OMPI_COMM_WORLD_SIZE" not in environ:
        return False
    import ctypes  # lazy: torch has imported it already in a rank with a process group (~5 ms otherwise)

    try:
        done = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if done:
        ADOPTED.append(True)
    return done


def end() -> None:
    """End whatever this rank started that still runs (only a rank that adopted its orphans)."""
    if not ADOPTED:
        return
    from slurmtorch import guard  # lazy: at the rank's end only (guard imports ctypes and time)

    guard.end_leftovers()
