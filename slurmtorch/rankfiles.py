"""What a rank writes for the other side to read, beside how that side reads it back: its
failure report, its exit note, its heartbeat, its live sample and its stacks (Python and
native frames). The names of the files they go in are protocol's.

Apart from protocol (the variables, the job folder's names and the batch script's lines) by
idea, and so that rendering a job, which needs only names, does not build these records: their
frozen dataclasses and regular expressions were 33M of a dry run's 728M instructions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass


# --------------------------------------------------------------------------- a rank's failure report
# A failing rank writes failure_header and then its cause (a traceback, or a BootstrapError's
# `error: ...` line) to its stderr (bootstrap.exits.fail); submit.failures reads them back.
# A rank that failed before it knew its rank writes `rank ?(RANK=5) on ...` (rankinfo.rank_hint).

FAILURE_HEADER_RE = re.compile(r"^rank (?P<rank>\d{1,9}|\?\S*) on (?P<host>\S+) failed:\s*$")
# What a rank reports when a *peer* died or hung: a consequence, not the cause.
# NCCL says so in its own words: a peer that exited or a network error (ncclRemoteError /
# ncclSystemError), or its watchdog giving up on a collective that never completed.
CONSEQUENCE_RE = re.compile(
    r"Connection (reset|closed) by peer|Broken pipe|Connection refused|Timed out|timed out|"
    r"DistNetworkError|Socket Timeout|ProcessGroupGloo.*(closed|failed)|"
    r"remote process exited or there was a network error|ncclRemoteError|ncclSystemError|"
    r"NCCL communicator was aborted|Watchdog caught collective operation timeout", re.IGNORECASE)
_SOURCE_PLACE_RE = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|h):\d+\]\s*")


def failure_header(who: int | str, host: str) -> str:
    return f"rank {who} on {host} failed:"


def exit_text(code: int) -> str:
    """A report's body for SystemExit(code): the rank said nothing else (bootstrap.runner)."""
    return f"exited with code {code}"


_EXIT_TEXT_RE = re.compile(r"^exited with code (?P<code>-?\d+)$")


def exit_code_in(body: str) -> int | None:
    """The code of a report that says only exit_text, None for any other."""
    m = _EXIT_TEXT_RE.match(body.strip())
    return int(m["code"]) if m else None
TRACEBACK = "Traceback (most recent call last):"
# Python's line above a traceback, and above an exception group's (3.11+: `  + Exception Group
# Traceback ...`, whose own lines carry the `  | ` it is indented by).
_TRACEBACK_RE = re.compile(r"^(?P<indent>\s*)(?P<group>\+ Exception Group )?Traceback \(most recent call last\):\s*$")


def exception_lines(lines: Iterable[str]) -> list[str]:
    """The exception line that ends each traceback in `lines`, in order: Python's
    `TYPE: first line of the message` (the rest of a message of several lines follows it). Of a
    chained exception (`raise X from Y`, one raised while handling another), the cause comes
    first and the exception that ended the program last."""
    found, prefix = [], None
    for line in lines:
        m = _TRACEBACK_RE.match(line)
        if m:
            prefix = m["indent"] + "| " if m["group"] else ""
        elif prefix is not None and line.startswith(prefix) and line[len(prefix):].strip():
            rest = line[len(prefix):]
            if not rest[0].isspace():  # a frame and its source are indented; the exception is not
                found.append(rest.strip())
                prefix = None
    return found


def last_traceback(lines: Iterable[str]) -> list[str]:
    """The lines of the last traceback in `lines` (of a chain, the one of the exception that
    ended the program; an exception group's without its `  | ` margin), [] when there is none."""
    found: list[str] = []
    prefix = None
    for line in lines:
        m = _TRACEBACK_RE.match(line)
        if m:
            found, prefix = [], m["indent"] + "| " if m["group"] else ""
        elif prefix is not None:
            found.append(line[len(prefix):] if line.startswith(prefix) else line)
    return found


def cause_of(body: list[str], said: str = "") -> str:
    """A report's cause in one line: a traceback's exception line (the last of a chain), the
    error line, or, for a rank that exited with a code and said nothing more, `said` (the last
    line it wrote to stderr before its report: argparse's error, say) where there is one."""
    lines = [ln.strip() for ln in body if ln.strip()]
    if not lines:
        return "failed (no detail)"
    raised = exception_lines(body) if any(TRACEBACK in ln for ln in lines) else []
    if raised:
        cause = raised[-1]
    elif lines[0].startswith("Traceback"):
        cause = lines[-1]  # a traceback cut short: its last line
    elif lines[0].startswith("error: "):
        cause = lines[0][len("error: "):]  # a BootstrapError's one line
    elif said and _EXIT_TEXT_RE.match(lines[0]):
        cause = said
    else:
        cause = lines[0]
    # gloo prefixes its messages with a source location and suffixes them with advice.
    cause = _SOURCE_PLACE_RE.sub("", cause)
    cause = cause.split(". This is typically", 1)[0]
    return cause if len(cause) <= 240 else cause[:237] + "..."


def is_consequence(report: str) -> bool:
    """Whether a rank's failure text (a traceback or one error line) says a peer died or
    hung, not what went wrong first: the bootstrap lets such a rank's peers report too."""
    return bool(CONSEQUENCE_RE.search(cause_of(report.splitlines())))


# --------------------------------------------------------------------------- a rank's exit note
# A rank whose script returned leaves exit_note_name(R) (bootstrap.exits.note_exit).

_EXIT_RE = re.compile(r"^rank (?P<rank>\d{1,9}) on (?P<host>\S+) exited (?P<code>-?\d{1,9}) restart (?P<restart>\d{1,9})\s*$")


@dataclass(frozen=True)
class RankExit:
    """A rank whose script returned: where, with what code, in which run of a requeued job."""

    rank: int
    host: str
    code: int
    restart: int


def exit_line(rank: int, host: str, code: int, restart: int) -> str:
    return f"rank {rank} on {host} exited {code} restart {restart}\n"


def parse_exit(text: str) -> RankExit | None:
    """An exit note's line, or None for anything else (a torn or foreign file)."""
    m = _EXIT_RE.match(text)
    return RankExit(int(m["rank"]), m["host"], int(m["code"]), int(m["restart"])) if m else None


# --------------------------------------------------------------------------- a rank's heartbeat
# With --hang-timeout each rank replaces heartbeat_name(R) in HEARTBEATS every interval
# (bootstrap.heartbeat); the restart supervisor reads them (submit.heartbeats.hung_ranks).

PLACES = ("torch", "own")  # where the main thread stands: inside torch, or anywhere else


@dataclass(frozen=True)
class Beat:
    written: float
    unmoved_since: float
    place: str  # torch | own
    rank: int
    host: str


def beat_line(written: float, unmoved_since: float, place: str, rank: int, host: str) -> str:
    return f"{written:.3f} {unmoved_since:.3f} {place} {rank} {host}\n"


def parse_beat(text: str) -> Beat | None:
    """One heartbeat line (`<written> <unmoved since> <torch|own> <rank> <host>`), or None."""
    parts = text.split()
    if len(parts) != 5 or parts[2] not in PLACES:
        return None
    try:
        return Beat(float(parts[0]), float(parts[1]), parts[2], int(parts[3]), parts[4])
    except ValueError:
        return None


# --------------------------------------------------------------------------- a rank's live sample
# Each rank replaces LIVE/live_name(R) (protocol) every SLURMTORCH_LIVE_S seconds (bootstrap.live);
# `slurmtorch top`, `status JOBID` and the end of `--wait` read them (submit.follow.live).

@dataclass(frozen=True)
class LiveSample:
    written: float  # epoch seconds
    since: float  # when the rank started sampling
    rank: int
    host: str
    steps: int  # optimizer steps so far (0: none seen, or no torch)
    step_s: float | None  # mean of the recent step intervals
    own_s: float | None  # their mean time outside backward (bootstrap.live.Steps: what names a slow rank)
    trend_s: float | None  # the mean step of the intervals before the recent ones
    own_mean_s: float | None  # the whole run's mean time outside backward
    first_step: float | None
    last_step: float | None
    cpu: float | None  # % of one core since the last sample
    rss: int | None  # bytes
    gpu: dict | None  # index, util, mem, mem_total, power_w, sm_mhz, throttle, energy_j (None: no GPU figures)
    ended: bool  # the rank's script returned

    @property
    def mean_step_s(self) -> float | None:
        """The whole run's mean step: the span of its steps over their intervals."""
        if self.steps < 2 or self.first_step is None or self.last_step is None:
            return None
        return (self.last_step - self.first_step) / (self.steps - 1)


def live_record(**fields) -> str:
    """One sample as the JSON object a rank writes (its keys are LiveSample's)."""
    return json.dumps(fields, separators=(",", ":")) + "\n"


def parse_live(text: str) -> LiveSample | None:
    """One rank's sample, or None for a torn or foreign file."""
    sample = live_or_why(text)
    return sample if isinstance(sample, LiveSample) else None


# What a rank writes for each field of a sample, and the most it can be: a reader checks each,
# so that a wrong one (a 5000-digit step count, an rss of 1e999, a gpu field of another shape)
# is one skipped sample, not a table that cannot be drawn.
_BIG = 1 << 62
_TIMES = ("step_s", "own_s", "trend_s", "own_mean_s", "first_step", "last_step", "cpu")
_GPU_NUMBERS = ("index", "util", "mem", "mem_total", "power_w", "sm_mhz", "energy_j")


def live_or_why(text: str) -> LiveSample | str:
    """One rank's sample, or why it is not one (one short phrase)."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError:
        return "not JSON"
    except ValueError:  # an int of more digits than Python converts (sys.get_int_max_str_digits)
        return "a number too long to read"
    if not isinstance(d, dict):
        return "not a JSON object"
    why = (next((f"{k} is not a time" for k in ("written", "since") if not _number(d.get(k))), None)
           or next((f"{k} is not a count" for k in ("rank", "steps") if not _count(d.get(k))), None)
           or next((f"{k} is not a number" for k in _TIMES if d.get(k) is not None and not _number(d[k])), None)
           or ("rss is not a number of bytes" if d.get("rss") is not None and not _count(d["rss"]) else None)
           or ("host is not a host name" if not isinstance(d.get("host"), str) or not 0 < len(d["host"]) <= 255
               else None)
           or _gpu_problem(d.get("gpu")))
    if why:
        return why
    step_s, own_s, trend_s, own_mean_s, first_step, last_step, cpu = (_opt(d.get(k)) for k in _TIMES)
    return LiveSample(float(d["written"]), float(d["since"]), d["rank"], d["host"], d["steps"], step_s, own_s,
                      trend_s, own_mean_s, first_step, last_step, cpu, d.get("rss"), d.get("gpu"),
                      bool(d.get("ended")))


def _number(value) -> bool:
    """A finite number a rank could have written (not a bool, not NaN, not 1e999)."""
    return type(value) in (int, float) and -_BIG < value < _BIG


def _count(value) -> bool:
    return type(value) is int and 0 <= value < _BIG


def _gpu_problem(gpu) -> str | None:
    """Why a sample's `gpu` is not what bootstrap.live writes (None, or its figures)."""
    if gpu is None:
        return None
    if not isinstance(gpu, dict):
        return "gpu is not a record"
    wrong = next((k for k in _GPU_NUMBERS if gpu.get(k) is not None and not (_number(gpu[k]) and gpu[k] >= 0)), None)
    if wrong:
        return f"gpu {wrong} is not a number"
    throttle = gpu.get("throttle")
    if throttle is not None and not (isinstance(throttle, list) and all(isinstance(t, str) for t in throttle)):
        return "gpu throttle is not a list of names"
    return None


def _opt(value) -> float | None:
    return None if value is None else float(value)


# --------------------------------------------------------------------------- a rank's stacks
# What bootstrap.stacks writes into STACKS (protocol: the files' names, STACKS_SIGNAL):
# the alive file's line, a stacks file and a native frames file.

def alive_line(host: str, pid: int) -> str:
    return f"{host} {pid}\n"


def parse_alive(text: str) -> tuple[str, int] | None:
    """(host, pid) from an alive file, or None."""
    parts = text.split()
    return (parts[0], int(parts[1])) if len(parts) == 2 and re.fullmatch("[0-9]{1,9}", parts[1]) else None


_STACKS_HEADER_RE = re.compile(r"^slurmtorch stacks: rank (?P<rank>\d{1,9}) on (?P<host>\S+) pid (?P<pid>\d{1,9}) "
                               r"main (?P<main>0x[0-9a-f]+)$")
_THREAD_RE = re.compile(r"^(?P<current>Current thread|Thread) (?P<ident>0x[0-9a-f]+)")
_FRAME_RE = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d{1,9}|\?{3}) in (?P<function>\S+)')


def stacks_header(rank: int, host: str, pid: int, main: int) -> str:
    """The line before faulthandler's text; `main` is the main thread's ident, as
    faulthandler prints thread ids."""
    return f"slurmtorch stacks: rank {rank} on {host} pid {pid} main 0x{main:016x}\n"


@dataclass(frozen=True)
class Frame:
    file: str  # a native frame's: its library's file name (libtorch_cpu.so)
    line: int  # 0 where faulthandler could not tell, and for a native frame
    function: str
    native: bool = False  # C/C++ (py-spy's native frames), not Python


@dataclass(frozen=True)
class ThreadStack:
    ident: int
    current: bool  # the thread that ran the handler
    frames: tuple  # of Frame, innermost first (faulthandler's "most recent call first")


@dataclass(frozen=True)
class RankStacks:
    rank: int
    host: str
    pid: int
    main: int
    threads: tuple  # of ThreadStack

    def main_thread(self) -> ThreadStack | None:
        return next((t for t in self.threads if t.ident == self.main), self.threads[0] if self.threads else None)


def parse_stacks(text: str) -> RankStacks | None:
    """A stacks file (stacks_header, then faulthandler's dump of every thread; of several
    dumps, the last), or None for anything else (an empty or foreign file)."""
    lines = text.splitlines()
    m = _STACKS_HEADER_RE.match(lines[0]) if lines else None
    if not m:
        return None
    threads: list[ThreadStack] = []
    for line in lines[1:]:
        t, f = _THREAD_RE.match(line), _FRAME_RE.match(line)
        if t:
            ident = int(t["ident"], 16)
            if any(seen.ident == ident for seen in threads):
                threads = []  # a thread seen already: a later dump follows (two requests in a row)
            threads.append(ThreadStack(ident, t["current"] != "Thread", ()))
        elif f and threads:
            frame = Frame(f["file"], int(f["line"]) if f["line"].isdigit() else 0, f["function"])
            last = threads[-1]
            threads[-1] = ThreadStack(last.ident, last.current, last.frames + (frame,))
    return RankStacks(int(m["rank"]), m["host"], int(m["pid"]), int(m["main"], 16), tuple(threads))


def native_header(rank: int, pid: int) -> str:
    """A native frames file's first line; py-spy's JSON (`dump --native --json`), or one
    `unavailable: WHY` line, follows."""
    return f"slurmtorch native: rank {rank} pid {pid}\n"


UNAVAILABLE = "unavailable: "


@dataclass(frozen=True)
class Native:
    """A rank's native frames: each thread's (`threads`: (ident, frames innermost first)),
    or why there are none (`why`)."""

    rank: int
    pid: int
    threads: tuple = ()  # of (int, tuple of Frame)
    why: str = ""

    def frames(self, ident: int) -> tuple | None:
        return next((frames for i, frames in self.threads if i == ident), None)


_NATIVE_HEADER_RE = re.compile(r"^slurmtorch native: rank (?P<rank>\d{1,9}) pid (?P<pid>\d{1,9})$")


def parse_native(text: str) -> Native | None:
    """A native frames file, or None for anything else (an empty or torn file). py-spy's
    JSON: a list of threads, each a `thread_id` (what faulthandler prints as the thread's
    id) and `frames`, innermost first; a frame with a `module` (its library) is native."""
    head, _, rest = text.partition("\n")
    m = _NATIVE_HEADER_RE.match(head)
    if not m:
        return None
    rank, pid = int(m["rank"]), int(m["pid"])
    if rest.startswith(UNAVAILABLE):
        return Native(rank, pid, why=rest[len(UNAVAILABLE):].strip())
    try:
        threads = [(int(t["thread_id"]), tuple(_py_spy_frame(f) for f in t["frames"])) for t in json.loads(rest)]
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError):  # JSON of another shape
        return Native(rank, pid, why="py-spy said something unreadable")
    return Native(rank, pid, tuple(threads))


def _py_spy_frame(f: dict) -> Frame:
    if f.get("module"):
        return Frame(str(f.get("short_filename") or f["module"]), 0, str(f["name"]), native=True)
    return Frame(str(f["filename"]), int(f.get("line") or 0), str(f["name"]))
