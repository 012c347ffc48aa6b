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
from slurmtorch.rankfiles import RankExit, cause_of, is_consequence, parse_exit as rank_exit

__all__ = ["RankReport", "RankFailure", "RankExit", "rank_exit", "latest_exits", "srun_exit_code", "rank_reports",
           "parse_failures", "batch_failures", "prologue_failures", "latest_start", "lost_nodes", "is_consequence"]

# A rank that failed before it knew its rank writes `rank ?(RANK=5) on ...` (rankinfo.rank_hint):
# the log it wrote to says which rank it was.
_RANK_HINT_RE = re.compile(r"^\?\(\w+=(?P<rank>\d+)\)$")
# Where a report ends in a log shared with other writers (mpirun's, a torchrun node's):
# slurmstepd's notice, mpirun's banner (a line of dashes, `prterun ...`), srun's lines.
_REPORT_END_RE = re.compile(rf"^(-{{10,}}|slurmstepd|prterun |srun: |{protocol.START_PREFIX})")
_EXC_LINE_RE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(:|$)")
_SRUN_TASK_RE = re.compile(r"^srun: error: (?P<host>\S+): tasks? (?P<tasks>[\d,\-]+): (?P<what>.+?)\s*$")
# slurmstepd could not set the step up (PMIx, container, cgroup): the task never ran, and
# srun (22.05) still exits 0; the batch script turns that into exit 1.
_LAUNCH_FAILED_RE = re.compile(r"^srun: error: tasks? (?P<tasks>[\d,\-]+) launch failed: (?P<why>.+?)\s*$")
_NODE_FAILURE_RE = re.compile(r"^srun: error: Node failure on (\S+)\s*$", re.MULTILINE)
# Slurm refusing to create or launch a step (a node taken out of the job, one not answering):
# srun's words before any task ran.
_REFUSED_RE = re.compile(r"^srun: error: (?:Unable to create step for job \S+|Application launch failed"
                         r"|Task launch for \S+ failed on node (?P<node>[^\s:]+)): (?P<why>.+?)\s*$", re.MULTILINE)
_PEER_ADDR_RE = re.compile(r"\[([0-9A-Fa-f.:]+)\]:\d+")
_TIMEOUT_RE = re.compile(r"timed out|timeout", re.IGNORECASE)


def is_timeout(cause: str) -> bool:
    """Whether a rank's cause is a timed-out wait (the process group's --timeout)."""
    return bool(_TIMEOUT_RE.search(cause))
# python -m slurmtorch.bootstrap where slurmtorch is not installed: in a container image, typically.
# A torchrun node's log (node-N.err) whose traceback passed through torchrun's agent itself.
_AGENT_FRAME_RE = re.compile(r"torch[/.]distributed[/.](run\.py|elastic[/.])")
_NO_SLURMTORCH_RE = re.compile(r"No module named '?slurmtorch(\.bootstrap)?'?")
NO_SLURMTORCH = ("its python has no slurmtorch (in a container, the image needs it: pip install slurmtorch in "
                 "the image, or set the site's container.python to an interpreter that has it)")
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
_MPIRUN_SIGNAL_RE = re.compile(r"(?:prterun|mpirun) noticed that process rank (?P<rank>\d+) with PID \d+ on node "
                               r"(?P<host>\S+) exited on signal (?P<signal>\d+)")
_MPIRUN_EARLY_RE = re.compile(r"(?:prterun|mpirun) has exited due to process rank (?P<rank>\d+) with PID \d+ on node "
                              r"(?P<host>\S+) exiting improperly")
_MPIRUN_NONZERO_RE = re.compile(r"(?:prterun|mpirun) detected that one or more processes exited with non-zero status"
                                r".*? Process name: \[\S*?(?P<rank>\d+)\] Exit code: (?P<code>\d+)")
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


_EXITED_RE = re.compile(r"Exited with exit code (\d+)")  # srun's words for a task that exited by itself


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
        ends.setdefault(int(m["rank"]), (m["host"], signal.strsignal(int(m["signal"])) or f"signal {m['signal']}"))
    for m in _MPIRUN_EARLY_RE.finditer(text):
        ends.setdefault(int(m["rank"]), (m["host"], EXITED_EARLY))
    for m in _MPIRUN_NONZERO_RE.finditer(text):
        ends.setdefault(int(m["rank"]), ("", f"Exited with exit code {m['code']}"))
    return ends


def _expand_tasks(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _exc_type(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines or not lines[0].startswith("Traceback"):
        return ""
    m = _EXC_LINE_RE.match(lines[-1])
    return m["name"].rpartition(".")[2] if m else ""


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
        reports.append(RankReport(rank, m["host"], text, _exc_type(text)))
    return reports


def parse_failures(batch_out: str, rank_errs: dict[int, str],
                   exits: dict[int, RankExit] | None = None, hosts: Sequence[str] = ()) -> list[RankFailure]:
    """Which ranks failed, where, and why: primary causes first (pure; for status/logs/--wait).

    Ranks report `rank R on HOST failed:` + a cause (the bootstrap's contract); srun's
    `error: HOST: task R: Killed|Exited with exit code N|Terminated` lines cover ranks
    that could not say anything (SIGKILL, a lost node). A rank whose peers all timed
    out but that itself reported nothing and was terminated is the hung one. A rank that
    reported nothing while its peers lost it, and whose script returned (`exits`, from
    latest_exits), left too early; one that did not went down with its node. `hosts`: a
    role job's host of each job rank, by which srun's lines are placed, since srun numbers
    each role's tasks from 0 (a node's ranks are consecutive: its task t is its first rank
    plus t modulo the ranks it runs).
    """
    exits = exits or {}
    reported: dict[int, RankFailure] = {}
    for rank, text in sorted(rank_errs.items()):
        for report in rank_reports(text, rank)[:1]:
            cause = cause_of(report.text.splitlines())
            reported[report.rank] = RankFailure(report.rank, report.host, cause, not rankfiles.CONSEQUENCE_RE.search(cause),
                                                where=user_frame(report.text), log=rank)
    srun, unlaunched, stopped, after_stop = _launcher_lines(batch_out, hosts)
    # A rank that reported a cause exited on its own: srun's line has its code, else the
    # bootstrap's for a Python exception (1).
    failures = {r: replace(f, code=_own_code(srun.get(r))) for r, f in reported.items()}
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
        if rank not in reported and _NO_SLURMTORCH_RE.search(text):
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
        m = _SRUN_TASK_RE.match(ln)
        if m:
            tasks = _expand_tasks(m["tasks"])
            if m["host"] in hosts:
                tasks = [hosts.index(m["host"]) + t % hosts.count(m["host"]) for t in tasks]
            for t in tasks:
                (after_stop if stopped else srun).setdefault(t, (m["host"], m["what"]))
        m = _LAUNCH_FAILED_RE.match(ln)
        if m:
            for t in _expand_tasks(m["tasks"]):
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


_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in ')
# Frames that are not the user's: slurmtorch's own (the bootstrap that ran the script), torch's,
# installed packages', the standard library's (runpy), and code without a file (<frozen runpy>).
# A job's copy of the code is under ~/.slurmtorch/jobs/N/code: `.slurmtorch` is not `slurmtorch`.
_NOT_USERS_RE = re.compile(r"[/\\](slurmtorch|torch|site-packages|dist-packages)[/\\]|^<|[/\\]lib[/\\]python\d[\d.]*[/\\]")


# A job's copy of the code (its snapshot): a file in it is named by its path in the user's tree.
_SNAPSHOT_RE = re.compile(rf"^.*[/\\]jobs[/\\]\d+[/\\]{protocol.CODE_DIR}[/\\]")


def user_frame(text: str) -> str:
    """`FILE:LINE` of the last frame of the user's own code in the traceback that ended a
    report, '' when none is there (an error line, a traceback of only library frames). The
    exception line says what; this says where in the script, past the bootstrap's frames
    above it and torch's below it. Of a chained traceback, the last part with such a frame.
    A file in the job's snapshot is named by its path in the user's tree (`train.py:9`)."""
    parts = text.split("Traceback (most recent call last):")[1:]
    for part in reversed(parts):
        frames = [m for m in map(_FRAME_RE.match, part.splitlines()) if m and not _NOT_USERS_RE.search(m["file"])]
        if frames:
            return f"{_SNAPSHOT_RE.sub('', frames[-1]['file'])}:{frames[-1]['line']}"
    return ""


def exception_lines(text: str) -> list[str]:
    """The exception line that ends each traceback in a log, in order (a chained exception's
    cause comes before the exception it caused)."""
    found, in_traceback = [], False
    for line in text.splitlines():
        if line.startswith("Traceback (most recent call last):"):
            in_traceback = True
        elif in_traceback and line.strip() and not line[0].isspace():
            found.append(line.strip())
            in_traceback = False
    return found


def agent_error(text: str) -> str | None:
    """What torchrun's agent said when it failed itself (its rendezvous, say), from a torchrun
    node's log, in one line: its exception without the module path, and, where that only
    points to its cause ("See inner exception"), the cause. None when no traceback there came
    through torchrun's own code (a worker's report is read as a rank's)."""
    if not _AGENT_FRAME_RE.search(text):
        return None
    raised = [_short_name(line) for line in exception_lines(text)]
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
    m = _EXC_LINE_RE.match(line)
    return line[len(m["name"]) - len(m["name"].rpartition(".")[2]):] if m else line


def _own_code(srun_line: tuple[str, str] | None) -> int:
    """The exit code of a rank that reported its failure: the one srun saw it exit with, else
    1, the bootstrap's after an exception (srun has no line for it, or names the signal it
    ended the rank with once it had reported: that is srun's doing, not the rank's)."""
    m = _EXITED_RE.match(srun_line[1]) if srun_line else None
    return int(m[1]) if m else 1


def batch_failures(batch_out: str, prologue_err: str) -> list[str]:
    """What failed in the batch script itself: its python (which picks the port on the first
    node) without slurmtorch, the node prologue (`prologue_failures`), the restart supervisor
    killed (the ranks' own ends are its consequence), or a --ray job's node whose Ray died
    (its step's exit is not a rank's)."""
    killed = protocol.SUPERVISOR_KILLED_RE.search(batch_out)
    if killed:
        return [f"the restart supervisor on the batch node was killed by {killed['signal']} (exit {killed['code']}); "
                "the job ended with it, and nothing restarted it"]
    died = [f"Ray {m['kind']} on {m['node']} died: {m['why']}" for m in protocol.RAY_DIED_RE.finditer(batch_out)]
    if died:
        return died
    if _NO_SLURMTORCH_RE.search(batch_out):
        return ["the job's python on its first node has no slurmtorch (the site's `python:` must be an "
                "interpreter the compute nodes share with slurmtorch installed)"]
    return prologue_failures(batch_out, prologue_err)


def prologue_failures(batch_out: str, prologue_err: str) -> list[str]:
    """The node prologue's failure, if the batch script said it failed: one cause per node srun
    named (`node2: exited with exit code 1 (its output: node-prologue-1.out)`), else one line."""
    if protocol.PROLOGUE_FAILED not in batch_out:
        return []
    causes = []
    for ln in prologue_err.splitlines():
        m = _SRUN_TASK_RE.match(ln)
        if m:
            for t in _expand_tasks(m["tasks"]):
                causes.append(f"the node prologue on {m['host']}: {m['what'].lower()} (its output: "
                              f"node-prologue-{t}.out)")
    return causes or ["the node prologue failed before any node ran it (node-prologue.err says why)"]


def latest_start(text: str) -> str:
    """The part of a log that the latest start wrote: after the last restart line, if any.
    A restarted job's logs grow across its starts; an earlier start's failure is history."""
    last = None
    for last in protocol.START_RE.finditer(text):
        pass
    return text[last.end():] if last else text


def lost_nodes(batch_out: str) -> list[str]:
    """The nodes srun said it lost (`srun: error: Node failure on HOST`), in order, once each."""
    return list(dict.fromkeys(_NODE_FAILURE_RE.findall(batch_out)))


def step_refusal(batch_out: str) -> tuple[str, tuple[str, ...]] | None:
    """srun's reason when Slurm did not create or launch the step, with the nodes it named
    (`Task launch for StepId=5.1 failed on node node3: ...`); None when it said no such thing."""
    found = list(_REFUSED_RE.finditer(batch_out))
    if not found:
        return None
    nodes = tuple(dict.fromkeys(m["node"] for m in found if m["node"]))
    return found[0]["why"], nodes

