"""`slurmtorch pull JOBID [PATH...] --cluster NAME`: what a job wrote on the cluster, brought here.

A job's ranks start in the folder it was submitted from (job.json's `workdir`; for a
laptop's submission, the cluster's mirror of the laptop folder), so its relative outputs
(checkpoints, `outputs/`, `wandb/`) are there. The cluster side (`where`, run by serve for
`request.WHERE`) checks the job's folder as every reader does and that the working folder
is this user's own, and answers with it and the code files in it (those the laptop sent).
This side then runs rsync back over the cluster's shared connection: only what changed,
never the code (the laptop's own copy is the one being edited), never over a file that is
newer here (`--update`), nothing deleted.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import socket
import sys
from pathlib import Path

from slurmtorch import __version__
from slurmtorch.errors import SpecError, SubmitError
from slurmtorch.remote import request, ssh

_PULLED = re.compile(rb"Number of regular files transferred: ([0-9,]+)")


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


def where(job_id: str) -> dict:
    """The cluster side: the job's working folder and the code files in it (relative to it),
    after the checks a reader makes (jobdir.checked); the folder must be this user's own."""
    from slurmtorch.submit.jobfolder import codecopy, jobdir  # lazy: only the cluster side reads job folders

    jobdir.check_job_id(job_id)
    folder = jobdir.checked(jobdir.job_dir(job_id))
    if not folder.is_dir():
        raise SubmitError(f"no job folder {folder}", tip="was the job submitted by slurmtorch with this workdir?")
    workdir = (jobdir.read_job(folder) or {}).get("workdir")
    if not isinstance(workdir, str) or not workdir:
        raise SubmitError(f"job {job_id} does not record the folder it ran in (submitted by an older slurmtorch)",
                          tip=f"slurmtorch logs {job_id} shows its output; its files are where it was submitted from")
    try:
        owner = os.stat(workdir).st_uid
    except OSError as exc:
        raise SubmitError(f"the folder job {job_id} ran in, {workdir}, cannot be read: {exc.strerror or exc}") from None
    if owner != os.getuid():
        raise SubmitError(f"the folder job {job_id} ran in, {workdir}, is another user's: nothing is pulled from it")
    record = codecopy.read_record(folder) or {}
    cwd = str(record.get("cwd") or "")
    code = [str(m[0]) for m in record.get("manifest") or []]
    inside = [c[len(cwd) + 1:] if cwd else c for c in code if not cwd or c.startswith(cwd + "/")]
    return {"workdir": workdir, "code": inside, "origin": str(record.get("root") or ""), "cwd": cwd}


def answer_where(job_id: str) -> int:
    """serve's handling of `request.WHERE`: the answer as one JSON line, or the error line."""
    from slurmtorch.errors import SlurmtorchError

    try:
        print(json.dumps(where(job_id)))
    except SlurmtorchError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    return 0


def default_dest(answer: dict, here: str) -> str:
    """Where pulled files go by default: the laptop folder the job was submitted from, when
    this is the host that sent it and the folder is still there; else `here` (pure, but for
    the folder check)."""
    host, _, root = answer.get("origin", "").partition(":")
    if root and host == socket.gethostname():
        folder = os.path.join(root, answer.get("cwd") or "")
        if os.path.isdir(folder):
            return folder
    return here


def pull(name: str, job_id: str, paths: list[str], to: str | None) -> int:
    """The laptop side: ask where the job ran, then rsync what it wrote into `to` (or the folder
    it was submitted from); the exit code."""
    from slurmtorch.remote import clusters  # lazy: as forward.verb

    wanted = checked_paths(paths)
    cluster = clusters.find(name)
    conn = ssh.connect(cluster)
    code, out = ssh.call(conn, request.command(cluster, __version__, [request.WHERE, job_id]), request.header(None))
    if code != 0:
        return code  # the cluster side said why, on stderr
    answer = json.loads(out.decode("utf-8", "surrogateescape").strip().splitlines()[-1])
    dest = to or default_dest(answer, os.getcwd())
    Path(dest).mkdir(parents=True, exist_ok=True)
    proc = ssh.rsync_back(conn, answer["workdir"], wanted, dest, skip=answer["code"])
    if proc.returncode != 0:
        from slurmtorch.remote.sync import rsync_said

        raise SubmitError(f"pulling job {job_id}'s files from cluster {cluster.name} failed (rsync exit "
                          f"{proc.returncode}): {rsync_said(proc.stderr)}",
                          tip="check the PATHs: they are relative to the folder the job was submitted from")
    found = _PULLED.search(proc.stdout)
    count = found.group(1).decode().replace(",", "") if found else "?"
    print(f"slurmtorch: pulled {count} file{'' if count == '1' else 's'} of job {job_id} from "
          f"{cluster.name}:{answer['workdir']} into {dest}", file=sys.stderr)
    return 0
