"""What the submit side and the ranks agree on: variable names, the job folder's files, log lines.

The batch script and the restart supervisor set variables the ranks read; the ranks write
files and lines that the supervisor, `slurmtorch status`, `--wait` and the Distributor read
back. Each name and each line's format is written here once, its writer beside its parser,
so the two sides cannot drift apart. Pure; both sides import it, it imports neither.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

# --------------------------------------------------------------------------- variables

# Set by the batch script (templates/sbatch.sh.j2) or the restart supervisor; read by the ranks.
JOB_DIR = "SLURMTORCH_JOB_DIR"  # the job's folder (an array task's: its trial-K/)
STARTED = "SLURMTORCH_STARTED"  # the file srun's task 0 leaves once it runs (started_marker)
RESTART_COUNT = "SLURMTORCH_RESTART_COUNT"  # --max-restarts: starts of the step before this one
HEARTBEAT_S = "SLURMTORCH_HEARTBEAT_S"  # --hang-timeout: seconds between a rank's heartbeats
PREEMPT_SIGNAL = "SLURMTORCH_PREEMPT_SIGNAL"  # --signal: the bare signal name, e.g. USR1
PREEMPT_REQUEUE = "SLURMTORCH_PREEMPT_REQUEUE"  # 1: the preempted job requeues; 0: hooks only
ROLES = "SLURMTORCH_ROLES"  # a role job's layout, e.g. master=1,worker=3 (roles.parse_roles)
ROLE_NODES = "SLURMTORCH_ROLE_NODES"  # a heterogeneous role job's nodes in role order (hetjob; fromenv.from_roles)
TRIAL = "SLURMTORCH_TRIAL"  # an array task's trial
PARAMS = "SLURMTORCH_PARAMS"  # a sweep trial's parameters, as JSON
SWEEP_PREFIX = "SLURMTORCH_SWEEP_"  # + a sweep parameter's name (sweeps.sweep_var): its value
# A site's fabric name suffix (JSC: `i`): a node's Slurm name + it resolves to its fabric
# address, where MASTER_ADDR and torchrun's --local-addr go (rendezvous.site_address).
FABRIC_HOST_SUFFIX = "SLURMTORCH_FABRIC_HOST_SUFFIX"
CODE = "SLURMTORCH_CODE"  # the snapshot of the code the job runs (CODE_DIR in its folder)
GPU_ORDER = "SLURMTORCH_GPU_ORDER"  # `reverse`: local rank i takes GPU n-1-i (a site's `mpirun: gpu_order:`; Polaris)
# --placement / a site's `placement:`: where each rank runs (PLACEMENTS, bootstrap.placement);
# unset: auto. Also the user's, for a run slurmtorch did not submit.
PLACEMENT = "SLURMTORCH_PLACEMENT"
PLACEMENTS = ("auto", "share", "none")
# Set by `slurmtorch mpirun` (a run without Slurm): the run's folder, where its ranks answer
# `slurmtorch stacks local-N` and leave their exit notes. Not JOB_DIR: a local run's
# checkpoints and run id stay where they were (./checkpoints; none), each run being new.
LOCAL_RUN_DIR = "SLURMTORCH_LOCAL_RUN_DIR"
# Seconds between a rank's live samples (bootstrap.live; `slurmtorch top` reads them); 0: none.
# The batch script sets 10 unless the submitting environment set it.
LIVE_S = "SLURMTORCH_LIVE_S"
# A margin (0.2: 20 %): rank 0 names a rank slower than the median by it for 3 samples running.
STRAGGLER = "SLURMTORCH_STRAGGLER"
SCRIPT_SETS = (JOB_DIR, STARTED, RESTART_COUNT, HEARTBEAT_S, PREEMPT_SIGNAL, PREEMPT_REQUEUE, ROLES, ROLE_NODES,
               TRIAL, PARAMS, CODE)

# Set by the bootstrap for the user's script (and read by the preemption handler).
JOB_RANK = "SLURMTORCH_JOB_RANK"  # this process's rank in the whole job, ps/evaluator included
ROLE = "SLURMTORCH_ROLE"
ROLE_INDEX = "SLURMTORCH_ROLE_INDEX"
SOURCE = "SLURMTORCH_SOURCE"  # where the world came from: mpi, slurm, env, roles, single
OMITTED = "SLURMTORCH_OMITTED"  # contract maps left out as too large for one variable
# CLUSTER_SPEC's shapes (`--cluster-spec`, bootstrap.contracts): AI Platform's (master/worker, one
# entry per rank; the default) and Vertex AI's (workerpool0..3, one entry per replica).
CLUSTER_SPEC_SHAPES = ("ai-platform", "vertex")
RUN_ID = "SLURMTORCH_RUN_ID"  # the job's run id, the same in every start of it (bootstrap.runid)

# Set by `slurmtorch alloc`'s shell for `slurmtorch run`: the allocation's site and options, as JSON.
ALLOC = "SLURMTORCH_ALLOC"

# Working from a laptop (slurmtorch.remote): the cluster a command goes to, as `--cluster NAME`
# does (the user's); set by the cluster side's `serve`: that this process is it (so `--cluster`
# is ignored there; its value is the laptop's name for the cluster, which tips name), and the file holding the sync record of the code sent with the request,
# which `sbatch` takes its snapshot by.
CLUSTER = "SLURMTORCH_CLUSTER"
ON_CLUSTER = "SLURMTORCH_ON_CLUSTER"
SYNCED = "SLURMTORCH_SYNCED"

# Set by the user for the ranks.
TIMINGS = "SLURMTORCH_TIMINGS"  # DIR: each rank writes its start's phases to DIR/timings_name(R)
CHECKPOINT_DIR = "SLURMTORCH_CHECKPOINT_DIR"  # checkpoints outside a job folder
NO_STACKS = "SLURMTORCH_NO_STACKS"  # 1: no stacks handler (a script that handles STACKS_SIGNAL itself)
PY_SPY = "SLURMTORCH_PY_SPY"  # the py-spy that adds native frames to the stacks (a path), or 0: none


def rank_folder(environ) -> str | None:
    """Where a rank leaves what it says about itself (stacks, exit notes): its job's folder,
    or a local run's; None outside both."""
    return environ.get(JOB_DIR) or environ.get(LOCAL_RUN_DIR) or None


# --------------------------------------------------------------------------- the job folder's files

SCRIPT = "script.sh"  # the exact submitted text
JOB = "job.json"  # the job's layout (jobdir.job_record): how its logs are named
BATCH_OUT = "batch.out"
TRIALS = "trials.json"  # an array job's trials
EXIT_CODE = "exit-code"  # the launch step's, written by the batch script at its end
RESTARTS = "restarts.json"  # --max-restarts: the restart history (submit.restarts.RestartState)
# The restart supervisor's exit code, written as it ends; the batch script finds none when it was
# killed (a SIGKILL leaves no line of its own), and says so (SUPERVISOR_KILLED).
SUPERVISOR_END = "supervisor-end"
NODE_PROLOGUE_ERR = "node-prologue.err"  # srun's own lines of the site's node prologue step
HEARTBEATS = ".heartbeat"  # --hang-timeout: one file per rank (heartbeat_name)
LIVE = ".live"  # SLURMTORCH_LIVE_S: one sample per rank (live_name, live_record)
CHECKPOINTS = "checkpoints"
RUN_TOKEN = "run-token"  # random, written once at submission: what makes the run id unlike other jobs'
STACKS = "stacks"  # every rank's Python stacks on request (stacks_name, alive_name, SUMMARY)
CODE_DIR = "code"  # the snapshot of the code the job runs (submit.jobfolder.snapshot)
SNAPSHOT = "snapshot.json"  # what that snapshot is: its tree, commit, dirtiness, files (codecopy)
FLIGHT = "flight"  # NCCL jobs: torch's flight recorder dumps, flight_prefix + rank


def started_marker(start: int) -> str:
    """The file srun's task 0 leaves once start `start` of the step runs (the batch script
    names it `.started-${SLURM_RESTART_COUNT:-0}`: a requeued job's runs count there)."""
    return f".started-{start}"


def rank_logs(rank: int) -> tuple[str, str]:
    """A rank's stdout and stderr under srun and mpirun (torchrun: node_logs)."""
    return f"rank-{rank}.out", f"rank-{rank}.err"


def node_logs(node: int) -> tuple[str, str]:
    """A torchrun node's stdout and stderr, every rank of the node in them."""
    return f"node-{node}.out", f"node-{node}.err"


def exit_note_name(rank: int | str) -> str:  # "*": the glob of every rank's
    return f"rank-{rank}.exit"


def heartbeat_name(rank: int | str) -> str:  # "*": the glob of every rank's
    return f"rank-{rank}"


def timings_name(rank: int) -> str:
    return f"rank-{rank}.json"


# --------------------------------------------------------------------------- a rank's failure report
# A failing rank writes failure_header and then its cause (a traceback, or a BootstrapError's
# `error: ...` line) to its stderr (bootstrap.exits.fail); submit.failures reads them back.
# A rank that failed before it knew its rank writes `rank ?(RANK=5) on ...` (rankinfo.rank_hint).

FAILURE_HEADER_RE = re.compile(r"^rank (?P<rank>\d+|\?\S*) on (?P<host>\S+) failed:\s*$")
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


def cause_of(body: list[str]) -> str:
    """A report's cause in one line: a traceback's exception line, or the error line."""
    lines = [ln.strip() for ln in body if ln.strip()]
    if not lines:
        return "failed (no detail)"
    if lines[0].startswith("Traceback"):
        cause = lines[-1]  # the exception line
    elif lines[0].startswith("error: "):
        cause = lines[0][len("error: "):]  # a BootstrapError's one line
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

_EXIT_RE = re.compile(r"^rank (?P<rank>\d+) on (?P<host>\S+) exited (?P<code>-?\d+) restart (?P<restart>\d+)\s*$")


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
# Each rank replaces LIVE/live_name(R) every SLURMTORCH_LIVE_S seconds (bootstrap.live), a
# last time with ended=true when its script returned; `slurmtorch top`, `status JOBID` and
# the end of `--wait` read them (submit.follow.live).

def live_name(rank: int) -> str:
    return f"rank-{rank}.json"


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
    try:
        d = json.loads(text)
        gpu = d.get("gpu")
        return LiveSample(float(d["written"]), float(d["since"]), int(d["rank"]), str(d["host"]), int(d["steps"]),
                          _opt(d.get("step_s")), _opt(d.get("own_s")), _opt(d.get("trend_s")),
                          _opt(d.get("own_mean_s")), _opt(d.get("first_step")),
                          _opt(d.get("last_step")), _opt(d.get("cpu")),
                          int(d["rss"]) if d.get("rss") is not None else None,
                          gpu if isinstance(gpu, dict) else None, bool(d.get("ended")))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _opt(value) -> float | None:
    return None if value is None else float(value)


# --------------------------------------------------------------------------- a rank's stacks
# Every rank in a job folder installs bootstrap.stacks: on STACKS_SIGNAL it writes the Python
# stack of each of its threads to STACKS/stacks_name(R) (stacks_header, then faulthandler's
# text), and holds STACKS/alive_name(R) locked (lockf) while its process lives, so a reader
# tells a dead rank (no process: the lock is free) from one that does not answer.
# `slurmtorch stacks` and the restart supervisor ask (submit.stackrequest); submit.stacks groups.

# Ignored by default: a process without our handler (the batch shell, srun, torchrun's agent, a
# rank still importing torch) is untouched by it, so `scancel --full` may send it to them all.
# Not a preemption signal (submit.preemption refuses it there).
STACKS_SIGNAL = "WINCH"
SUMMARY = "summary.txt"  # in STACKS: the grouped stacks the supervisor said when a rank hung


def stacks_name(rank: int | str) -> str:  # "*": the glob of every rank's
    return f"rank-{rank}.txt"


def end_stacks_name(rank: int | str) -> str:  # "*": the glob of every rank's
    """Where a rank's stacks go as it ends: SIGTERM (srun ending the step), or its own
    failure because a peer hung (the exception's stack)."""
    return f"rank-{rank}.end.txt"


NATIVE_WANTED = "native-wanted"  # in STACKS, while a request wants native frames (`slurmtorch stacks`, not the supervisor)


def native_name(rank: int | str) -> str:  # "*": the glob of every rank's
    """A rank's native frames (bootstrap.native), written after its Python stacks."""
    return f"rank-{rank}.native.txt"


def alive_name(rank: int | str) -> str:  # "*": the glob of every rank's
    return f"rank-{rank}.alive"


def alive_line(host: str, pid: int) -> str:
    return f"{host} {pid}\n"


def parse_alive(text: str) -> tuple[str, int] | None:
    """(host, pid) from an alive file, or None."""
    parts = text.split()
    return (parts[0], int(parts[1])) if len(parts) == 2 and parts[1].isdigit() else None


def summary_text(start: int, lines: list[str]) -> str:
    """STACKS/SUMMARY: which start of the step hung, then the grouped lines."""
    return f"start {start}\n" + "".join(f"{line}\n" for line in lines)


def parse_summary(text: str) -> tuple[int, list[str]] | None:
    head, _, rest = text.partition("\n")
    if not head.startswith("start ") or not head[6:].isdigit():
        return None
    return int(head[6:]), [line for line in rest.splitlines() if line]


def flight_prefix(folder: str) -> str:
    """TORCH_FR_DUMP_TEMP_FILE for a job folder: torch appends the rank (FLIGHT/rank-R)."""
    return f"{folder.rstrip('/')}/{FLIGHT}/rank-"


_STACKS_HEADER_RE = re.compile(r"^slurmtorch stacks: rank (?P<rank>\d+) on (?P<host>\S+) pid (?P<pid>\d+) "
                               r"main (?P<main>0x[0-9a-f]+)$")
_THREAD_RE = re.compile(r"^(?P<current>Current thread|Thread) (?P<ident>0x[0-9a-f]+)")
_FRAME_RE = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+|\?{3}) in (?P<function>\S+)')


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


_NATIVE_HEADER_RE = re.compile(r"^slurmtorch native: rank (?P<rank>\d+) pid (?P<pid>\d+)$")


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
    except (ValueError, TypeError, KeyError):
        return Native(rank, pid, why="py-spy said something unreadable")
    return Native(rank, pid, tuple(threads))


def _py_spy_frame(f: dict) -> Frame:
    if f.get("module"):
        return Frame(str(f.get("short_filename") or f["module"]), 0, str(f["name"]), native=True)
    return Frame(str(f["filename"]), int(f.get("line") or 0), str(f["name"]))


# --------------------------------------------------------------------------- the restart line
# Before each restart the supervisor writes start_line to batch.out and at the end of every
# rank's stderr (supervisor.mark_start); a failure report reads only what follows the last.

START_RE = re.compile(r"^slurmtorch: start \d+ on .*$", re.MULTILINE)
START_PREFIX = r"slurmtorch: start \d+ "  # where a rank's report ends, in a regex


def start_line(start: int, nodes: Sequence[str], after: str) -> str:
    return f"slurmtorch: start {start} on {','.join(nodes)}, after: {after}\n"


# --------------------------------------------------------------------------- the batch script's lines

# templates/_macros.sh.j2's line when the node prologue's step fails (submit.failures reads it).
PROLOGUE_FAILED = "slurmtorch: error: node prologue failed"
# templates/sbatch.sh.j2's line when the restart supervisor ended without its SUPERVISOR_END file.
SUPERVISOR_KILLED = "slurmtorch: error: the restart supervisor was killed"
SUPERVISOR_KILLED_RE = re.compile(re.escape(SUPERVISOR_KILLED) + r" by (?P<signal>SIG\w+) \(exit (?P<code>\d+)\)")


# --------------------------------------------------------------------------- requeue lines
# Said by the one requeue path (slurmtorch.requeue), for a preempted rank or the supervisor.

def requeueing_line(who: str, host: str, target: str, restart: int) -> str:
    return f"{who} on {host}: requeueing job {target}; it restarts as restart {restart}"


def requeued_without_line(target: str, nodes: list[str] | tuple[str, ...]) -> str:
    return f"job {target} requeued without {','.join(nodes)}"
