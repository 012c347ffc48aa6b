"""A rank's heartbeat: whether its main thread still moves, written where the supervisor looks.

Started only when the job asked for hang detection (`--hang-timeout`: the supervisor sets
SLURMTORCH_HEARTBEAT_S). A daemon thread samples the main thread's current frame every
interval and writes one line to `$SLURMTORCH_JOB_DIR/.heartbeat/rank-R` (replaced whole,
so a reader never sees half a line):

    <written> <unmoved since> <torch|own> <rank> <host>

`unmoved since` is when the main thread last moved (another frame, or another instruction
in it); `torch` when it stands inside torch (a collective, DDP's backward waiting for its
peers' gradients), `own` anywhere else (the script's own code, a sleep). A rank stuck in
its own code while its peers wait in torch is the hung one; a file that stops being
written is a rank that stopped (frozen, or gone with its node). The supervisor reads
these (`submit.heartbeats`; the line is `rankfiles.beat_line`). No collective, no torch
import: the cost is one small file write per interval.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from slurmtorch import protocol
from slurmtorch import rankfiles

ENV_INTERVAL = protocol.HEARTBEAT_S
FOLDER = protocol.HEARTBEATS
_STOPPED = threading.Event()


def periodic_file(environ, interval_var: str, folder: str, name: str) -> tuple[str, float] | None:
    """(a rank's file in the job folder's `folder`, made ready; the seconds between its
    writes) when the job set `interval_var` > 0; None otherwise, or where the folder cannot
    be made: no such file is never a failed rank. (Heartbeats and live samples.)"""
    job_dir, text = environ.get(protocol.JOB_DIR), environ.get(interval_var, "")
    try:
        interval = float(text)
    except ValueError:
        return None
    if not job_dir or not interval > 0:
        return None
    path = os.path.join(job_dir, folder, name)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError:
        return None
    return path, interval


def start(rank: int, host: str, environ=os.environ) -> threading.Thread | None:
    """Start the heartbeat thread if the job asked for one; None otherwise."""
    target = periodic_file(environ, ENV_INTERVAL, FOLDER, protocol.heartbeat_name(rank))
    if target is None:
        return None
    path, interval = target
    main = threading.main_thread().ident
    thread = threading.Thread(target=_beat, args=(path, interval, main, rank, host), name="slurmtorch-heartbeat",
                              daemon=True)
    thread.start()
    return thread


def stop(rank: int, environ=os.environ) -> None:
    """Stop beating and remove the file: a rank that ended (and said why, or returned) is
    not a rank that stopped answering."""
    _STOPPED.set()
    folder = environ.get(protocol.JOB_DIR)
    if folder and environ.get(ENV_INTERVAL):
        _remove(os.path.join(folder, FOLDER, protocol.heartbeat_name(rank)))


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _torch_root() -> str:
    torch = sys.modules.get("torch")
    return os.path.dirname(getattr(torch, "__file__", "") or "") + os.sep if torch else ""


def _beat(path: str, interval: float, main: int, rank: int, host: str) -> None:
    last, since = None, time.time()
    tmp = f"{path}.tmp"
    while not _STOPPED.is_set():
        now = time.time()
        frame = sys._current_frames().get(main)
        if frame is None:
            return  # the main thread has ended
        where = (id(frame), frame.f_lasti)
        if where != last:
            last, since = where, now
        root = _torch_root()
        place = "torch" if root and frame.f_code.co_filename.startswith(root) else "own"
        del frame
        try:
            with open(tmp, "w") as f:
                f.write(rankfiles.beat_line(now, since, place, rank, host))
            os.replace(tmp, path)
        except OSError:
            pass
        if _STOPPED.is_set():  # stop() ran while this beat was being written
            _remove(path)
        _STOPPED.wait(interval)
