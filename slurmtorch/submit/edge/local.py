"""bash here, under guard.py: a local `slurmtorch mpirun` run, a Distributor's local run,
and `slurmtorch run` in an allocation's shell. Each runs in our process group (Ctrl-C and
stdin reach it) or a session of its own, and the guard ends what it started when we die.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from slurmtorch.errors import SubmitError
from slurmtorch.submit.interrupts import Forwarding, Interrupted, on_lasting_thread
from slurmtorch.submit.jobfolder import jobdir

GUARD = Path(__file__).resolve().parent.parent.parent / "guard.py"  # run by path (-I -S): see guard.py
GUARD_BOUND_S = 20.0  # guard.py's INT_SETTLE_S + GRACE_S + KILL_WAIT_S, and some


def run_local(script: str, path: Path | None = None, env: dict[str, str] | None = None) -> int:
    """Run a rendered mpirun script here, output straight to the terminal.

    The script goes to bash as a file, not as `bash -c TEXT`: one argument is limited
    to 128 KiB (E2BIG), and bash reading it from stdin would share stdin with mpirun.
    `path` keeps it (e.g. in a Distributor's folder); else a temporary file is used. `env`:
    the run's environment (default: ours).
    """
    if path is not None:
        return _run_bash(script, path, env)
    with tempfile.TemporaryDirectory(prefix="slurmtorch-mpirun-") as folder:
        return _run_bash(script, Path(folder) / "mpirun.sh", env)


def run_in_folder(script: Path, exit_code_file: Path, env: dict[str, str]) -> int:
    """Run a local run's script (written in its folder, `localrun`) here, output straight to
    the terminal, with `env`; its exit code is left in `exit_code_file`."""
    return _run_guarded(["bash", str(script)], exit_code_file, env)


def _run_bash(script: str, path: Path, env: dict[str, str] | None = None) -> int:
    try:
        jobdir.write_new(path, script)
    except OSError as exc:
        raise SubmitError(f"cannot write the mpirun script {path}: {exc.strerror or exc}",
                          tip="check that its folder (or TMPDIR) is writable") from None
    return _run_guarded(["bash", str(path)], env=env)


def run_in_allocation(script: str, folder: Path) -> int:
    """Run a launch script from `slurmtorch alloc`'s shell (its script.sh in `folder`), output
    to the terminal; under the guard, as a local mpirun run: Ctrl-C (or our end) ends the run's
    srun and its ranks, never the allocation, which the shell's salloc holds."""
    return _run_guarded(["bash", str(folder / jobdir.SCRIPT)],
                        what="stopped this run's srun and its ranks; the allocation stays")


def guarded(argv: Sequence[str], exit_code_file: Path | None = None) -> list[str]:
    """`argv` under guard.py, which ends it with everything it started when this process
    dies or sends it TERM/HUP/INT, and writes its exit code to `exit_code_file`."""
    return [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), str(exit_code_file or "-"), "--", *argv]


def _run_guarded(argv: Sequence[str], exit_code_file: Path | None = None, env: dict[str, str] | None = None,
                 what: str = "stopped mpirun and its ranks") -> int:
    """Run in our process group (a terminal's Ctrl-C and stdin reach mpirun as before); a
    TERM/HUP/INT sent to us alone goes to the guard, and we wait for it a bounded time.
    The CLI's main thread forks the guard (see start_guarded on why that matters)."""
    with Forwarding(what) as forwarding:
        proc = subprocess.Popen(guarded(argv, exit_code_file), env=env)
        try:
            forwarding.attach(proc.pid)
            return proc.wait()
        except Interrupted:
            try:
                proc.wait(timeout=GUARD_BOUND_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise


def start_guarded(argv: Sequence[str], log: Path, exit_code_file: Path, env: dict[str, str] | None = None
                  ) -> subprocess.Popen:
    """Start `argv` under guard.py in a session of its own, output to `log`, stdin empty:
    a Distributor's local run. The guard ends it when this process dies (its parent-death
    signal), with no signal handler of ours left in the user's process.

    The parent-death signal fires when the *thread* that forked the guard exits, not the
    process: the fork happens on the main thread or on one lasting thread, which lives as
    long as the process, never on a caller's short-lived thread.
    """
    def start() -> subprocess.Popen:
        with open(log, "wb") as out:
            return subprocess.Popen(guarded(argv, exit_code_file), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True, env=env)

    return start() if threading.current_thread() is threading.main_thread() else on_lasting_thread(start)
