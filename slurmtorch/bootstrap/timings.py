"""Phase timings of a rank's start (SLURMTORCH_TIMINGS=DIR: DIR/rank-R.json per rank).

The clock starts when this module is imported, which the bootstrap does first, so the
phases include the bootstrap's own imports. `benchmarks/phases.py` reads the files.
"""

from __future__ import annotations

import time

START = time.perf_counter()  # phase timings count from here
START_CPU = time.process_time()

# After the clock: these imports are part of the rank's start, and of its phases.
import json  # noqa: E402
import os  # noqa: E402

from slurmtorch import protocol  # noqa: E402
from slurmtorch.bootstrap.rankinfo import RankInfo  # noqa: E402

_MARKS: list[tuple[str, float]] = [("start", START)]
_CPU_MARKS: list[tuple[str, float]] = [("start", START_CPU)]


def mark(name: str) -> None:
    """End the phase `name` now (wall and CPU time)."""
    _MARKS.append((name, time.perf_counter()))
    _CPU_MARKS.append((name, time.process_time()))


def phase_durations(marks: list[tuple[str, float]], external: dict[str, float]) -> dict[str, float]:
    """Pure: seconds per phase from consecutive marks, with MPI's and torch's own costs split out.

    `external` holds durations measured inside a phase that are not ours (MPI_Init inside
    detection, `import torch` inside init); they are moved to their own keys.
    """
    out = {}
    for (_, a), (name, b) in zip(marks, marks[1:]):
        out[name] = b - a
    if "detect" in out:
        for key in ("mpi_init", "agree"):
            if key in external:
                out["detect"] -= external[key]
                out[key] = external[key]
    if "init_process_group" in out and "import_torch" in external:
        out["init_process_group"] -= external["import_torch"]
        out["import_torch"] = external["import_torch"]
    return out


def write_timings(info: RankInfo, torch_timings: dict[str, float]) -> None:
    """With SLURMTORCH_TIMINGS=DIR, each rank writes DIR/rank-R.json (for benchmarks/phases.py)."""
    folder = os.environ.get(protocol.TIMINGS)
    if not folder:
        return
    from slurmtorch.bootstrap import mpi  # lazy: ~0.7 ms off the start of a non-MPI rank that never reports

    external = {k: v for k, v in mpi.TIMINGS.items()}
    external.update(torch_timings)
    with open(os.path.join(folder, protocol.timings_name(info.rank)), "w") as fh:
        # Wall time, and this process's CPU time for the same phases: with more ranks than
        # cores, wall time grows with the oversubscription while the work does not.
        json.dump({"rank": info.rank, "world_size": info.world_size,
                   "phases": phase_durations(_MARKS, external),
                   "cpu": phase_durations(_CPU_MARKS, {k[:-4]: v for k, v in external.items()
                                                       if k.endswith("_cpu")})}, fh)
