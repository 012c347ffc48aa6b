"""Where a traceback in a job's logs points: the user's own frame that raised (past the
bootstrap's and torch's frames, named in the user's tree rather than the job's copy), and
torchrun's agent's own failure (its rendezvous, say, or its ChildFailedError's first worker)."""

from __future__ import annotations

import re

from slurmtorch import protocol, rankfiles
from slurmtorch.rankfiles import exception_lines

# A torchrun node's log (node-N.err) whose traceback passed through torchrun's agent itself.
_AGENT_FRAME_RE = re.compile(r"torch[/.]distributed[/.](run\.py|elastic[/.])")
EXC_LINE_RE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(:|$)")  # an exception's line: its (dotted) type first


_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in ')
# Frames that are not the user's: slurmtorch's own (the bootstrap that ran the script), torch's,
# installed packages', the standard library's (runpy), and code without a file (<frozen runpy>).
# A job's copy of the code is under ~/.slurmtorch/jobs/N/code: `.slurmtorch` is not `slurmtorch`.
_NOT_USERS_RE = re.compile(r"[/\\](slurmtorch|torch|site-packages|dist-packages)[/\\]|^<|[/\\]lib[/\\]python\d[\d.]*[/\\]")


# A job's copy of the code (its snapshot): a file in it is named by its path in the user's tree.
_SNAPSHOT_RE = re.compile(rf"^.*[/\\]jobs[/\\]\d+[/\\]{protocol.CODE_DIR}[/\\]")


def user_frame(text: str, origin: str = "") -> str:
    """`FILE:LINE` of the innermost frame of the user's own code in the traceback of the
    exception that ended a report (of a chain, the last one's), '' when none is there (an
    error line, a traceback of only library frames). The exception line says what; this
    says where in the script, past the bootstrap's frames above it and torch's below it.
    A file in the job's copy of the code is named by its path in `origin`, the user's tree
    it was copied from (`/home/ada/proj/train.py:9`; without one, `train.py:9`): the file
    their editor opens."""
    part = rankfiles.last_traceback(text.splitlines())
    frames = [m for m in map(_FRAME_RE.match, part) if m and not _NOT_USERS_RE.search(m["file"])]
    if not frames:
        return ""
    root = origin.rstrip("/") + "/" if origin else ""
    return f"{_SNAPSHOT_RE.sub(lambda _: root, frames[-1]['file'])}:{frames[-1]['line']}"


def agent_error(text: str) -> str | None:
    """What torchrun's agent said when it failed itself (its rendezvous, say), from a torchrun
    node's log, in one line: its exception without the module path, and, where that only
    points to its cause ("See inner exception"), the cause. None when no traceback there came
    through torchrun's own code (a worker's report is read as a rank's)."""
    if not _AGENT_FRAME_RE.search(text):
        return None
    raised = [_short_name(line) for line in exception_lines(text.splitlines())]
    if not raised:
        return None
    cause = raised[-1]
    if cause.endswith(":") and (root := child_root_cause(text)):  # ChildFailedError: its words are below it
        cause = f"{cause} {root}"
    elif len(raised) > 1 and "inner exception" in cause:
        cause = f"{cause.split(' See inner exception', 1)[0].rstrip('.')} ({raised[-2].rstrip('.')})"
    cause = f"torchrun's agent failed: {cause}"
    return cause if len(cause) <= 300 else cause[:297] + "..."


_ROOT_FIELD_RE = re.compile(r"^\s+(?P<key>rank|exitcode|traceback)\s*:\s*(?P<value>.*?)\s*$")


def child_root_cause(text: str) -> str | None:
    """The worker that failed first, from the `Root Cause (first observed failure):` block that
    torchrun's ChildFailedError prints below its own (empty) line: rank, exit code, its traceback
    line unless that only says how to get one. None without the block."""
    _, found, block = text.rpartition("Root Cause (first observed failure):")
    if not found:
        return None
    fields: dict[str, str] = {}
    for line in block.splitlines()[1:]:
        if line.startswith("="):
            break
        m = _ROOT_FIELD_RE.match(line)
        if m:
            fields.setdefault(m["key"], m["value"])
    if "rank" not in fields:
        return None
    code = re.sub(r"\s*\(pid: \d+\)\s*", " ", fields.get("exitcode", "?")).strip()
    said = fields.get("traceback", "")
    tail = "" if not said or said.startswith("To enable traceback") else f", {said}"
    return f"its worker rank {fields['rank']} failed first: exitcode {code}{tail}"


def _short_name(line: str) -> str:
    """`torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: ...` without the module."""
    m = EXC_LINE_RE.match(line)
    return line[len(m["name"]) - len(m["name"].rpartition(".")[2]):] if m else line
