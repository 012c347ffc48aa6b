"""The launcher's guard: a process between slurmtorch and `bash mpirun.sh` that ends the
whole launch with its caller.

    python -I -S guard.py PARENT_PID EXIT_CODE_FILE|- -- ARGV...

Run by path with `-I -S` (stdlib only, no site-packages, not even this folder on sys.path):
it must start in milliseconds and import nothing of ours. Why a process of its own:
bash runs mpirun as its child and, on SIGTERM, dies alone, leaving prterun and its ranks
running; prctl's parent-death signal is cleared by fork, so only our direct child can
carry it. The guard carries it (a SIGKILLed caller still takes the launch along), and on
SIGTERM/SIGHUP/SIGINT signals every process below it (prterun then ends its ranks, each
in a process group of its own), SIGKILLs what is left after GRACE_S, and exits 128+signal.
It stays in its caller's process group, so a terminal's Ctrl-C, Ctrl-Z and stdin reach
prterun exactly as before (prterun in a background group stops on SIGTTIN at its first
read of the terminal).

Once the launch has ended, whatever it left running is ended too (SIGTERM, then SIGKILL
after LEFTOVER_GRACE_S), as a Slurm step's end ends every process its tasks started: a
rank's background child, a double-forked daemon or a setsid child escapes a process
group, but not a subreaper, whose child it becomes when its parent ends.
"""

import ctypes
import os
import signal
import sys
import time

GRACE_S = 10.0
INT_SETTLE_S = 3.0  # a SIGINT's launch ends by itself within this, or is sent it (see stop)
LEFTOVER_GRACE_S = 1.0  # what the launch left gets SIGTERM, then SIGKILL after this
KILL_WAIT_S = 5.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


class Stop(Exception):
    """A stop signal arrived: raised from the handler to leave the blocking waitpid."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


STOPPING: list[int] = []


def on_stop(signum, frame):
    """The first stop signal raises; later ones (a terminal's Ctrl-C reaches us and our
    caller, who forwards it too) must not cut the stop short."""
    if not STOPPING:
        STOPPING.append(signum)
        raise Stop(signum)


def prctl(option: int, value: int) -> bool:
    """Linux only; False elsewhere (the guard then still forwards signals it is sent)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> list[int]:
    """Every live process below `root`, from /proc (as subreaper the guard inherits orphans,
    so a prterun whose bash died is still found here). Zombies are left out: they have
    ended, and have no children."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and fields[0] not in (b"Z", b"X"):
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found


def signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def reap() -> None:
    """Collect every ended child (orphans below us become our children)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def all_gone(deadline: float) -> bool:
    """Whether nothing runs below us any more, polled until `deadline`."""
    while True:
        reap()
        if not descendants(os.getpid()):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def stop(signum: int) -> None:
    """Pass `signum` to everything below us, then SIGKILL what outlives the grace. bash may
    end first while prterun still ends its ranks: we wait for the whole tree, not bash.

    A terminal's Ctrl-C reaches the whole foreground group, prterun too, which ends its
    ranks itself; a second SIGINT from us only made it print `Abort is in progress...` and
    woke the ranks into a report each. So a SIGINT gives the launch INT_SETTLE_S to end by
    itself first, and is passed on only if it has not (it came to us alone: `kill -INT`)."""
    if signum == signal.SIGINT and all_gone(time.monotonic() + INT_SETTLE_S):
        return
    signal_all(descendants(os.getpid()), signum)
    if not all_gone(time.monotonic() + GRACE_S):
        signal_all(descendants(os.getpid()), signal.SIGKILL)
        all_gone(time.monotonic() + KILL_WAIT_S)


def end_leftovers() -> None:
    """The launch has ended: end what it left below us (see the module docstring)."""
    left = descendants(os.getpid())
    if left:
        signal_all(left, signal.SIGTERM)
        if not all_gone(time.monotonic() + LEFTOVER_GRACE_S):
            signal_all(descendants(os.getpid()), signal.SIGKILL)
            all_gone(time.monotonic() + KILL_WAIT_S)


def write_exit_code(path: str, code: int) -> None:
    if path == "-":
        return
    with open(path + ".tmp", "w") as f:
        f.write(f"{code}\n")
    os.replace(path + ".tmp", path)


def exit_code(status: int) -> int:
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def main(argv: list[str]) -> int:
    parent, code_file, _, *command = argv
    # A signal the caller ignores (nohup's SIGHUP) stays ignored, for us and the job.
    handled = [s for s in STOP_SIGNALS if signal.getsignal(s) != signal.SIG_IGN]
    for signum in handled:
        signal.signal(signum, on_stop)
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        if os.getppid() != int(parent):  # the caller died before prctl: nothing to start
            raise Stop(signal.SIGTERM)
        # Python ignores SIGPIPE and SIGXFSZ; the job gets them back as subprocess does.
        child = os.posix_spawnp(command[0], command, os.environ, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        code = exit_code(os.waitpid(child, 0)[1])
        end_leftovers()
    except Stop as s:
        stop(s.signum)
        code = 128 + s.signum
    write_exit_code(code_file, code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
