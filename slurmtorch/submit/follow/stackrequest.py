"""Ask every rank of a running job for its stacks, and collect what they write.

The old answers are removed, the signal is sent (`send`: `scancel --signal` from the
login node or the batch node, `scancel.send_stacks_signal`), then the job folder is read until
every rank has either answered (`stacks/rank-R.txt`, replaced whole by the rank) or is
known not to (its alive lock free: dead, or exited; `bootstrap.stacks`), or the time is up.
A live rank answers within milliseconds, so the wait ends as soon as the last one has.
Its native frames (py-spy's, where installed: bootstrap.native) follow in seconds; `natives`
waits for those of the ranks that answered.

A local run (`slurmtorch mpirun`, no Slurm to carry a signal) is asked by sending the signal
to each rank's process on this host, the one its alive file names and whose lock is held.
"""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from slurmtorch import protocol, readback
from slurmtorch.rankfiles import Native, RankStacks, parse_alive, parse_native, parse_stacks
from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.submit.jobfolder.failures import latest_exits
from slurmtorch.submit.jobfolder.stacks import Silent, summary_lines

WAIT_S = 3.0  # how long a rank whose process lives gets to answer
RESEND_S = 0.5  # a rank that the signal reached answers in milliseconds: after this, signal the rest by pid
NATIVE_WAIT_S = 30.0  # how long py-spy gets: it reads libtorch's symbols, seconds on a loaded node
SIGNAL = getattr(signal, f"SIG{protocol.STACKS_SIGNAL}")
POLL_S = 0.05


def is_alive(path: Path) -> bool | None:
    """Whether a process holds `path`'s lock: True, False (none: the rank's process is
    gone), or None (no such file: the rank never got that far)."""
    try:
        f = readback.open_plain(path)  # never a FIFO someone left there: opening one waits
    except (OSError, readback.NotRead):
        return None
    with f:  # closing it lets go of the lock just taken
        try:
            fcntl.lockf(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
    return False


def clear(folder: Path, ranks: int) -> None:
    """Remove earlier answers: what is there next is new. Only those: a rank's end file
    (`rank-R.end.txt`) is open in the rank, which writes its last stacks there as it ends."""
    for rank in range(ranks):
        for name in (protocol.stacks_name(rank), protocol.native_name(rank)):
            (folder / protocol.STACKS / name).unlink(missing_ok=True)


def ask(folder: Path, ranks: int, send: Callable[[], None], wait_s: float = WAIT_S, native: bool = False,
        resend: Callable[[dict[str, list[int]]], None] | None = None) -> tuple[dict[int, RankStacks], list[Silent]]:
    """(the stacks of the ranks that answered, the ranks that did not and why). With
    `native`, the ranks also take their native frames (`natives` collects them); without,
    they run no py-spy (the supervisor, about to end the step, wants the summary only).
    `resend` gets, once RESEND_S has passed, the live ranks that have not answered (their
    pids by node, from their alive files): for a signal that does not reach them all."""
    clear(folder, ranks)
    wanted = folder / protocol.STACKS / protocol.NATIVE_WANTED
    try:
        if native:  # never through a link someone left there
            os.close(os.open(wanted, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        else:
            wanted.unlink(missing_ok=True)
    except OSError:
        pass  # no stacks/ yet (no rank started), or not writable: the Python stacks still come
    send()
    start = time.monotonic()
    while True:
        stacks, silent, waiting = collect(folder, ranks)
        if not waiting or time.monotonic() >= start + wait_s:
            return stacks, silent + [Silent(r, h, why) for r, h, why in waiting]
        if resend is not None and time.monotonic() >= start + RESEND_S:
            missed = live_pids(folder, [r for r, _, _ in waiting])
            if missed:
                resend(missed)
            resend = None
        time.sleep(POLL_S)


def live_pids(folder: Path, ranks: Iterable[int]) -> dict[str, list[int]]:
    """The pids of these ranks' live processes, by node: the ones their alive files name,
    whose locks are held (so the pid is that rank's process still, not a reused one)."""
    out: dict[str, list[int]] = {}
    for rank in ranks:
        alive = folder / protocol.STACKS / protocol.alive_name(rank)
        placed = parse_alive(_small(alive))
        if placed is not None and is_alive(alive):
            out.setdefault(placed[0], []).append(placed[1])
    return out


def collect(folder: Path, ranks: int) -> tuple[dict[int, RankStacks], list[Silent], list[tuple[int, str, str]]]:
    """What the folder says now: stacks, the ranks that cannot answer, and the ranks still
    awaited (rank, host, what they are if they never do)."""
    where = folder / protocol.STACKS
    exits = latest_exits(jobdir.exit_notes(folder))
    stacks, silent, waiting = {}, [], []
    for rank in range(ranks):
        answer = parse_stacks(_stacks_file(where / protocol.stacks_name(rank)))
        if answer is not None:
            stacks[rank] = answer
            continue
        alive = is_alive(where / protocol.alive_name(rank))
        placed = parse_alive(_small(where / protocol.alive_name(rank)))
        host = placed[0] if placed else (exits[rank].host if rank in exits else "")
        if alive is False:
            why = f"exited {exits[rank].code} (its script returned)" if rank in exits else "dead (its process is gone)"
            silent.append(Silent(rank, host, why))
        elif alive:
            waiting.append((rank, host, "no answer (its process lives; the interpreter is held by C code?)"))
        else:
            waiting.append((rank, host, "not started (still starting, or never did)"))
    return stacks, silent, waiting


def natives(folder: Path, ranks: Iterable[int], wait_s: float = NATIVE_WAIT_S) -> tuple[dict[int, Native], list[int]]:
    """The native frames of `ranks` (those that answered), each once its file is there, or
    the time is up: (what came, the ranks still awaited)."""
    deadline = time.monotonic() + wait_s
    while True:
        got = {r: n for r in ranks if (n := parse_native(_stacks_file(folder / protocol.STACKS / protocol.native_name(r))))}
        late = [r for r in ranks if r not in got]
        if not late or time.monotonic() >= deadline:
            return got, late
        time.sleep(POLL_S)


def signal_here(folder: Path, ranks: int, host: str) -> None:
    """Send the stacks signal to each rank of a local run on `host` whose process is proven
    the rank's: the pid its alive file names is the one holding that file's lock
    (`lock_holder`), never merely a pid a file names."""
    for rank in range(ranks):
        alive = folder / protocol.STACKS / protocol.alive_name(rank)
        placed = parse_alive(_small(alive))
        if placed is None or placed[0] != host or lock_holder(alive) != placed[1]:
            continue
        try:
            os.kill(placed[1], SIGNAL)
        except OSError:
            pass  # it ended just now: collect() names it


# struct flock as F_GETLK fills it: Linux (type, whence, start, len, pid); macOS (start, len, pid, type, whence).
_FLOCK = {"linux": ("@hhqqi", (0, 1, 2, 3, 4)), "darwin": ("@qqihh", (2, 3, 4, 0, 1))}


def lock_holder(path: Path) -> int | None:
    """The pid of the process holding `path`'s lock on this host (fcntl F_GETLK), or None:
    none holds it, no such file, or a system whose lock record is not known here."""
    layout = _FLOCK.get(sys.platform.rstrip("0123456789"))
    if layout is None:
        return None
    fmt, order = layout
    fields = [fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0]  # type, whence, start, len, pid
    try:
        f = readback.open_plain(path)
    except (OSError, readback.NotRead):
        return None
    with f:
        try:
            got = struct.unpack(fmt, fcntl.fcntl(f.fileno(), fcntl.F_GETLK,
                                                 struct.pack(fmt, *(fields[i] for i in order))))
        except OSError:
            return None
    named = {i: got[k] for k, i in enumerate(order)}
    return None if named[0] == fcntl.F_UNLCK else named[4]


def _small(path: Path) -> str:
    """An alive file's line ('' when there is none, or it is not one)."""
    return readback.text_or_empty(path, readback.SAMPLE, cut=None)


def _stacks_file(path: Path) -> str:
    """A rank's stacks or native frames ('' when there are none, or they are not a plain file)."""
    return readback.text_or_empty(path, readback.STACKS, cut=None)


def summary(folder: Path, ranks: int, send: Callable[[], None], wait_s: float = WAIT_S) -> list[str]:
    """`ask`, then the grouped lines (`stacks.summary_lines`)."""
    stacks, silent = ask(folder, ranks, send, wait_s)
    return summary_lines(stacks, silent)
