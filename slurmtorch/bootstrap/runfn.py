"""In-job half of `Distributor`: `python -m slurmtorch.bootstrap -m slurmtorch.bootstrap.runfn WORKDIR`.

The bootstrap has already derived the world and initialised the process group when
this runs. It reads what the submitting process left in WORKDIR (`meta.json`, and
`payload.pkl` for a function), runs the function or file on every rank, and answers
through files, because that is the one channel a batch job and a laptop share:

- rank 0's return value -> `result.pkl` (cloudpickle), or with `answer="json"` (meta's
  `answer`) `result.json`: plain data, so the side that reads it unpickles nothing;
- a rank that raises -> `error-rank-R.json` (rank, host, exception type, formatted
  traceback, and `restart_count()` as `restart`: a requeued job reruns in the
  same WORKDIR), then the exception is re-raised so the bootstrap ends the whole job.

Both are written under a temporary name and renamed: the submitting side polls
these files and must never read half of one (on NFS, close-then-rename is also what
makes the content visible to another host).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from slurmtorch.atomicwrite import write_atomic
from slurmtorch.bootstrap import target
from slurmtorch.bootstrap.target import run_script

META = "meta.json"
PAYLOAD = "payload.pkl"
RESULT = "result.pkl"
RESULT_JSON = "result.json"  # answer="json": rank 0's value as JSON, nothing to unpickle where it is read
ANSWERS = ("pickle", "json")  # how rank 0's value travels (meta's `answer`); the first is the default
ERROR_PREFIX = "error-rank-"


def _redirect_logs(workdir: str, rank: int) -> None:
    """mpirun on one host funnels every rank into one stream: give each rank its own files
    (the same `rank-R.out|err` layout srun writes in a Slurm job folder)."""
    for stream, fd, name in ((sys.stdout, 1, "out"), (sys.stderr, 2, "err")):
        stream.flush()
        target = os.open(os.path.join(workdir, f"rank-{rank}.{name}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(target, fd)
        os.close(target)


class UnsentAnswer(TypeError):
    """Rank 0's value cannot travel in its job's answer format: reported as this one line,
    without a traceback of ours (the user's function returned; nothing of theirs failed)."""


def _report(workdir: str, rank: int, exc: BaseException) -> None:
    from slurmtorch.bootstrap.preempt import restart_count  # lazy: a failing rank only

    record = {
        "rank": rank,
        "host": socket.gethostname(),
        "time": time.time(),
        # Which run of a requeued job this is: the submitting side ignores earlier runs' errors.
        "restart": restart_count(),
        "exc_type": "TypeError" if isinstance(exc, UnsentAnswer) else type(exc).__qualname__,
        "traceback": f"TypeError: {exc}\n" if isinstance(exc, UnsentAnswer) else target.user_traceback(exc),
    }
    try:
        write_atomic(os.path.join(workdir, f"{ERROR_PREFIX}{rank}.json"), json.dumps(record).encode())
    except OSError as err:  # the job still fails; the bootstrap prints the traceback
        print(f"slurmtorch: rank {rank} could not write its error report: {err}", file=sys.stderr)


def _run_function(workdir: str, rank: int, meta: dict) -> None:
    import cloudpickle  # lazy: only a function payload needs it, not a file run

    sent = tuple(meta.get("python", sys.version_info[:2]))
    if sent != tuple(sys.version_info[:2]):
        # Functions travel as bytecode: another Python version would fail in obscure ways.
        raise RuntimeError(
            f"the function was pickled by Python {sent[0]}.{sent[1]}, but this rank runs Python "
            f"{sys.version_info[0]}.{sys.version_info[1]} ({sys.executable}): use the same Python on both "
            "sides (the site's `python:`), or run a file instead")
    with open(os.path.join(workdir, PAYLOAD), "rb") as f:
        fn, args, kwargs = cloudpickle.load(f)
    try:
        value = fn(*args, **kwargs)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
        value = None  # sys.exit(0) in a function: it ended well, with nothing to return
    if rank != 0:
        return
    if meta.get("answer") == "json":
        write_atomic(os.path.join(workdir, RESULT_JSON), _as_json(value, fn))
        return
    try:
        data = cloudpickle.dumps(value)
    except Exception as exc:
        raise UnsentAnswer(f"the return value of {getattr(fn, '__qualname__', fn)!r} on rank 0 "
                           f"({type(value).__name__}) cannot be pickled: {exc}") from exc
    write_atomic(os.path.join(workdir, RESULT), data)


def _as_json(value, fn) -> bytes:
    """Rank 0's value as JSON (NaN and infinities as Python writes them), or UnsentAnswer."""
    try:
        return json.dumps(value).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise UnsentAnswer(f"the return value of {getattr(fn, '__qualname__', fn)!r} on rank 0 "
                           f"({type(value).__name__}) is not JSON, and answer='json' sends JSON only: {exc}") \
            from None


def _run_file(script: str, args: list[str]) -> None:
    """As the bootstrap runs a SCRIPT: argv, sys.path[0] and `__main__` as `python SCRIPT` gives."""
    try:
        run_script(script, args)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m slurmtorch.bootstrap -m slurmtorch.bootstrap.runfn WORKDIR")
    workdir = argv[0]
    rank = int(os.environ.get("RANK", "0"))
    with open(os.path.join(workdir, META), encoding="utf-8") as f:
        meta = json.load(f)
    if meta.get("redirect_logs"):
        _redirect_logs(workdir, rank)
    # Rank 0's output is followed live by the submitting side: do not sit in a block buffer.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a replaced stream may lack it
        except (AttributeError, ValueError):
            pass
    try:
        if meta["kind"] == "function":
            _run_function(workdir, rank, meta)
        else:
            _run_file(meta["script"], list(meta.get("args", ())))
    except BaseException as exc:
        _report(workdir, rank, exc)
        raise


if __name__ == "__main__":
    main(sys.argv[1:])
