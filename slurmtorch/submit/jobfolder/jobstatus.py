"""A job's state as the scheduler and its folder tell it (pure): `JobStatus` and squeue's lines.

squeue is asked with a format string (`SQUEUE_FORMAT`), never `--json`: Slurm 22.05's
`squeue --json` ignores `-j`, `-u` and `-t` and dumps every job of every user (seen on
the testbed: `squeue --json -u nobody` listed all 8 jobs), which is the load a polite
client avoids; the format string is filtered by the controller on every version.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

TERMINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
    "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED",
})
# id | state | reason | nodes | submit time | start time (expected, while pending) | user | end
# time (expected, while running) | name (last: a job's name may hold the separator)
SQUEUE_FORMAT = "%i|%T|%r|%N|%V|%S|%u|%e|%j"
_NO_REASON = ("", "None", "(null)")


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: str
    exit_code: int | None = None
    reason: str = ""
    nodes: str = ""
    source: str = ""
    submitted: float | None = None  # epoch seconds, from squeue
    started: float | None = None  # epoch seconds; None while pending
    user: str = ""
    ended: float | None = None  # epoch seconds; None until it ended
    name: str = ""

    @property
    def done(self) -> bool:
        """Ended: a terminal Slurm state, or known only from its folder (the scheduler has
        forgotten it, so it cannot run any more, exit-code file or not). Every wait
        stops on this."""
        if self.source == "job folder":
            return True
        return self.state.split()[0] in TERMINAL_STATES if self.state else False

    @property
    def why(self) -> str:
        """Slurm's reason, or '' when it gives none."""
        return "" if self.reason in _NO_REASON else self.reason

    def elapsed(self, now: float | None = None) -> float | None:
        """Seconds it has run (so far, or in all once ended), None when not known."""
        if self.started is None:
            return None
        end = self.ended if self.done else (time.time() if now is None else now)
        return None if end is None else max(0.0, end - self.started)

    def line(self, extra: tuple[str, ...] = ()) -> str:
        parts = [f"job={self.job_id}", f"state={self.state}"]
        if self.exit_code is not None:
            parts.append(f"exit_code={self.exit_code}")
        parts.extend(extra)
        if self.nodes:
            parts.append(f"nodes={self.nodes}")
        if self.why:
            parts.append(f"reason={self.why}")
        parts.append(f"source={self.source}")
        return " ".join(parts)

    def describe(self, now: float | None = None, elapsed: bool = True) -> str:
        """`PENDING (Priority) 0:42`, `RUNNING on node[1-4] 3:10`: the state as a person reads it,
        with (`elapsed`) how long it has been waiting (since submission) or running (since its start)."""
        text = self.state
        if self.state == "RUNNING" and self.nodes:
            text += f" on {self.nodes}"
        elif self.why and not self.done:
            text += f" ({self.why})"
        since = self.started if self.state == "RUNNING" else self.submitted if self.state == "PENDING" else None
        if elapsed and since is not None:
            text += f" {clock(max(0.0, (time.time() if now is None else now) - since))}"
        return text


@dataclass(frozen=True)
class SqueueRow:
    """One line of `squeue -o SQUEUE_FORMAT`."""

    job_id: str
    state: str
    reason: str
    nodes: str
    submitted: float | None
    started: float | None
    user: str
    ended: float | None = None
    name: str = ""

    def status(self) -> JobStatus:
        started = self.started if self.state != "PENDING" else None  # a pending job's is a forecast
        ended = self.ended if self.state.split()[0] in TERMINAL_STATES else None  # a running job's is its limit
        return JobStatus(self.job_id, self.state, None, self.reason, self.nodes, "squeue",
                         self.submitted, started, self.user, ended, self.name)


def parse_squeue(stdout: str) -> dict[str, SqueueRow]:
    """`squeue -h -o SQUEUE_FORMAT` -> rows by job id (`123`, or `123_4` for an array task).
    A line of the first seven fields alone (no end time, no name) is read as well. A
    heterogeneous job's components (`123+0`, `123+1`: a role job over node types) are one
    row, `123`: its leader's (+0, whose batch script is the job), on every component's nodes."""
    rows: dict[str, SqueueRow] = {}
    components: dict[str, list[tuple[int, SqueueRow]]] = {}
    for line in stdout.splitlines():
        fields = line.strip().split("|", 8)
        if len(fields) not in (7, 9) or not fields[0]:
            continue
        ident, state, reason, nodes, submitted, started, user = fields[:7]
        ended, name = (slurm_time(fields[7]), fields[8]) if len(fields) == 9 else (None, "")
        row = SqueueRow(ident, state, reason, nodes, slurm_time(submitted), slurm_time(started), user, ended, name)
        leader, plus, offset = ident.partition("+")
        if plus and offset.isdigit():
            components.setdefault(leader, []).append((int(offset), row))
        else:
            rows[ident] = row
    for leader, parts in components.items():
        parts.sort(key=lambda part: part[0])
        nodes = ",".join(row.nodes for _, row in parts if row.nodes and row.nodes != "(null)")
        rows[leader] = replace(parts[0][1], job_id=leader, nodes=nodes)
    return rows


def slurm_time(text: str) -> float | None:
    """Epoch seconds of Slurm's `2026-11-24T20:30:02` (the local time zone), or None (N/A, Unknown)."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def clock(seconds: float) -> str:
    """`0:42`, `3:10:05`, `2-03:10:05`: elapsed time the way Slurm prints it."""
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{s:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{s:02d}"
    return f"{minutes}:{s:02d}"


def scontrol_fields(stdout: str) -> dict[str, str]:
    """`scontrol -o show job` -> its Key=Value fields (the first of each key)."""
    fields: dict[str, str] = {}
    for token in stdout.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


# `scontrol show job` (not -o) prints these alone on their line; a value may hold spaces.
_WHOLE_LINE = ("WorkDir", "Command", "StdErr", "StdIn", "StdOut")


def scontrol_record(stdout: str) -> dict[str, str]:
    """`scontrol show job` -> the first job's Key=Value fields, a folder with a space in it
    whole (`-o` puts every field on one line, where a space ends a value)."""
    fields: dict[str, str] = {}
    for line in stdout.splitlines():
        text = line.lstrip()
        if not text:
            if fields:
                break  # the next array task's record
            continue
        key, sep, value = text.partition("=")
        if sep and key in _WHOLE_LINE:
            fields.setdefault(key, value)
            continue
        for token in text.split():
            key, sep, value = token.partition("=")
            if sep:
                fields.setdefault(key, value)
    return fields


def scontrol_exit(fields: dict[str, str], state: str) -> int:
    """The job's exit code from scontrol's `ExitCode=CODE:SIGNAL` (128+signal for a kill)."""
    code, _, sig = fields.get("ExitCode", "0:0").partition(":")
    code_i, sig_i = int(code or 0), int(sig or 0)
    if code_i:
        return code_i
    if sig_i:
        return 128 + sig_i
    return 0 if state == "COMPLETED" else 1


def exit_code_of(status: JobStatus) -> int:
    if status.exit_code is not None:
        return status.exit_code
    return 0 if status.state == "COMPLETED" else 1


@dataclass(frozen=True)
class TrialStatus:
    trial: int
    params: dict
    status: JobStatus

    def line(self) -> str:
        s = self.status
        parts = [f"trial={self.trial}", f"job={s.job_id}", f"state={s.state}"]
        if s.exit_code is not None:
            parts.append(f"exit_code={s.exit_code}")
        if s.nodes:
            parts.append(f"nodes={s.nodes}")
        if s.why:
            parts.append(f"reason={s.why}")
        if self.params:
            parts.append("params=" + ",".join(f"{k}={v}" for k, v in self.params.items()))
        parts.append(f"source={s.source}")
        return " ".join(parts)
