"""This job's Ray processes on one node: found by the session `ray start` ran in (Ray calls
setpgrp, never setsid, so every process it starts stays in it) or by a command line naming the
job's Ray folder (Ray's workers rename themselves), and ended TERM then KILL with the folder
removed: only this job's Ray, where `ray stop` would end every Ray of the user's on the node."""

from __future__ import annotations

import os
import shutil
import signal
import time

# TERM, then KILL, as `ray stop --force` ends them: a raylet and a GCS given TERM alone were
# still there 6 s later (Ray 2.60, a loaded 2-core machine); the job is over, nothing to drain.
GRACE_S = 1.0
SESSION_FILE = "slurmtorch-session"  # in the job's Ray folder: the session and raynode's own pid


def session_processes(sid: int | None, temp: str) -> dict[int, str]:
    """This user's processes (pid -> name) in session `sid`, or whose command line names `temp`."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != os.getuid():
                continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
            if rest[0] == "Z":
                continue  # ended, not yet reaped: not alive, and nothing to end
            if sid is not None and int(rest[3]) == sid:
                found[int(entry)] = name
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if temp.encode() in f.read():
                    found[int(entry)] = name
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return found


def end_processes(sid: int | None, temp: str) -> None:
    """TERM to this job's Ray processes here, KILL to those left after GRACE_S; its folder removed."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 2.0)):
        pids = session_processes(sid, temp)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            time.sleep(0.1)
            pids = session_processes(sid, temp)
        if not pids:
            break
    shutil.rmtree(temp, ignore_errors=True)


def recorded(temp: str) -> tuple[int | None, int | None]:
    """(the session `run_node` started Ray in here, `run_node`'s own pid), as its folder says."""
    try:
        with open(os.path.join(temp, SESSION_FILE)) as f:
            sid, watcher = f.read().split()
        return int(sid), int(watcher)
    except (OSError, ValueError):
        return None, None
