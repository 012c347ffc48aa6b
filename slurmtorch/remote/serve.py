"""The cluster side of `--cluster NAME`: run the verb the laptop sent, in this process, as if typed here.

`request.BOOT` has checked the version and calls `main`. The header line's sync record (the
code the laptop sent: commit, dirtiness, every file's hash) goes into a private file named by
`SLURMTORCH_SYNCED`, which `sbatch` copies its snapshot by. Then a thread relays the laptop's
signals from stdin: INT, TERM and HUP are raised in this process, and the end of stdin (the
laptop or its connection gone) is a hangup, as a closed terminal would be. So `--wait`,
`logs --follow`, Ctrl-C and the exit codes are the cluster's own: what the laptop shows is
what a shell on the login host would have shown.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading

from slurmtorch import protocol
from slurmtorch.remote import request


def main(argv: list[str]) -> None:
    tty = bool(argv) and argv[0] == "--tty"
    args = argv[argv.index("--") + 1:] if "--" in argv else []
    os.environ[protocol.ON_CLUSTER] = "1"
    record_file, call = None, None
    if not tty:
        sync, call = request.read_header(sys.stdin.readline())
        if sync is not None:
            record_file = _write_record(sync)
            os.environ[protocol.SYNCED] = record_file
        threading.Thread(target=_relay, name="slurmtorch-signals", daemon=True).start()
    if call is not None and args == ["--distribute"]:
        from slurmtorch.remote import distribute

        sys.exit(distribute.answer(call))
    from slurmtorch.cli.main import main as cli

    try:
        cli(args)
    finally:
        if record_file:
            os.unlink(record_file)


def _write_record(sync: dict) -> str:
    """The sync record as a private file (0600), its mirror's `~` made this home."""
    mirror = str(sync.get("mirror", ""))
    if mirror == "~" or mirror.startswith("~/"):
        sync = {**sync, "mirror": os.path.expanduser(mirror)}
    fd, path = tempfile.mkstemp(prefix="slurmtorch-sync-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
        json.dump(sync, f)
    return path


def _relay() -> None:
    for line in sys.stdin:
        signum = request.read_signal(line)
        if signum is not None:
            os.kill(os.getpid(), signum)
    os.kill(os.getpid(), signal.SIGHUP)
