"""A verb given `--cluster NAME`, handed to the cluster's slurmtorch over SSH (the laptop side).

The verb's words go as typed (`--cluster NAME` among them: the cluster side knows it is the
cluster side and ignores it), so every option means there what it means on the login host.
What only the laptop knows is added: the cluster's site (`--site`, unless given) and, for a
submission, the code: the script's tree is synced first (`sync`), the command runs in the
mirror's copy of the working folder, and SCRIPT is named as it is found from there.
"""

from __future__ import annotations

import os
import posixpath
import sys
from collections.abc import Sequence

from slurmtorch import __version__, protocol
from slurmtorch.remote import request


def elsewhere(cluster: str | None) -> bool:
    """Whether this command goes to a cluster: `--cluster` (or SLURMTORCH_CLUSTER) given, and
    this process is not already that cluster's side of it."""
    return bool(cluster) and not os.environ.get(protocol.ON_CLUSTER)


def verb(name: str, argv: Sequence[str], *, site: bool = False, tty: bool = False) -> int:
    """`slurmtorch ARGV` on cluster `name`, run in its home; its output and exit code are ours."""
    # lazy: the cluster side imports this module only to ask `elsewhere`; the clusters file's
    # reader (PyYAML, the site model) and ssh's edge cost it ~40 ms of every forwarded verb
    from slurmtorch.remote import clusters, ssh

    cluster = clusters.find(name)
    conn = ssh.connect(cluster)
    args = with_site(argv, cluster.site) if site else list(argv)
    return ssh.stream(conn, request.command(cluster, __version__, args, tty=tty), request.header(None), tty=tty)


def submit(name: str, argv: Sequence[str], program: Sequence[str], module: str | None,
           snapshot_flag: bool | None, *, tty: bool = False) -> int:
    """A submission (`sbatch`, or `alloc`'s shell with `tty`) on cluster `name`: the script's tree
    synced, the words as typed with SCRIPT as the mirror names it, run from the mirror's copy
    of this folder."""
    from slurmtorch.remote import clusters, ssh, sync  # lazy: as in `verb`
    from slurmtorch.submit.jobfolder import snapshot
    from slurmtorch.usecases import codesync

    cluster = clusters.find(name)
    script = os.path.abspath(program[0]) if module is None and program else None
    tree = codesync.tree(script, module, shell=tty)
    if tree is None:  # -m MODULE outside any tree of the user's: nothing to send
        return verb(name, argv, site=True, tty=tty)
    conn = ssh.connect(cluster)
    try:
        sent = sync.send(conn, tree)
    except sync.Declined as no:  # the cluster side said why, on stderr, as its sbatch would
        return no.code
    sync.announce(sent, cluster.name)
    cwd = posixpath.join(sent.mirror, tree.cwd) if tree.cwd else sent.mirror
    args = with_site(argv, cluster.site, len(program))
    where = codesync.script_there(tree)
    if where is not None:
        args[len(args) - len(program)] = where
    if not snapshot.wanted(snapshot_flag, os.environ) and snapshot_flag is None:
        args.insert(1, "--no-snapshot")  # this laptop's SLURMTORCH_SNAPSHOT=off goes along
    command = request.command(cluster, __version__, args, cwd=cwd, tty=tty)
    if tty:
        return ssh.stream(conn, command, request.header(sent.record), tty=tty)
    # The laptop folder whose mirror the job runs in (this one, or the tree's top when this
    # one is outside the tree: the job runs in the mirror's top then).
    here = os.path.join(tree.root, tree.cwd) if tree.cwd else tree.root

    def remember(line: bytes) -> None:
        job = line.decode(errors="replace").strip()
        if job.isdigit():  # a submission's first line is its job id; a dry run's, the script's
            record(cluster, job, here, sent.mirror, tree.cwd or "")

    return ssh.stream_first_line(conn, command, request.header(sent.record), remember)


def record(cluster, job: str, laptop: str, mirror: str, cwd: str) -> None:
    """This laptop's record of the job (`submitted`): `pull` reads it, not the cluster. A
    record that cannot be kept costs the job nothing: said, with the way to pull it anyway."""
    from slurmtorch.errors import SlurmtorchError
    from slurmtorch.remote import submitted  # lazy: as in `verb`

    sub = submitted.Submission(cluster=cluster.name, host=cluster.host, job_id=job, laptop=laptop,
                               mirror=mirror, cwd=cwd)
    try:
        submitted.record(sub)
    except (OSError, ValueError, SlurmtorchError) as exc:  # on ssh's reader thread: it must go on
        said = exc.message if isinstance(exc, SlurmtorchError) else str(exc)
        print(f"slurmtorch: note: job {job} is not recorded here for pull ({said}); "
              f"pull it with --to DIR", file=sys.stderr)


def with_site(argv: Sequence[str], site: str | None, program: int = 0) -> list[str]:
    """`argv` with `--site SITE` after the verb, unless a site is given already before the
    last `program` words (the program's own) (pure)."""
    args = list(argv)
    if site is None or any(a == "--site" or a.startswith("--site=") for a in args[:len(args) - program]):
        return args
    return [args[0], "--site", site, *args[1:]] if args else ["--site", site]
