"""A rank's native frames on request: py-spy's dump of its own process, after its Python stacks.

faulthandler (bootstrap.stacks) sees Python frames only: a rank blocked in a collective
reads `all_reduce`, not the gloo or NCCL call it waits in. Where py-spy is installed (beside
the rank's python, on its PATH, or named by SLURMTORCH_PY_SPY), each stacks request also
runs `py-spy dump --native --json --pid <this process>` on a thread of its own, started at
the first request, and writes what it said (or why it could not) to `stacks/rank-R.native.txt`
(rankfiles.native_header). Nothing of this runs, or is even looked up, until a request
comes: the rank's normal path is the same with and without py-spy. The Python stacks are
written first and never wait for it: py-spy pauses the process while it reads it, and
loading libtorch's symbols takes seconds.

py-spy reads this process through ptrace, which needs no debugger but may be refused: Yama's
mode 1 lets only a process's ancestors trace it, and py-spy is this rank's child, so the
rank names it its tracer for the length of the dump (PR_SET_PTRACER: "the ptracer process
can ptrace(2) the calling process as if it were a direct process ancestor",
https://man7.org/linux/man-pages/man2/pr_set_ptracer.2const.html); py-spy waits on a shell's
`read` until that is done. Modes 2 and 3, a container without CAP_SYS_PTRACE where it is
needed, or a non-dumpable process refuse it: the file then says why, and the reader says it
once and shows the Python stacks alone.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping

from slurmtorch import protocol
from slurmtorch import rankfiles

TIMEOUT_S = 60.0  # py-spy reading libtorch's symbols on a loaded node takes seconds; a hung one is ended
YAMA = "/proc/sys/kernel/yama/ptrace_scope"
PR_SET_PTRACER = 0x59616D61  # <linux/prctl.h>
# The shell waits for one line on stdin (the rank's "go", once py-spy may trace it), then
# becomes py-spy: the pid the rank named as its tracer is py-spy's.
GATE = 'read -r _ && exec "$0" "$@"'

_WANTED = threading.Event()
_JOB: list = []  # (path, header, write, environ) of the latest request


def request(path: str, header: str, write: Callable[[str, bytes], None], environ: Mapping[str, str]) -> None:
    """Take this process's native frames into `path` soon (`write`: replace it whole), on
    the native thread; a request while one runs is taken once that one ends."""
    first = not _JOB
    _JOB[:] = [path, header, write, environ]
    if first:
        threading.Thread(target=_serve, name="slurmtorch-native", daemon=True).start()
    _WANTED.set()


def _serve() -> None:
    while True:
        _WANTED.wait()
        _WANTED.clear()
        path, header, write, environ = _JOB
        write(path, (header + dump(os.getpid(), environ)).encode())


def find(environ: Mapping[str, str]) -> tuple[str | None, str]:
    """(py-spy's path, '') or (None, why there is none)."""
    given = environ.get(protocol.PY_SPY, "")
    if given == "0":
        return None, f"turned off ({protocol.PY_SPY}=0)"
    if given:
        return (given, "") if os.access(given, os.X_OK) else (None, f"{protocol.PY_SPY}={given} is no executable")
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(beside, os.X_OK):
        return beside, ""
    import shutil  # lazy: a request's, not every rank's start

    found = shutil.which("py-spy", path=environ.get("PATH"))
    return (found, "") if found else (None, "py-spy is not installed where the ranks run (pip install py-spy)")


def dump(pid: int, environ: Mapping[str, str]) -> str:
    """py-spy's JSON dump of `pid` with native frames, or `unavailable: WHY` (protocol)."""
    exe, why = find(environ)
    if exe is None:
        return f"{rankfiles.UNAVAILABLE}{why}\n"
    import subprocess  # lazy: only a stacks request runs py-spy

    argv = ["/bin/sh", "-c", GATE, exe, "dump", "--native", "--json", "--pid", str(pid)]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        return f"{rankfiles.UNAVAILABLE}cannot start py-spy: {exc.strerror or exc}\n"
    allowed = allow_tracer(proc.pid)
    try:
        out, err = proc.communicate(b"\n", timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return f"{rankfiles.UNAVAILABLE}py-spy took longer than {TIMEOUT_S:.0f} s\n"
    finally:
        if allowed:
            allow_tracer(0)  # py-spy has ended: its pid may be another process's next
    if proc.returncode == 0 and out.strip().startswith(b"["):
        return out.decode("utf-8", "replace")
    return f"{rankfiles.UNAVAILABLE}{refusal(err.decode('utf-8', 'replace'), proc.returncode, ptrace_scope())}\n"


def refusal(stderr: str, code: int, scope: int | None) -> str:
    """Why py-spy gave no dump, in one line (pure): its own first line, and Yama's mode
    where that is what refused it."""
    said = next((line.strip() for line in stderr.splitlines() if line.strip()), f"exit {code}")[:200]
    denied = "permission" in stderr.lower() or "not permitted" in stderr.lower()
    if denied and scope is not None and scope >= 2:
        return f"ptrace is not permitted here (kernel.yama.ptrace_scope={scope}): {said}"
    if denied:
        return f"ptrace is not permitted here: {said}"
    return f"py-spy failed: {said}"


def ptrace_scope() -> int | None:
    try:
        with open(YAMA, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def allow_tracer(pid: int) -> bool:
    """Under Yama, let `pid` (0: no one) trace this process as its parent could; False
    where there is no Yama (nothing to allow)."""
    if ptrace_scope() is None:
        return False
    import ctypes  # lazy: under Yama, on a request

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_PTRACER, pid, 0, 0, 0) == 0
