"""A rank's stacks on request: every thread's Python stack, written to the job folder on a signal.

Installed by every rank in a job folder (`$SLURMTORCH_JOB_DIR`, or a local run's:
protocol.rank_folder), unless SLURMTORCH_NO_STACKS=1. On `protocol.STACKS_SIGNAL`
faulthandler's C handler dumps every thread's stack, with no GIL and no debugger, even
while the main thread is blocked inside a collective or a sleep. It writes into a pipe; a
daemon thread, blocked in read() until then (nothing runs between requests), copies each
dump into `stacks/rank-R.txt` under `rankfiles.stacks_header`, replaced whole, so a reader
never sees a torn file and the write is flushed at close on a shared filesystem. The write
end is non-blocking: a dump larger than the pipe is cut short, never a rank held up. Then,
when the request wants them (`stacks/native-wanted` is there: `slurmtorch stacks`, not the
supervisor about to end the step), it asks for the native frames (`bootstrap.native`:
py-spy, where installed), which follow in `stacks/rank-R.native.txt`.

The rank also holds `stacks/rank-R.alive` locked (a POSIX lock, which the kernel drops
with the process however it ends and which forked DataLoader workers do not inherit): a
reader that can take the lock knows no process of that rank lives (`submit.stackrequest.is_alive`).

The signal is ignored by default, so a process without this handler (the batch shell,
srun, torchrun's agent, a rank still importing torch) is untouched by a request.

As it ends, a rank leaves its stacks in `stacks/rank-R.end.txt`: on SIGTERM (srun ending
the step: the hung rank that never failed by itself) faulthandler dumps them there and
then lets SIGTERM end the process as before; a rank failing because a peer hung (the
group's timeout) writes its exception's stack there (`write_end`). The failure report
groups them (`submit.report`), so a process-group timeout says where every rank stood.
"""

from __future__ import annotations

import faulthandler
import fcntl
import os
import select
import signal
import threading

from slurmtorch import protocol
from slurmtorch import rankfiles
from slurmtorch.bootstrap import native

SIGNAL = getattr(signal, f"SIG{protocol.STACKS_SIGNAL}")
PIPE_BYTES = 1 << 20  # Linux's default pipe-max-size: room for ~100 threads of deep stacks
QUIET_S = 0.05  # a dump is a burst of writes; this long without one ends it
BURST_S = 1.0  # a write after a pause shorter than this belongs to the same dump


def install(rank: int, host: str, environ=os.environ) -> bool:
    """Install the handler and hold the alive lock; False (and nothing installed) where the
    job folder cannot be written: no stacks, never a failed rank."""
    folder = protocol.rank_folder(environ)
    if not folder or environ.get(protocol.NO_STACKS) == "1":
        return False
    where = os.path.join(folder, protocol.STACKS)
    try:
        os.makedirs(where, 0o700, exist_ok=True)  # `stacks` refuses one others can write (jobdir.checked)
        hold_alive(os.path.join(where, protocol.alive_name(rank)), rankfiles.alive_line(host, os.getpid()))
        read, write = os.pipe()
    except OSError:
        return False
    try:
        fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (OSError, AttributeError):
        pass  # the default 64 KiB: a deep dump is cut short
    os.set_blocking(write, False)
    main = threading.main_thread().ident
    assert main is not None  # set once a thread starts, and the main thread always has
    header = rankfiles.stacks_header(rank, host, os.getpid(), main)
    end = os.path.join(where, protocol.end_stacks_name(rank))
    try:
        ending = os.open(end, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
        os.write(ending, header.encode())
    except OSError:
        ending = None
    if ending is not None:
        _HELD.append(ending)
        _END[:] = [end, header]
        faulthandler.register(signal.SIGTERM, file=ending, all_threads=True, chain=True)
    native_file = (os.path.join(where, protocol.native_name(rank)), rankfiles.native_header(rank, os.getpid()), environ)
    threading.Thread(target=_copy, args=(read, os.path.join(where, protocol.stacks_name(rank)), header, native_file),
                     name="slurmtorch-stacks", daemon=True).start()
    faulthandler.register(SIGNAL, file=write, all_threads=True, chain=False)
    return True


_HELD: list[int] = []  # the alive file's and the end file's descriptors: closing the first would drop the lock
_END: list[str] = []  # the end file's path and header, once installed


def write_end(tb) -> None:
    """The stack of a failing exception (`tb`, its traceback) as the main thread's dump in
    the end file: a rank whose collective timed out has unwound to the bootstrap by now."""
    if not _END or tb is None:
        return
    path, header = _END
    frames = []
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append(f'  File "{code.co_filename}", line {tb.tb_lineno} in {code.co_name}\n')
        tb = tb.tb_next
    main = threading.main_thread().ident
    _write(path, (header + f"Current thread 0x{main:016x} (most recent call first):\n"
                  + "".join(reversed(frames))).encode())


def hold_alive(path: str, line: str) -> None:
    """Lock `path` for as long as this process lives (POSIX locks end with the process) and
    say in it where that process is."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)  # a reader holds it for microseconds at most
        os.ftruncate(fd, 0)
        os.write(fd, line.encode())
    except OSError:
        os.close(fd)
        raise
    _HELD.append(fd)


def _copy(read: int, path: str, header: str, native_file: tuple) -> None:
    """Each dump that comes down the pipe, into `path` (replaced whole); then the native
    frames are asked for (`native_file`: their path, header and the environment)."""
    dump = b""
    while True:
        ready = select.select([read], [], [], BURST_S if dump else None)[0]
        if not ready:
            dump = b""  # the dump is complete and written; the next starts afresh
            continue
        chunk = os.read(read, PIPE_BYTES)
        if not chunk:
            return
        dump += chunk
        while select.select([read], [], [], QUIET_S)[0]:
            more = os.read(read, PIPE_BYTES)
            if not more:
                break
            dump += more
        _write(path, header.encode() + dump)
        native_path, native_header, environ = native_file
        if os.path.exists(os.path.join(os.path.dirname(path), protocol.NATIVE_WANTED)):
            native.request(native_path, native_header, _write, environ)


def _write(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass  # a full disk: this request goes unanswered, the rank runs on
