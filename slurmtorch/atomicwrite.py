"""A file written whole or not at all: what both sides need (a rank's answer, the laptop's state).

The data goes to a temporary sibling (named for this host and process, so two writers of one
name never share it), is fsynced and renamed over the name: a reader sees the old file or the
new one, never half of one (on NFS, close-then-rename is also what makes the content visible
to another host).
"""

from __future__ import annotations

import os
import socket


def write_atomic(path: str, data: bytes) -> None:
    """Write `data` to a temporary sibling (0600), fsync it, rename it over `path`."""
    tmp = f"{path}.tmp-{socket.gethostname()}-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
