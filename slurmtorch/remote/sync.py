"""Sending the code to a cluster: the snapshot's own file list, mirrored there with rsync.

The files are those a local snapshot takes (`usecases.codesync.listing`: git's tracked and
untracked-not-ignored files, a repository inside the tree's by its own rules and the
tree's, else the folder; the same limits). They go to one mirror
per laptop tree on the cluster (`<workdir>/sync/<name>-<key>`, private: 0700 folders,
no group or other bits), with rsync over the cluster's shared connection: a second
submission after an edit sends only what changed (rsync --checksum: by content). The
record sent with the request lists each file's SHA-256, taken here; the cluster's
`sbatch` copies exactly those files from the mirror into the job's own `code/` and checks
each hash on the way, so the job runs what was sent, whatever the mirror holds later.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import socket
import sys
from dataclasses import dataclass

from slurmtorch import __version__
from slurmtorch.errors import ClusterError
from slurmtorch.remote import request, ssh
from slurmtorch.submit.jobfolder.snapshot import Snapshot
from slurmtorch.usecases import codesync

DEFAULT_WORKDIR = "~/.slurmtorch"  # the cluster side's own default SLURMTORCH_HOME
_SENT = re.compile(rb"Number of regular files transferred: ([0-9,]+)")


@dataclass(frozen=True)
class Sent:
    record: dict  # the sync record (codecopy.describe's, with the mirror's place)
    mirror: str  # on the cluster: `~/...` or absolute
    files: int  # how many the tree holds
    transferred: int  # how many rsync sent
    notes: list[str]  # what the listing says of the tree (codecopy.nested_lines; a folder's Python code only)


def mirror_for(workdir: str | None, root: str, host: str) -> str:
    """The cluster folder that mirrors the laptop tree `root` of `host` (pure)."""
    key = hashlib.sha256(f"{host}:{root}".encode("utf-8", "surrogateescape")).hexdigest()[:12]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(root.rstrip("/")) or "root")[:40]
    return f"{(workdir or DEFAULT_WORKDIR).rstrip('/')}/sync/{name}-{key}"


def rsync_dest(mirror: str) -> str:
    """rsync's remote path: `~/x` as x (rsync starts in the home), the rest as it is."""
    return mirror[2:] if mirror.startswith("~/") else mirror


def send(conn: ssh.Connection, snap: Snapshot, environ=os.environ) -> Sent:
    """List the tree's files as a snapshot would, hash them (`codesync.listing`), and rsync
    them to the mirror."""
    listed = codesync.listing(snap, environ)
    files = listed.files
    mirror = mirror_for(conn.cluster.workdir, snap.root, socket.gethostname())
    record = dict(listed.record)
    record.update(mirror=mirror, origin=f"{socket.gethostname()}:{snap.root}")
    # Check first, send after: a workdir another user made first would see every name and size.
    code, _ = ssh.call(conn, request.command(conn.cluster, __version__, [request.MIRROR, posixpath.basename(mirror)]),
                       request.header(None))
    if code != 0:
        raise Declined(code)
    proc = ssh.rsync(conn, snap.root, files, rsync_dest(mirror),
                     mkdir=f"umask 077 && mkdir -p {request.path_word(mirror)}")
    if proc.returncode != 0:
        raise ClusterError(f"sending the code to cluster {conn.cluster.name} failed (rsync exit {proc.returncode}): "
                           f"{rsync_said(proc.stderr)}",
                           tip="rsync must be installed on both sides; check the workdir in the clusters file")
    found = _SENT.search(proc.stdout)
    sent = int(found.group(1).replace(b",", b"")) if found else len(files)
    return Sent(record, mirror, len(files), sent, listed.notes)


class Declined(Exception):
    """The cluster side refused the mirror (its error line and tip are on stderr already): exit `code`."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def rsync_said(stderr: bytes) -> str:
    """Why rsync failed, in one line: its own reasons (`rsync: [receiver] ...`), not only the
    last line, which is mostly `rsync error: ... (see previous errors)` (pure)."""
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    reasons = [line for line in lines if not line.startswith("rsync error:")] or lines
    more = f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else ""
    return "; ".join(reasons[:3]) + more if reasons else "no message"


def announce(sent: Sent, cluster: str) -> None:
    for line in sent.notes:
        print(line, file=sys.stderr)
    print(f"slurmtorch: code synced to {cluster}:{sent.mirror} ({sent.files} files, {sent.transferred} sent)",
          file=sys.stderr, flush=True)
