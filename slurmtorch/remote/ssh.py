"""The laptop's edge to a cluster: the system's OpenSSH client, one shared connection per cluster.

The first command to a cluster opens a master connection (ControlMaster) in the foreground,
so a password, a key's passphrase or an MFA code is asked once, on the terminal, as plain
`ssh` asks it; every later command, and rsync, rides on it while it lives (ControlPersist:
ten idle minutes). Those are the only options of ours: the user's ssh config (aliases,
ProxyJump, keys) and its host-key checking apply unchanged. ssh's own failures become one
line with the fix (`failure`). A streamed command runs in a session of its own, so Ctrl-C
reaches us, not ssh: we send its name down the command's stdin and the cluster side
(`serve`) raises it there, so the verb behaves as it does on the cluster itself.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmtorch.errors import ClusterError, SlurmtorchError, typed
from slurmtorch.remote import request
from slurmtorch.remote.clusters import Cluster
from slurmtorch.submit.jobfolder import ownership

PERSIST = "10m"  # how long an idle master connection stays: ssh's ControlPersist
_SOCKET_NAME = "%C"  # ssh's hash of the connection (host, port, user): 40 characters
# A unix socket's path holds at most 103 bytes on macOS, 107 on Linux; the master binds
# "<folder>/<%C>.<16 random characters>" first and renames it (ssh's mux.c): the folder gets
# what is left after 1 + 40 + 17. Red on the testbed: a laptop home under /tmp/slurmtorch-testbed
# gave "path ... too long for Unix domain socket".
_FOLDER_MAX = 103 - (1 + 40 + 17)
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def socket_folder(environ=os.environ) -> Path:
    """Where the master connections' sockets are: $XDG_RUNTIME_DIR/slurmtorch-ssh, else
    ~/.cache/slurmtorch/ssh, else (a path too long for a socket) /tmp/slurmtorch-ssh-UID;
    private (0700), as ssh's own ~/.ssh/cm folders are."""
    candidates = []
    if environ.get("XDG_RUNTIME_DIR"):
        candidates.append(Path(environ["XDG_RUNTIME_DIR"]) / "slurmtorch-ssh")
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    candidates += [Path(base) / "slurmtorch" / "ssh", Path(tempfile.gettempdir()) / f"slurmtorch-ssh-{os.getuid()}"]
    for folder in candidates:
        text = str(folder)
        if len(text.encode()) > _FOLDER_MAX or any(c.isspace() or c in '"%' for c in text):
            continue  # ssh's -o value cannot carry it, or the socket's path would be cut
        try:
            ownership.secure_folder(folder, folder, label="slurmtorch's ssh sockets")
        except (OSError, SlurmtorchError):  # an unsafe level (someone else's folder): the next one
            continue
        return folder
    raise ClusterError("no private folder for ssh's connection sockets",
                       tip="set XDG_RUNTIME_DIR to a short private folder (e.g. /run/user/$UID)")


@dataclass(frozen=True)
class Connection:
    """How every ssh (and rsync) call reaches one cluster."""

    cluster: Cluster
    socket: str  # ControlPath

    def ssh(self, *extra: str) -> list[str]:
        """`ssh` over the master connection (or, should it be gone, one of its own)."""
        return ["ssh", "-o", f"ControlPath={self.socket}", "-o", "ControlMaster=no", *extra, self.cluster.host]

    def rsh(self) -> str:
        """rsync's -e: the same ssh, as one string (the socket path holds no space: socket_folder)."""
        return f"ssh -o ControlPath={self.socket} -o ControlMaster=no"


def connect(cluster: Cluster, environ=os.environ) -> Connection:
    """The cluster's master connection, opened now (in the foreground, for any prompt) unless
    one is up; ssh's failure to open it is one ClusterError line with the fix."""
    conn = Connection(cluster, str(socket_folder(environ) / _SOCKET_NAME))
    if _master_alive(conn):
        return conn
    # -f: into the background once authenticated; its stderr into a file, not a pipe we would
    # wait on for as long as the master lives.
    with tempfile.TemporaryFile() as said:
        proc = _run(["ssh", "-o", f"ControlPath={conn.socket}", "-o", "ControlMaster=yes",
                     "-o", f"ControlPersist={PERSIST}", "-f", "-N", cluster.host], stderr=said)
        said.seek(0)
        stderr = said.read().decode(errors="replace")
    if proc.returncode != 0:
        raise failure(cluster, stderr)
    return conn


def failure(cluster: Cluster, stderr: str) -> ClusterError:
    """ssh's own failure (exit 255) as one line naming the cause, and the fix (pure)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = lines[-1] if lines else "ssh exited 255"
    where = f"cluster {cluster.name} ({cluster.host}, {cluster.source})"
    by_hand = f"`ssh {cluster.host} true` shows ssh's own view"
    text = stderr.lower()
    if "host key verification failed" in text or "remote host identification has changed" in text:
        return ClusterError(f"{where}: its host key is unknown or has changed: {said}",
                            tip=f"run `ssh {cluster.host}` once by hand and check the key it shows before accepting "
                                "it; slurmtorch never turns host-key checking off")
    if "permission denied" in text or "too many authentication failures" in text:
        return ClusterError(f"{where} refused the login: {said}",
                            tip=f"check the key or user in ~/.ssh/config (ssh-copy-id installs a key); {by_hand}")
    if "could not resolve hostname" in text or "name or service not known" in text:
        return ClusterError(f"{where}: no such host: {said}",
                            tip=f"set host: in the clusters file to an alias of ~/.ssh/config or a reachable name; {by_hand}")
    if "connection refused" in text:
        return ClusterError(f"{where}: nothing answers ssh there (connection refused)",
                            tip=f"is sshd running, and is the port right (Port in ~/.ssh/config)? {by_hand}")
    if "timed out" in text or "no route to host" in text or "network is unreachable" in text:
        return ClusterError(f"{where} cannot be reached: {said}",
                            tip=f"check the network or VPN, or ProxyJump in ~/.ssh/config; {by_hand}")
    return ClusterError(f"{where}: ssh failed: {said}", tip=by_hand)


def stream(conn: Connection, command: str, header: str, *, tty: bool = False) -> int:
    """Run `command` on the cluster with its output on ours, and return its exit code.

    `header` is the first line of its stdin (serve's request); the rest of stdin carries
    our INT, TERM and HUP to it. With `tty`, ssh gets the terminal (`ssh -t`) and Ctrl-C goes
    through it as it does for any remote shell (an interactive allocation).
    """
    if tty:
        return _run([*conn.ssh("-t"), command], terminal=True).returncode
    return _exchange(conn, command, header, capture=False)[0]


def stream_first_line(conn: Connection, command: str, header: str, first_line: Callable[[bytes], None]) -> int:
    """`stream`, with `first_line` called (on a reader thread) with the command's first line
    as soon as it has come: a submission's job id, while a `--wait` goes on."""
    return _exchange(conn, command, header, capture=False, first_line=first_line)[0]


def call(conn: Connection, command: str, header: str) -> tuple[int, bytes]:
    """`stream`, with the command's stdout kept (its answer) and its stderr on ours."""
    return _exchange(conn, command, header, capture=True)


class ConnectionLost(ClusterError):
    """The connection to the cluster broke while a command ran there: what it started runs on."""

    exit_code = 255  # ssh's own for a lost connection (ssh(1), EXIT STATUS)


def lost(cluster: Cluster, first_line: bytes) -> ConnectionLost:
    """The line for a connection lost mid-command (pure); a submission's first line is its job id."""
    job = first_line.decode(errors="replace").strip()
    if job.isdigit():
        return ConnectionLost(f"lost the connection to cluster {cluster.name}; job {job} goes on there",
                              tip=f"{typed(f'logs {job} --follow', cluster.name)} follows it again")
    return ConnectionLost(f"lost the connection to cluster {cluster.name}; what the command started goes on there",
                          tip=f"{typed('status', cluster.name)} shows your jobs")


def _exchange(conn: Connection, command: str, header: str, capture: bool,
              first_line: Callable[[bytes], None] | None = None) -> tuple[int, bytes]:
    proc = subprocess.Popen([*conn.ssh(), command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            start_new_session=True)
    chunks: list[bytes] = []
    out = proc.stdout
    assert out is not None
    # The command's output is kept (capture) or passed on as it comes, its first line kept:
    # should the connection break, it names the job that goes on (`lost`).
    reader = threading.Thread(target=_collect if capture else _pass_on, args=(out, chunks, first_line),
                              daemon=True)
    reader.start()
    assert proc.stdin is not None
    stdin = proc.stdin  # for relay: a closure does not keep the narrowing
    sent: list[int] = []

    def relay(signum, frame) -> None:
        sent.append(signum)
        if sent.count(signum) > 1:  # the second of one kind: the cluster does not answer
            proc.kill()
            return
        try:
            stdin.write(request.signal_line(signum))
            stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    # A signal ignored here (nohup's HUP) stays ignored, as interrupts.Forwarding leaves it.
    old = {s: signal.signal(s, relay) for s in _SIGNALS if signal.getsignal(s) != signal.SIG_IGN}
    try:
        try:
            proc.stdin.write(header.encode() + b"\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        code = proc.wait()
        reader.join()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    if code < 0 and sent:  # killed after a second signal
        raise ClusterError(f"interrupted; what runs on cluster {conn.cluster.name} may go on",
                           tip=typed("status", conn.cluster.name))
    # 255 is ssh's failure, or the command's own exit 255: the master connection tells them apart.
    if code == 255 and not _master_alive(conn):
        raise lost(conn.cluster, b"".join(chunks).split(b"\n", 1)[0])
    return code, b"".join(chunks)


def _collect(out, chunks: list[bytes], first_line=None) -> None:
    chunks.append(out.read())


def _pass_on(out, chunks: list[bytes], first_line: Callable[[bytes], None] | None = None) -> None:
    """Copy the command's stdout to ours as it arrives; keep what came until its first newline
    (and hand that line to `first_line`, once)."""
    target = sys.stdout.buffer
    while data := out.read1(65536):
        if not chunks or b"\n" not in chunks[0]:
            chunks[:] = [b"".join(chunks) + data]
            if first_line is not None and b"\n" in chunks[0]:
                first_line(chunks[0].split(b"\n", 1)[0])
        target.write(data)
        target.flush()


def _master_alive(conn: Connection) -> bool:
    check = ["ssh", "-o", f"ControlPath={conn.socket}", "-O", "check", conn.cluster.host]
    return _run(check, capture=True).returncode == 0


def rsync(conn: Connection, root: str, files: Sequence[str], dest: str, mkdir: str) -> subprocess.CompletedProcess:
    """Send `files` (inside `root`) to `dest` on the cluster, only those whose content changed;
    `mkdir` is the shell text that makes `dest` privately first.

    --checksum: rsync's own quick check (size and modification time, in whole seconds) missed
    an edit of the same size made within the second of the last sync (red on the testbed: the
    mirror kept the old file, and the job's hash check would refuse it at every try). Hashing
    both sides costs far less than a round trip for a tree under the snapshot's limit."""
    argv = ["rsync", "-a", "--checksum", "--protect-args", "--from0", "--files-from=-", "--chmod=go-rwx", "--stats",
            "-e", conn.rsh(), f"--rsync-path={mkdir} && rsync", f"{root.rstrip('/')}/", f"{conn.cluster.host}:{dest}/"]
    data = b"".join(f.encode("utf-8", "surrogateescape") + b"\0" for f in files)
    try:
        return _run(argv, capture=True, input=data)
    except FileNotFoundError:
        raise ClusterError("rsync is not installed here; it sends the code to the cluster",
                           tip="install rsync (apt install rsync, brew install rsync)") from None


def rsync_back(conn: Connection, folder: str, paths: Sequence[str], stage: str, compare: str,
               skip: Sequence[str]) -> subprocess.CompletedProcess:
    """Bring `paths` of `folder` on the cluster (all of it: none) into the staging folder
    `stage`, only what differs from `compare` (the destination: --compare-dest), never `skip`
    (the code, relative to `folder`), never a `.git` folder, a link (no -l: rsync skips
    them), a device or a FIFO (no -D); no owner, group or dates of folders taken, folders
    0700 and files readable by their owner while staged (the plan sets the modes they get).

    rsync runs in a session of its own, and an exception here (Ctrl-C, TERM as StopSignal)
    kills its whole group, its forked receiver too: nothing writes into `stage` after."""
    sources = [f"{folder.rstrip('/')}/./{p}" for p in paths] if paths else [f"{folder.rstrip('/')}/./"]
    remote = [f"{conn.cluster.host}:{sources[0]}", *(f":{s}" for s in sources[1:])]
    argv = ["rsync", "-rtp", "--chmod=D700,Fu+rw", "--relative", "--protect-args", "--from0",
            "--exclude=.git", "--exclude-from=-", f"--compare-dest={os.path.abspath(compare)}",
            "-e", conn.rsh(), *remote, f"{stage.rstrip('/')}/"]
    # Anchored at the transfer's root (the working folder, after `/./`); rsync's wildcards escaped.
    data = b"".join(b"/" + re.sub(r"([*?\[\\])", r"\\\1", p).encode("utf-8", "surrogateescape") + b"\0"
                    for p in skip)
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except FileNotFoundError:
        raise ClusterError("rsync is not installed here; it brings the files back from the cluster",
                           tip="install rsync (apt install rsync, brew install rsync)") from None
    try:
        out, err = proc.communicate(data)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _run(argv: Sequence[str], *, capture: bool = False, input: bytes | None = None, stderr=None,
         terminal: bool = False) -> subprocess.CompletedProcess:
    """ssh or rsync, to its end; stdin is `input`, the terminal (`terminal`) or nothing."""
    stdin = None if terminal or input is not None else subprocess.DEVNULL
    out = subprocess.PIPE if capture else None
    try:
        return subprocess.run(list(argv), input=input, stdin=stdin, stdout=out, stderr=out if capture else stderr,
                              check=False)
    except FileNotFoundError:
        if argv[0] != "ssh":
            raise
        raise ClusterError("ssh is not installed here; slurmtorch reaches clusters with OpenSSH's client",
                           tip="install it (apt install openssh-client)") from None
