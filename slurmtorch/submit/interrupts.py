"""SIGTERM, SIGHUP and SIGINT sent to slurmtorch itself: what the edge does with them.

Python's default for SIGTERM and SIGHUP is to die on the spot, which orphaned a local
mpirun (prterun and its ranks ran on) and, mid-submission, left a held job with no id
printed and a `.submitting-*` folder behind. Two tools, both installed only for the
span of one operation and only from the main thread (Python runs handlers there; from
another thread they are left as the caller set them):

- `Forwarding`: while a launcher runs, a stop signal is passed on to it (the guard,
  guard.py, which ends the whole launch) and breaks our wait once, so the caller can
  wait a bounded time and report.
- `deferred`: while a submission is half done, a stop signal is only noted; the
  submission checks at safe points and raises `Interrupted`, so it can be undone.
- `stops_as_interrupts`: while a job is waited for, TERM and HUP stop the wait as Ctrl-C
  does (`StopSignal`, a KeyboardInterrupt), so the waiter says the job goes on rather
  than dying silently with 143.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from slurmtorch.errors import SlurmtorchError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class Interrupted(SlurmtorchError):
    """A stop signal ended an operation (after it was undone); exits 128+signal."""

    def __init__(self, signum: int, what: str):
        said = "interrupted (Ctrl-C)" if signum == signal.SIGINT else signal.Signals(signum).name
        super().__init__(f"{said}: {what}")
        self.signum = signum
        self.exit_code = 128 + signum


def _install(handler) -> dict[int, Any]:
    """Our handler for each stop signal not ignored (nohup's SIGHUP stays ignored); the old ones."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, handler) for s in STOP_SIGNALS if signal.getsignal(s) != signal.SIG_IGN}


def _restore(old: dict[int, Any]) -> None:
    for s, handler in old.items():
        signal.signal(s, handler)


class Forwarding:
    """While open, a stop signal to us goes to `pid` (once attached). The first one also
    raises `Interrupted` out of whatever waits (only after `attach`: raised while
    subprocess.Popen is starting the child, it would lose the child)."""

    def __init__(self, what: str):
        self.what = what
        self.signum: int | None = None
        self.pid: int | None = None
        self._old: dict[int, object] = {}

    def __enter__(self) -> Forwarding:
        self._old = _install(self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        _restore(self._old)

    def attach(self, pid: int) -> None:
        self.pid = pid
        if self.signum is not None:  # it came while the child was starting
            self._forward(self.signum)
            raise Interrupted(self.signum, self.what)

    def _forward(self, signum: int) -> None:
        assert self.pid is not None  # called only once attached
        try:
            os.kill(self.pid, signum)
        except ProcessLookupError:
            pass

    def _on_signal(self, signum, frame) -> None:
        first = self.signum is None
        self.signum = self.signum or signum
        if self.pid is not None:
            self._forward(signum)
            if first:
                raise Interrupted(signum, self.what)


class StopSignal(KeyboardInterrupt):
    """TERM or HUP raised where Ctrl-C raises KeyboardInterrupt; carries the signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stop(signum, frame) -> None:
    raise StopSignal(signum)


@contextmanager
def stops_as_interrupts() -> Iterator[None]:
    """While open, TERM and HUP (unless ignored, as under nohup) raise `StopSignal` in the
    main thread, which a waiter's `except KeyboardInterrupt` answers as it answers Ctrl-C."""
    old: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        old = {s: signal.signal(s, _raise_stop) for s in (signal.SIGTERM, signal.SIGHUP)
               if signal.getsignal(s) != signal.SIG_IGN}
    try:
        yield
    finally:
        _restore(old)


class Pending:
    """The first stop signal that arrived during `deferred`, if any."""

    def __init__(self, what: str):
        self.what = what
        self.signum: int | None = None

    def note(self, signum, frame) -> None:
        self.signum = self.signum or signum

    def check(self) -> None:
        """A safe point: raise `Interrupted` if a stop signal has arrived."""
        if self.signum is not None:
            raise Interrupted(self.signum, self.what)


@contextmanager
def deferred(what: str) -> Iterator[Pending]:
    """Stop signals wait for `Pending.check`. One that came after the last check (the work
    is complete) is sent again once our handlers are gone: the caller then stops as it
    would have, with the work done rather than half done."""
    pending = Pending(what)
    old = _install(pending.note)
    try:
        yield pending
    except BaseException:
        _restore(old)
        raise
    _restore(old)
    if pending.signum is not None:
        os.kill(os.getpid(), pending.signum)


_LASTING: list[queue.SimpleQueue] = []
_LASTING_LOCK = threading.Lock()


def on_lasting_thread(fn: Callable):
    """fn() run on a daemon thread that never returns, so never exits before the process:
    a child's parent-death signal fires when the thread that forked it exits."""
    with _LASTING_LOCK:
        if not _LASTING:
            _LASTING.append(queue.SimpleQueue())
            threading.Thread(target=_serve, args=(_LASTING[0],), name="slurmtorch-launcher", daemon=True).start()
    answer: queue.SimpleQueue = queue.SimpleQueue()
    _LASTING[0].put((fn, answer))
    ok, value = answer.get()
    if not ok:
        raise value
    return value


def _serve(todo: queue.SimpleQueue) -> None:
    while True:
        fn, answer = todo.get()
        try:
            answer.put((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            answer.put((False, exc))
