"""The cluster side of `slurmtorch pull`: which folder a pull reads, checked, and what is in it.

The laptop names the folder (`request.WHERE`): the one its own record says the job runs in
(the code's mirror and the working folder inside it). Without a record (a job submitted on
the login host, or from another laptop) it is Slurm's `WorkDir` for the job, which the job
cannot rewrite, while Slurm still knows the job; never job.json's `workdir`, which it can.
Either way the folder must be this user's and reached without a link from the mirror (or
the WorkDir) down: a job can make links in its own folders, and a link there would send
what it leads to. The answer also names what no pull brings: `.git` folders and links
(rsync is told so too) and the code files the laptop sent (the job's snapshot.json: a job
that edits it only changes which of its own files are offered). After the transfer the
laptop asks again (`request.LISTING`) for each file's size and time, so a file the job is
still writing is not placed.
"""

from __future__ import annotations

import json
import os
import posixpath
import stat
import sys
from dataclasses import dataclass

from slurmtorch.errors import ClusterError, SlurmtorchError, SpecError, SubmitError
from slurmtorch.submit.jobfolder.jobstatus import TERMINAL_STATES

NAMED = 20  # .git folders and links named in the answer, at most; the rest counted
SCAN_MAX = 200_000  # entries looked at for them, at most


@dataclass(frozen=True)
class Source:
    """The cluster's answer to WHERE: the folder a pull reads and what it leaves out."""

    top: str  # the mirror (or WorkDir), absolute
    cwd: str  # the working folder inside it, relative ('' for `top` itself)
    code: tuple[str, ...]  # the code files in it, relative to it: never pulled
    state: str  # Slurm's JobState, '' once Slurm has forgotten the job
    never: tuple[str, ...]  # `.git` folders and links, named (`pullplan.report`)
    unnamed: int  # and how many more

    @property
    def folder(self) -> str:
        return posixpath.join(self.top, self.cwd) if self.cwd else self.top

    @property
    def running(self) -> bool:
        return bool(self.state) and self.state not in TERMINAL_STATES


def read_source(out: bytes, cluster: str) -> Source:
    """The answer's last line as a Source, or one ClusterError line (pure)."""
    try:
        v = _last_line(out)
        src = Source(top=str(v["top"]), cwd=str(v["cwd"]), code=tuple(str(c) for c in v["code"]),
                     state=str(v["state"]), never=tuple(str(n) for n in v["never"]), unnamed=int(v["unnamed"]))
    except (ValueError, TypeError, KeyError):
        raise ClusterError(f"cluster {cluster} gave no answer slurmtorch reads to `where`",
                           tip="both sides must run the same slurmtorch version") from None
    if not posixpath.isabs(src.top) or not _relative(src.cwd, empty=True):
        raise ClusterError(f"cluster {cluster} named no usable folder for the pull: {src.folder!r}")
    return src


def read_listing(out: bytes, cluster: str) -> dict[str, tuple[int, int] | None]:
    """The answer to LISTING: each file's size and time (None: gone, or not a plain file) (pure)."""
    try:
        v = _last_line(out)
        return {str(k): (int(x[0]), int(x[1])) if x is not None else None for k, x in v.items()}
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        raise ClusterError(f"cluster {cluster} gave no answer slurmtorch reads to `listing`",
                           tip="both sides must run the same slurmtorch version") from None


def _last_line(out: bytes) -> dict:
    """The JSON object on the answer's last line (what the cluster side said before it, on stdout, above)."""
    lines = out.decode("utf-8", "surrogateescape").strip().splitlines()
    value = json.loads(lines[-1]) if lines else None
    if not isinstance(value, dict):
        raise ValueError("no JSON object")
    return value


def answer(word: str, call: dict) -> int:
    """serve's handling of WHERE and LISTING: the answer as one JSON line, or the error line."""
    try:
        value = where(call) if word == "where" else listing(call)
    except SlurmtorchError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    print(json.dumps(value))
    return 0


def where(call: dict) -> dict:
    """The folder job `call["job"]` runs in (the laptop's `top` and `cwd`, else Slurm's
    WorkDir), checked, and what a pull of `call["paths"]` from it leaves out."""
    from slurmtorch.usecases import pull  # lazy: only the cluster side asks Slurm

    job, fields = pull.job_fields(str(call.get("job")))
    top, cwd = str(call.get("top") or ""), str(call.get("cwd") or "")
    top = _expanded(top) if top else _workdir_of(job, fields)
    folder = checked_folder(job, top, cwd)
    paths = [str(p) for p in call.get("paths") or []]
    for p in paths:
        _through_no_link(job, folder, p)
    never, unnamed = _never_pulled(folder, paths or [""])
    return {"top": top, "cwd": cwd, "code": pull.code_files(job), "state": fields.get("JobState", ""),
            "never": never, "unnamed": unnamed}


def listing(call: dict) -> dict:
    """Each of `call["files"]` (relative to the checked folder): [size, mtime_ns], or None."""
    folder = checked_folder(str(call.get("job")), _expanded(str(call.get("top") or "")), str(call.get("cwd") or ""))
    out: dict[str, list[int] | None] = {}
    for f in call.get("files") or []:
        f = str(f)
        try:
            st = os.lstat(os.path.join(folder, f)) if _relative(f) else None
        except OSError:
            st = None
        out[f] = [st.st_size, st.st_mtime_ns] if st is not None and stat.S_ISREG(st.st_mode) else None
    return out


def checked_folder(job: str, top: str, cwd: str) -> str:
    """`top`/`cwd`: a folder of this user's, with no link from `top` down (one line if not)."""
    if not os.path.isabs(top) or not _relative(cwd, empty=True):
        raise SpecError(f"not a folder a pull reads: {top!r} {cwd!r}")
    path = top
    for part in ["", *(cwd.split("/") if cwd else [])]:
        path = os.path.join(path, part) if part else path
        try:
            st = os.lstat(path)
        except OSError as exc:
            raise SubmitError(f"the folder job {job} ran in, {path}, cannot be read: {exc.strerror or exc}",
                              tip="was it moved or removed? slurmtorch clean leaves the code's mirrors") from None
        if stat.S_ISLNK(st.st_mode):
            raise SubmitError(f"the folder job {job} ran in leads through a link, {path}: nothing is pulled from it",
                              tip="a job can make links in its own folders; rsync by hand what you trust")
        if not stat.S_ISDIR(st.st_mode):
            raise SubmitError(f"the folder job {job} ran in, {path}, is not a folder")
    if st.st_uid != os.getuid():
        raise SubmitError(f"the folder job {job} ran in, {path}, is another user's: nothing is pulled from it")
    return path


def _expanded(top: str) -> str:
    """The laptop's record names the mirror as `~/...` (the cluster's home) or absolute."""
    return os.path.expanduser(top) if top == "~" or top.startswith("~/") else top


def _workdir_of(job: str, fields: dict[str, str]) -> str:
    """Slurm's WorkDir for a job this laptop has no record of, once checked as this user's."""
    workdir = fields.get("WorkDir", "")
    if not workdir:
        raise SubmitError(f"this laptop has no record of job {job}, and Slurm no longer knows it: the folder "
                          "it ran in is unknown", tip="rsync by hand from the folder it was submitted from")
    uid = fields.get("UserId", "").partition("(")[2].rstrip(")")
    if uid != str(os.getuid()):
        raise SubmitError(f"job {job} is another user's ({fields.get('UserId')}): nothing is pulled from it")
    return workdir


def _through_no_link(job: str, folder: str, path: str) -> None:
    """A PATH's folders inside the working folder: none a link (the PATH itself may be one:
    rsync skips it and the answer names it)."""
    if not _relative(path):
        raise SpecError(f"PATH {path!r} is not inside the job's working folder")
    parts = path.split("/")
    for i in range(1, len(parts)):
        step = os.path.join(folder, *parts[:i])
        if os.path.islink(step):
            raise SubmitError(f"PATH {path} of job {job} leads through a link, {'/'.join(parts[:i])}: "
                              "nothing is pulled", tip="name the files below it by their own path, or rsync by hand")


def _never_pulled(folder: str, paths: list[str]) -> tuple[list[str], int]:
    """The `.git` folders and links under `paths`, NAMED at most (links with where they lead),
    and how many more, from a bounded walk that follows no link."""
    found: list[str] = []
    more = 0
    todo = list(reversed(paths))
    seen = 0
    while todo and seen < SCAN_MAX:
        rel = todo.pop()
        full = os.path.join(folder, rel) if rel else folder
        seen += 1
        try:
            st = os.lstat(full)
        except OSError:
            continue
        what = None
        if stat.S_ISLNK(st.st_mode):
            what = f"{rel} (a link to {_readlink(full)})"
        elif stat.S_ISDIR(st.st_mode) and posixpath.basename(rel) == ".git":
            what = f"{rel} (a git folder)"
        elif stat.S_ISDIR(st.st_mode):
            try:
                names = sorted(os.listdir(full), reverse=True)
            except OSError:
                continue
            todo.extend(posixpath.join(rel, n) if rel else n for n in names)
        if what is not None:
            if len(found) < NAMED:
                found.append(what)
            else:
                more += 1
    return found, more


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _relative(path: str, empty: bool = False) -> bool:
    """A relative path that stays inside its folder ('' only with `empty`)."""
    if not path:
        return empty
    parts = path.split("/")
    return not path.startswith("/") and all(p not in ("", ".", "..") for p in parts) and "\0" not in path
