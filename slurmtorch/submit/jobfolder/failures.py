"""Which rank failed, where and why, from the texts a job leaves (pure).

The bootstrap writes `rank R on HOST failed:` and the cause to the rank's stderr; srun
adds its per-task lines to batch.out. rank_reports reads those reports from one log (the
Distributor's path: rank, host, text, exception type); report.failure_report reads a job
folder into parse_failures. The lines themselves (and is_consequence, which the bootstrap
asks before it ends the job) are `slurmtorch.protocol`'s.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass, replace

from slurmtorch import protocol
from slurmtorch import rankfiles
from slurmtorch.rankfiles import RankExit, cause_of, exception_lines, is_consequence, parse_exit as rank_exit
from slurmtorch.submit.jobfolder.tracebacks import EXC_LINE_RE, agent_error, user_frame

__all__ = ["RankReport", "RankFailure", "RankExit", "rank_exit", "latest_exits", "srun_exit_code", "rank_reports",
           "parse_failures", "is_consequence", "lost_nodes"]

# A rank that failed before it knew its rank writes `rank ?(RANK=5) on ...` (rankinfo.rank_hint):
# the log it wrote to says which rank it was.
_RANK_HINT_RE = re.compile(r"^\?\(\w+=(?P<rank>\d{1,9})\)$")
# Where a report ends in a log shared with other writers (mpirun's, a torchrun node's):
# slurmstepd's notice, mpirun's banner (a line of dashes, `prterun ...`), srun's lines.
_REPORT_END_RE = re.compile(rf"^(-{{10,}}|slurmstepd|prterun |srun: |{protocol.START_PREFIX})")
SRUN_TASK_RE = re.compile(r"^srun: error: (?P<host>\S+): tasks? (?P<tasks>[\d,\-]+): (?P<what>.+?)\s*$")
# slurmstepd could not set the step up (PMIx, container, cgroup): the task never ran, and
# srun (22.05) still exits 0; the batch script turns that into exit 1.
_LAUNCH_FAILED_RE = re.compile(r"^srun: error: tasks? (?P<tasks>[\d,\-]+) launch failed: (?P<why>.+?)\s*$")
_NODE_FAILURE_RE = re.compile(r"^srun: error: Node failure on (\S+)\s*$", re.MULTILINE)
_PEER_ADDR_RE = re.compile(r"\[([0-9A-Fa-f.:]+)\]:\d+")
_TIMEOUT_RE = re.compile(r"timed out|timeout", re.IGNORECASE)


def is_timeout(cause: str) -> bool:
    """Whether a rank's cause is a timed-out wait (the process group's --timeout)."""
    return bool(_TIMEOUT_RE.search(cause))
# python -m slurmtorch.bootstrap where slurmtorch is not installed: in a container image, typically.
NO_SLURMTORCH_RE = re.compile(r"No module named '?slurmtorch(\.bootstrap)?'?")
NO_SLURMTORCH = ("its python has no slurmtorch (the site's `python:`, or in a container its `container.python`, "
                 "must name an interpreter with slurmtorch installed: pip install slurmtorch there)")
# charliecloud's ch-run could not set the container up (its words: `ch-run[PID]: error: WHAT (file.c:LINE ...)`,
# ch-run 0.31); the rank never ran. A bind target the read-only image lacks is the common one.
_CH_RUN_ERROR_RE = re.compile(r"^ch-run\[\d+\]: error: (?P<what>.+?)(?: \([\w.-]+\.c:\d+[^)]*\))?\s*$", re.MULTILINE)
_CH_RUN_NO_TARGET = ("ch-run binds only onto folders the image has: make that folder in the image, or bind one "
                     "above it with the site's container.mounts")


def ch_run_error(text: str) -> str | None:
    """ch-run's reason for not starting a rank's container, with the fix where one is known."""
    m = _CH_RUN_ERROR_RE.search(text)
    if m is None:
        return None
    what = m["what"]
    if what.startswith("can't mkdir:") and what.endswith("Read-only file system"):
        what += f" ({_CH_RUN_NO_TARGET})"
    return f"ch-run could not start the container: {what}"


# mpirun's words (Open MPI 5's prterun, 4's mpirun) for the rank it saw end first, in its own log
# (a local run's launcher.out) or batch.out. Its messages wrap over lines: read with spaces joined.
_MPIRUN_SIGNAL_RE = re.compile(r"(?:prterun|mpirun) noticed that process rank (?P<rank>\d{1,9}) with PID \d+ on node "
                               r"(?P<host>\S+) exited on signal (?P<signal>\d{1,3})")
_MPIRUN_EARLY_RE = re.compile(r"(?:prterun|mpirun) has exited due to process rank (?P<rank>\d{1,9}) with PID \d+ on node "
                              r"(?P<host>\S+) exiting improperly")
_MPIRUN_NONZERO_RE = re.compile(r"(?:prterun|mpirun) detected that one or more processes exited with non-zero status"
                                r".*? Process name: \[\S*?(?P<rank>\d{1,9})\] Exit code: (?P<code>\d{1,9})")
EXITED_EARLY = "Exited without MPI_Finalize"  # a launcher's words, as srun's are kept: mpirun's "exiting improperly"
# Signals a launcher sends a rank's peers once one failed (srun's kill-on-bad-exit, mpirun's
# teardown): a rank ended by one of these was stopped, it did not fail first.
_STOPPED_BY_LAUNCHER = ("Terminated", "Interrupt", "Hangup")


@dataclass(frozen=True)
class RankReport:
    """What one rank wrote under its `rank R on HOST failed:` line."""

    rank: int
    host: str
    text: str  # as the rank wrote it: a traceback, or a BootstrapError's `error: ...` line
    exc_type: str  # the traceback's exception class, as type(exc).__qualname__ ('' for an error line)
    said: str = ""  # the last line the rank wrote before its report (rankfiles.cause_of's for an exit)


@dataclass(frozen=True)
class RankFailure:
    """One rank's end as the job folder tells it."""

    rank: int
    host: str
    cause: str
    primary: bool  # False: it failed because a peer died or hung
    code: int | None = None  # the rank's own exit code, where srun or the rank said it
    where: str = ""  # FILE:LINE of the user's own frame that raised (user_frame), where a traceback tells it
    log: int | None = None  # the log it reported in (rank-R.err; a torchrun job's node-N.err), where it did
    role: str = ""  # a role job's: its role and index there, e.g. `worker 0`

    def line(self) -> str:
        where = f" on {self.host}" if self.host else ""  # unknown for a task that never started
        role = f" ({self.role})" if self.role else ""
        return f"rank {self.rank}{role}{where}: {self.cause}"


def latest_exits(texts: list[str]) -> dict[int, RankExit]:
    """The ranks that returned, by rank, from the latest run that left any: a requeued job
    reruns in the same folder, and an earlier run's files are history."""
    exits = [e for e in map(rank_exit, texts) if e is not None]
    latest = max((e.restart for e in exits), default=0)
    return {e.rank: e for e in exits if e.restart == latest}


_EXITED_RE = re.compile(r"Exited with exit code (\d{1,9})(?!\d)")  # srun's words for a task that exited by itself


def srun_exit_code(what: str) -> int | None:
    """A task's exit code from srun's words: `Exited with exit code N` is N, a signal's name
    (`Killed`, `Terminated`, `Segmentation fault`: strsignal) 128 + its number."""
    m = _EXITED_RE.match(what)
    if m:
        return int(m[1])
    name = what.strip()
    return next((128 + sig.value for sig in signal.Signals if signal.strsignal(sig) == name), None)


def mpirun_ends(log: str) -> dict[int, tuple[str, str]]:
    """The rank mpirun saw end first and how, in srun's words (pure): `exited on signal 9`
    is `Killed` (strsignal), `exiting improperly` (no MPI_Finalize: os._exit, or ended from
    outside) EXITED_EARLY, a non-zero status `Exited with exit code N` (no host given)."""
    text = " ".join(log.split())
    ends: dict[int, tuple[str, str]] = {}
    for m in _MPIRUN_SIGNAL_RE.finditer(text):
        ends.setdefault(int(m["rank"]), (m["host"], _signal_said(int(m["signal"]))))
    for m in _MPIRUN_EARLY_RE.finditer(text):
        ends.setdefault(int(m["rank"]), (m["host"], EXITED_EARLY))
    for m in _MPIRUN_NONZERO_RE.finditer(text):
        ends.setdefault(int(m["rank"]), ("", f"Exited with exit code {m['code']}"))
    return ends


_TASKS_RE = re.compile(r"(?P<lo>[0-9]{1,9})(?:-(?P<hi>[0-9]{1,9}))?")
_MOST_TASKS = 1 << 20


def _signal_said(number: int) -> str:
    """`Killed` for 9 (strsignal), `signal 99` for one this system has no name for."""
    try:
        return signal.strsignal(number) or f"signal {number}"
    except ValueError:  # out of range (a log may say anything)
        return f"signal {number}"


def expand_tasks(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        m = _TASKS_RE.fullmatch(part)
        if m and int(m["hi"] or m["lo"]) - int(m["lo"]) < _MOST_TASKS:  # a line the job wrote may say anything
            out.extend(range(int(m["lo"]), int(m["hi"] or m["lo"]) + 1))
    return out


def _exc_type(text: str) -> str:
    """The class of the exception that ended a traceback (of a chain, the last), '' for none."""
    raised = exception_lines(text.splitlines())
    m = EXC_LINE_RE.match(raised[-1]) if raised else None
    return m["name"].rpartition(".")[2] if m else ""


# Lines a library wrote, not the script: Python's warnings (`FILE:LINE: CATEGORY: message`, then
# the source line, indented) and torch's C++ log lines (`[W1207 21:17:25.093 FILE:LINE] ...`).
_WARNING_RE = re.compile(r"^\S+:\d+: \w*Warning: |^\[[WIE]\d{4} ")


def _said_before(lines: list[str], header: int) -> str:
    """The last line a rank wrote before its report at `header` (not one of ours, a launcher's
    or a library's warning), '' when there is none."""
    said = lines[:header]
    for i in range(len(said) - 1, -1, -1):
        line = said[i]
        if rankfiles.FAILURE_HEADER_RE.match(line) or _REPORT_END_RE.match(line):
            return ""
        warned = line[:1].isspace() and i > 0 and _WARNING_RE.match(said[i - 1])  # a warning's source line
        if line.strip() and not line.startswith("slurmtorch: ") and not _WARNING_RE.match(line) and not warned:
            return line.strip()
    return ""


def _rank_of(said: str, log_rank: int | None) -> int | None:
    """The rank a report's header names: its number; for `?(KEY=N)`, the log's rank, else N."""
    if said.isdigit():
        return int(said)
    if log_rank is not None:
        return log_rank
    hint = _RANK_HINT_RE.match(said)
    return int(hint["rank"]) if hint else None


def rank_reports(log: str, log_rank: int | None = None) -> list[RankReport]:
    """Every rank's report in one log, in the order written (pure).

    A rank that failed before it knew its rank writes `rank ?(KEY=N)` (rankinfo.rank_hint):
    `log_rank`, the rank whose log this is (rank-R.err), names it, else N; a report that
    neither names is left out. A report runs to the next one or to a launcher's lines.
    """
    lines = log.splitlines(keepends=True)
    reports = []
    for i, line in enumerate(lines):
        m = rankfiles.FAILURE_HEADER_RE.match(line)
        if not m:
            continue
        rank = _rank_of(m["rank"], log_rank)
        if rank is None:
            continue
        body = []
        for nxt in lines[i + 1:]:
            if rankfiles.FAILURE_HEADER_RE.match(nxt) or _REPORT_END_RE.match(nxt):
                break
            body.append(nxt)
        text = "".join(body)
        reports.append(RankReport(rank, m["host"], text, _exc_type(text), _said_before(lines, i)))
    return reports


def parse_failures(batch_out: str, rank_errs: dict[int, str], exits: dict[int, RankExit] | None = None,
                   hosts: Sequence[str] = (), origin: str = "") -> list[RankFailure]:
    """Which ranks failed, where, and why: primary causes first (pure; for status/logs/--wait).

    Ranks report `rank R on HOST failed:` + a cause (the bootstrap's contract); srun's
    `error: HOST: task R: Killed|Exited with exit code N|Terminated` lines cover ranks
    that could not say anything (SIGKILL, a lost node). A rank whose peers all timed
    out but that itself reported nothing and was terminated is the hung one. A rank that
    reported nothing while its peers lost it, and whose script returned (`exits`, from
    latest_exits), left too early; one that did not went down with its node. `hosts`: a
    role job's host of each job rank, by which srun's lines are placed, since srun numbers
    each role's tasks from 0 (a node's ranks are consecutive: its task t is its first rank
    plus t modulo the ranks it runs). `origin`: the user's tree the job's copy of the code
    came from (snapshot.json's), by which a frame in the copy is named (user_frame).
    """
    exits = exits or {}
    reported: dict[int, RankFailure] = {}
    for rank, text in sorted(rank_errs.items()):
        for report in rank_reports(text, rank)[:1]:
            cause = cause_of(report.text.splitlines(), report.said)
            reported[report.rank] = RankFailure(report.rank, report.host, cause, not rankfiles.CONSEQUENCE_RE.search(cause),
                                                rankfiles.exit_code_in(report.text), user_frame(report.text, origin),
                                                log=rank)
    srun, unlaunched, stopped, after_stop = _launcher_lines(batch_out, hosts)
    # A rank that reported a cause exited on its own: srun's line has its code, else its
    # report's (SystemExit's), else the bootstrap's for a Python exception (1).
    failures = {r: replace(f, code=_own_code(srun.get(r), f.code)) for r, f in reported.items()}
    for rank, why in unlaunched.items():
        if rank not in failures and rank not in srun:
            failures[rank] = RankFailure(rank, "", f"never started: the step failed to launch ({why}); "
                                         "the slurmd log of the node says why", True)
    for rank, (host, what) in srun.items():
        said = None if rank in failures else _launcher_said(rank, host, what, rank_errs.get(rank, ""))
        if said is not None:
            failures[rank] = said
    for rank, (host, what) in after_stop.items():
        if rank not in failures and rank not in srun:
            failures[rank] = RankFailure(rank, host, f"stopped when role {stopped} failed", False, srun_exit_code(what))
    for rank, text in rank_errs.items():  # an interpreter (a container image's) without slurmtorch
        if rank not in reported and NO_SLURMTORCH_RE.search(text):
            host = srun[rank][0] if rank in srun else ""
            failures[rank] = RankFailure(rank, host, NO_SLURMTORCH, True, 1)
        elif rank not in reported and (error := ch_run_error(text)) is not None:  # the container never started
            host, what = srun.get(rank, ("", ""))
            failures[rank] = RankFailure(rank, host, error, True, srun_exit_code(what))
    if failures and not any(f.primary for f in failures.values()):
        timed_out = [f for f in failures.values() if _TIMEOUT_RE.search(f.cause)]
        if timed_out:
            for rank, (host, what) in srun.items():
                if rank not in failures and what == "Terminated":
                    peers = ", ".join(str(f.rank) for f in sorted(timed_out, key=lambda f: f.rank))
                    failures[rank] = RankFailure(
                        rank, host, f"hung: reported nothing while ranks {peers} timed out waiting "
                        "(the process-group --timeout); terminated by srun", True, srun_exit_code(what))
    if failures and not any(f.primary for f in failures.values()):
        # Ranks that said nothing and have no exit status from srun (it prints none for
        # an exit 0), while their peers lost the connection: either their script returned
        # (their rank-R.exit says so, and where), or they went down with their node.
        silent = sorted(r for r in {*rank_errs, *exits} if r not in failures and r not in srun)
        for rank in silent:
            if rank in exits:
                failures[rank] = RankFailure(rank, exits[rank].host, "its script returned while the others "
                                             f"still needed it (exit {exits[rank].code})", True)
        silent = [r for r in silent if r not in exits]
        lost = sorted(lost_nodes(batch_out))
        addrs = [m.group(1) for f in failures.values() for m in [_PEER_ADDR_RE.search(f.cause)] if m]
        if lost:
            where, cause = ",".join(lost), f"lost with its node (srun: Node failure on {','.join(lost)})"
        else:
            where = max(sorted(set(addrs)), key=addrs.count) if addrs else "an unknown host"
            cause = "no report and no exit status: lost with its node?"
        for rank in silent:
            failures[rank] = RankFailure(rank, where, cause, True)
    return sorted(failures.values(), key=lambda f: (not f.primary, f.rank))


def _launcher_lines(batch_out: str, hosts: Sequence[str]) -> tuple[dict[int, tuple[str, str]], dict[int, str], str,
                                                                     dict[int, tuple[str, str]]]:
    """What the launcher said of each rank (host, words), the ranks whose step never launched
    (why), and in a role job the role whose failure stopped the others (the reaper's line) and
    what srun said after it, which is that stop, not the ranks' own failure."""
    srun: dict[int, tuple[str, str]] = mpirun_ends(batch_out)
    unlaunched: dict[int, str] = {}
    stopped = ""
    after_stop: dict[int, tuple[str, str]] = {}
    for ln in batch_out.splitlines():
        stopped = (m["role"] or stopped) if (m := protocol.STEP_STOPPED_RE.match(ln)) else stopped
        m = SRUN_TASK_RE.match(ln)
        if m:
            tasks = expand_tasks(m["tasks"])
            if m["host"] in hosts:
                tasks = [hosts.index(m["host"]) + t % hosts.count(m["host"]) for t in tasks]
            for t in tasks:
                (after_stop if stopped else srun).setdefault(t, (m["host"], m["what"]))
        m = _LAUNCH_FAILED_RE.match(ln)
        if m:
            for t in expand_tasks(m["tasks"]):
                unlaunched.setdefault(t, m["why"])
    return srun, unlaunched, stopped, after_stop


def _launcher_said(rank: int, host: str, what: str, err: str = "") -> RankFailure | None:
    """A rank that reported nothing, as its launcher saw it end (srun's words; mpirun's
    put in them by mpirun_ends); None for an end the launcher caused (it stopped the rank)."""
    code = srun_exit_code(what)
    if what == "Killed":
        return RankFailure(rank, host, "killed by a signal (SIGKILL?) before it could report", True, code)
    if what.startswith("Exited with exit code") and (agent := agent_error(err)):  # torchrun's agent, not a rank
        return RankFailure(rank, host, agent, True, code)
    if what.startswith("Exited with exit code"):
        return RankFailure(rank, host, f"{what.lower()} without reporting a cause", True, code)
    if what == EXITED_EARLY:
        return RankFailure(rank, host, "exited before the others without finishing (os._exit, or ended from "
                           "outside) and without reporting a cause", True)
    if code is not None and what not in _STOPPED_BY_LAUNCHER:
        name = signal.Signals(code - 128).name
        return RankFailure(rank, host, f"killed by signal {code - 128} ({name}: {what}) before it could report",
                           True, code)
    if what.startswith("Unable to") or "node" in what.lower():
        return RankFailure(rank, host, what, True)
    return None


def _own_code(srun_line: tuple[str, str] | None, said: int | None) -> int:
    """The exit code of a rank that reported its failure: the one srun saw it exit with, else
    the one its report `said` (SystemExit's), else 1, the bootstrap's after an exception (srun
    has no line for it, or names the signal it ended the rank with once it had reported: that
    is srun's doing, not the rank's)."""
    m = _EXITED_RE.match(srun_line[1]) if srun_line else None
    return int(m[1]) if m else said if said is not None else 1


def lost_nodes(batch_out: str) -> list[str]:
    """The nodes srun said it lost (`srun: error: Node failure on HOST`), in order, once each."""
    return list(dict.fromkeys(_NODE_FAILURE_RE.findall(batch_out)))
