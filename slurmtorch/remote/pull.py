"""`slurmtorch pull JOBID [PATH...] --cluster NAME`: what a job wrote on the cluster, brought here.

The laptop decides where: the folder its own record (`submitted`) says the job was submitted
from, else `--to DIR`; and from which cluster folder: the one that record names (the code's
mirror and the working folder in it), else Slurm's WorkDir for the job. Nothing the job can
rewrite (job.json, snapshot.json, a file's date) chooses either. The cluster side
(`pullsource`) checks that folder and names what no pull brings; rsync brings the rest into a
private staging folder here (`placing`), only what differs from the laptop's files; then the
plan (`pullplan`) places each file against the laptop's tree and its ledger (`ledger`) of
what earlier pulls placed: nothing the user made is overwritten, nothing is deleted, no link
is made, no `.git` comes.
"""

from __future__ import annotations

import os
import posixpath
import re
import sys

from slurmtorch import __version__
from slurmtorch.errors import ClusterError, SpecError, SubmitError, typed
from slurmtorch.remote import request, ssh, submitted
from slurmtorch.remote.pullsource import Source, read_listing, read_source
from slurmtorch.remote.submitted import Submission

_VANISHED = 24  # rsync: some files vanished before they could be transferred (a running job's)


def checked_paths(paths: list[str]) -> list[str]:
    """PATHs as the job's working folder names them: relative, and inside it (pure)."""
    out = []
    for p in paths:
        norm = posixpath.normpath(p)
        if not p or p.startswith("/") or norm == ".." or norm.startswith("../"):
            raise SpecError(f"PATH {p!r} is not inside the job's working folder",
                            tip="name files and folders relative to the folder the job was submitted from, "
                                "e.g. outputs/ or ckpt.pt")
        out.append(norm)
    return out


def checked_to(to: str) -> str:
    """`--to DIR`: absolute; a folder, or nothing yet (made once the cluster has answered)."""
    if not to:
        raise SpecError("--to needs a folder", tip="e.g. --to ./from-cluster")
    dest = os.path.abspath(to)
    if os.path.lexists(dest) and not os.path.isdir(dest):
        raise SpecError(f"--to {dest} is not a folder", tip="name a folder (it is made if missing)")
    return dest


def destination(sub: Submission | None, to: str | None, job: str, cluster: str) -> str:
    """Where the files go: `--to`, else the folder this laptop submitted the job from (pure but
    for the folder check)."""
    if to is not None:
        return to
    if sub is None:
        raise SpecError(f"this laptop did not submit job {job} to {cluster} (it has no record of it): "
                        "give --to DIR for its files", tip=typed(f"pull {job} --to DIR", cluster))
    if not os.path.isdir(sub.laptop):
        raise SpecError(f"job {job} was submitted from {sub.laptop}, which is no folder here any more",
                        tip=typed(f"pull {job} --to DIR", cluster))
    return sub.laptop


def pull(name: str, job_id: str, paths: list[str], to: str | None) -> int:
    """The laptop side: which job, into which folder, from which cluster folder; the exit code."""
    from slurmtorch.remote import clusters  # lazy: as forward.verb (PyYAML, the site model)

    if not re.fullmatch(r"[0-9]+", job_id):
        raise SpecError(f"invalid job id {job_id!r}", tip="a Slurm job id is a number, e.g. 1234")
    wanted = checked_paths(paths)
    given = checked_to(to) if to is not None else None
    cluster = clusters.find(name)
    sub = submitted.find(cluster.name, cluster.host, job_id)
    dest = destination(sub, given, job_id, cluster.name)
    conn = ssh.connect(cluster)
    ask = {"job": job_id, "top": sub.mirror if sub else "", "cwd": sub.cwd if sub else "", "paths": wanted}
    code, out = ssh.call(conn, request.command(cluster, __version__, [request.WHERE]), request.header(None, ask))
    if code != 0:
        return code  # the cluster side said why, on stderr
    source = read_source(out, cluster.name)
    try:
        os.makedirs(dest, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"cannot make {dest}: {exc.strerror or exc}", tip="name a folder of yours with --to") from None
    lines = _bring(conn, cluster.name, job_id, source, wanted, dest)
    for line in lines:
        print(line, file=sys.stderr)
    return 0


def _bring(conn: ssh.Connection, cluster: str, job: str, source: Source, wanted: list[str], dest: str) -> list[str]:
    """rsync into staging, the plan, the plan carried out and the ledger kept; the report."""
    from slurmtorch.remote import ledger, placing, pullplan  # lazy: only a pull that got its answer
    from slurmtorch.submit import interrupts

    real = os.path.realpath(dest)
    book = ledger.load(real)
    with placing.staging(dest) as stage:
        proc = ssh.rsync_back(conn, source.folder, wanted, stage, compare=dest, skip=source.code)
        if proc.returncode not in (0, _VANISHED):
            from slurmtorch.remote.sync import rsync_said

            raise SubmitError(f"pulling job {job}'s files from cluster {cluster} failed (rsync exit "
                              f"{proc.returncode}): {rsync_said(proc.stderr)}",
                              tip="check the PATHs: they are relative to the folder the job was submitted from")
        staged = placing.staged_entries(stage)
        now = _listing(conn, job, source, [s.path for s in staged if s.kind == pullplan.FILE])
        here = placing.laptop_entries(dest, staged, book)
        plan = pullplan.plan(staged, here, book, now, _umask())
        with interrupts.deferred(f"placing job {job}'s files"):  # placed and written in the ledger, or not begun
            done = placing.apply(plan, stage, dest)
            if done:
                ledger.save(real, {**book, **done})
    return pullplan.report(plan, job=job, cluster=cluster, source=source.folder, dest=dest, running=source.running,
                           never=source.never, never_more=source.unnamed)


def _listing(conn: ssh.Connection, job: str, source: Source, files: list[str]) -> dict[str, tuple[int, int] | None]:
    """Each transferred file's size and time on the cluster now, to tell one still being written."""
    if not files:
        return {}
    ask = {"job": job, "top": source.top, "cwd": source.cwd, "files": files}
    cluster = conn.cluster
    code, out = ssh.call(conn, request.command(cluster, __version__, [request.LISTING]), request.header(None, ask))
    if code != 0:
        raise ClusterError(f"cluster {cluster.name} could not list the files it sent (exit {code})",
                           tip="its line above says why; nothing was placed")
    return read_listing(out, cluster.name)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
