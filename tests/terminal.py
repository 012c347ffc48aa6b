"""A program on a pseudo-terminal, read as it writes: an interactive allocation's shell, here
or over `ssh -t` (tests/cli/test_alloc_testbed.py, tests/remote/test_remote_testbed.py)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import termios
import time

import pytest

PROMPT = r"\(alloc \d+\) [^\n]*[#$] "


class Terminal:
    """A program on a pseudo-terminal, read as it writes."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the terminal is its controlling one, as in a user's session
            try:
                os.chdir(cwd)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        # 50 rows, 250 columns: no line of ours wraps or scrolls sideways in readline.
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 250, 0, 0))
        self.seen = ""  # what came after the last match
        self.before = ""  # what came before it, since the match before

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def command(self, line: str) -> None:
        """Type `line` at the shell's next prompt (typed earlier, bash may not take it as a line)."""
        self.expect(PROMPT, 60)
        self.send(line + "\n")

    def expect(self, regex: str, timeout: float) -> re.Match:
        """The first match of `regex` in what came after the previous match."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(regex, self.seen)
            if found:
                self.before, self.seen = self.seen[:found.start()], self.seen[found.end():]
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                running = "\n".join(processes_mentioning("srun", "slurmtorch", "bash", "slurmstepd"))
                pytest.fail(f"no {regex!r} within {timeout} s; the terminal showed:\n{self.seen}\n"
                            f"processes:\n{running}", pytrace=False)
            ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # EIO: the program ended and closed the terminal
                    chunk = b""
                if not chunk:
                    pytest.fail(f"the terminal closed before {regex!r}:\n{self.seen}", pytrace=False)
                self.seen += chunk.decode(errors="replace").replace("\r\n", "\n")

    def exit_code(self, timeout: float, give_up: bool = True) -> int | None:
        """The program's exit code once it ends within `timeout` s; else a failed test, or
        None if not `give_up`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:  # keep reading (into `seen`), so that nothing blocks on a full terminal
                if select.select([self.fd], [], [], 0.2)[0]:
                    self.seen += os.read(self.fd, 65536).decode(errors="replace").replace("\r\n", "\n")
            except OSError:
                pass
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        if not give_up:
            return None
        os.kill(self.pid, signal.SIGKILL)
        pytest.fail(f"slurmtorch alloc did not end; the terminal showed:\n{self.before}{self.seen}", pytrace=False)

    def close(self) -> None:
        """After a failure: hang up, as a closed terminal does (salloc then gives the
        allocation back), so that the next test finds the testbed empty."""
        try:
            os.kill(self.pid, signal.SIGHUP)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                return
            time.sleep(0.2)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def processes_mentioning(*words: str) -> list[str]:
    """Command lines of the processes (ours, the nodes' slurmstepd and ranks) naming any of `words`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if int(pid) != os.getpid() and any(w in cmd for w in words):
            found.append(f"{pid}: {cmd}")
    return found
