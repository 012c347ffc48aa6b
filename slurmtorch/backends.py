"""What a torch process group may be asked for: one owner for the CLI, the site schema and
the bootstrap. Backend `auto` is nccl where CUDA and NCCL are there, else gloo (decided in
the rank); the timeout is checked the same way on the login node and in the rank."""

from __future__ import annotations

import math

BACKENDS = ("auto", "nccl", "gloo", "mpi")

# About 31 years: longer than any job runs, far below where torch's microsecond count of
# a timedelta overflows (~9.2e12 s, which gloo then rejects as a negative timeout).
MAX_TIMEOUT = 1e9


def timeout_problem(seconds: float) -> str | None:
    """Pure: why `seconds` cannot be a process-group timeout, or None when it can."""
    if not math.isfinite(seconds) or seconds <= 0:
        return ("must be a positive, finite number of seconds "
                "(a process group without a timeout can hang forever)")
    if seconds > MAX_TIMEOUT:
        return f"must be at most {MAX_TIMEOUT:.0f} seconds"
    return None
