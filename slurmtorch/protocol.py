"""What the submit side and the ranks agree on: variable names, the job folder's files, the
batch script's and the supervisor's lines.

The batch script and the restart supervisor set variables the ranks read; the ranks write
files that the supervisor, `slurmtorch status`, `--wait` and the Distributor read back (what
a rank writes in them, and how it is read: rankfiles). Each name and each line's format is
written here once, its writer beside its parser, so the two sides cannot drift apart. Pure;
both sides import it, it imports neither.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

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
# How ranks are started, and the container runtimes: named by a site's keys and the CLI's options alike.
LAUNCHERS = ("srun", "mpirun", "torchrun")
CONTAINER_RUNTIMES = ("pyxis", "apptainer", "podman-hpc", "shifter", "cscs-ce", "charliecloud")
CHAIN_RECORD = "chain.json"  # a chain's record, in the folder of each of its parts (launch/chain, jobfolder/cleaning)
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
# A role job's nodes in its folder, job rank R's on line R+1: srun numbers each role's tasks from 0, so
# the failure report places srun's lines by host (failures.parse_failures).
ROLE_NODES_FILE = "role-nodes"
HEARTBEATS = ".heartbeat"  # --hang-timeout: one file per rank (heartbeat_name)
LIVE = ".live"  # SLURMTORCH_LIVE_S: one sample per rank (live_name, live_record)
CHECKPOINTS = "checkpoints"
PREEMPTED = ".preempted"  # --signal: a folder per start (preempted_name), a file per rank that ran its hooks
RUN_TOKEN = "run-token"  # random, written once at submission: what makes the run id unlike other jobs'
STACKS = "stacks"  # every rank's Python stacks on request (stacks_name, alive_name, SUMMARY)
SHELL_DIR = "sh"  # the batch node's bash the job's script sources (templates/*.sh, copied at submission)
SHELL = "SLURMTORCH_SH"  # where the script finds SHELL_DIR: the restart supervisor sources its picker there too
CODE_DIR = "code"  # the snapshot of the code the job runs (submit.jobfolder.snapshot)
SNAPSHOT = "snapshot.json"  # what that snapshot is: its tree, commit, dirtiness, files (codecopy)
FLIGHT = "flight"  # NCCL jobs: torch's flight recorder dumps, flight_prefix + rank
# A Distributor job's job.json names its run folder (usecases.runfolder) under this key; the run
# folder holds RUN_ENDED once its answer was read (`Job.result`): `Job.attach` and `clean` read both.
RUN_FOLDER = "run_folder"
RUN_ENDED = "ended"


def started_marker(start: int) -> str:
    """The file srun's task 0 leaves once start `start` of the step runs (the batch script
    names it `.started-${SLURM_RESTART_COUNT:-0}`: a requeued job's runs count there)."""
    return f".started-{start}"


def preempted_name(start: int, rank: int | str) -> str:  # "*": the glob of every rank's
    """PREEMPTED/preempted_name(S, R): rank R of start S has run its preemption hooks; job
    rank 0 requeues once every rank of the world has left one (bootstrap.preempt)."""
    return f"start-{start}/rank-{rank}"


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


# --------------------------------------------------------------------------- a rank's live sample
# Each rank replaces LIVE/live_name(R, K) every SLURMTORCH_LIVE_S seconds (bootstrap.live), a
# last time with ended=true when its script returned; `slurmtorch top`, `status JOBID` and
# the end of `--wait` read them (submit.follow.live). K is the start (restart_count()): each
# start of a requeued or restarted job keeps its own samples, so the end counts them all.

def live_name(rank: int, start: int | None = None) -> str:
    """A rank's sample in LIVE: below start-K/ (the start it belongs to); a name without a
    start is an older slurmtorch's, read as one start before the others."""
    return f"rank-{rank}.json" if start is None else f"start-{start}/rank-{rank}.json"


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


def summary_text(start: int, lines: list[str]) -> str:
    """STACKS/SUMMARY: which start of the step hung, then the grouped lines."""
    return f"start {start}\n" + "".join(f"{line}\n" for line in lines)


def parse_summary(text: str) -> tuple[int, list[str]] | None:
    head, _, rest = text.partition("\n")
    if not re.fullmatch(r"start [0-9]{1,9}", head):
        return None
    return int(head[6:]), [line for line in rest.splitlines() if line]


def flight_prefix(folder: str) -> str:
    """TORCH_FR_DUMP_TEMP_FILE for a job folder: torch appends the rank (FLIGHT/rank-R)."""
    return f"{folder.rstrip('/')}/{FLIGHT}/rank-"


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
# templates/reap.sh's line when a step fails first, and stops the others: what srun then says of a role's
# tasks (Killed, Terminated) is the stop, not a failure of their own. A role's step is `role NAME`
# (launchplan.role_steps); before issue 45 the line ended "stopping the other roles".
STEP_STOPPED_RE = re.compile(r"^slurmtorch: (?:role (?P<role>\w+)|.+?) exited with (?P<code>\d+); "
                             r"stopping the other (?:roles|steps)$")
# templates/sbatch.sh.j2's line when the restart supervisor ended without its SUPERVISOR_END file.
SUPERVISOR_KILLED = "slurmtorch: error: the restart supervisor was killed"
SUPERVISOR_KILLED_RE = re.compile(re.escape(SUPERVISOR_KILLED) + r" by (?P<signal>SIG\w+) \(exit (?P<code>\d+)\)")
# A --ray job's node whose Ray died or never started (bootstrap.raynode, in batch.out): the job's
# cause, which its step's exit (srun: `task 0: Exited with exit code 1`) would otherwise pass off
# as a rank's.
RAY_FAILED_RE = re.compile(r"^slurmtorch: error: Ray (?P<kind>head|worker) on (?P<node>\S+) (?P<what>died|did not start): "
                           r"(?P<why>.*)$", re.MULTILINE)


def ray_died_line(kind: str, node: str, why: str) -> str:
    return f"slurmtorch: error: Ray {kind} on {node} died: {why}\n"


def ray_not_started_line(kind: str, node: str, why: str) -> str:
    return f"slurmtorch: error: Ray {kind} on {node} did not start: {why}\n"


# --------------------------------------------------------------------------- requeue lines
# Said by the one requeue path (slurmtorch.requeue), for a preempted rank or the supervisor.

def requeueing_line(who: str, host: str, target: str, restart: int) -> str:
    return f"{who} on {host}: requeueing job {target}; it restarts as restart {restart}"


def requeued_without_line(target: str, nodes: list[str] | tuple[str, ...]) -> str:
    return f"job {target} requeued without {','.join(nodes)}"
