"""The restart supervisor: runs a job's srun step, and after a failure starts it again.

`slurmtorch sbatch --max-restarts N [--spare-nodes K] [--hang-timeout S] [--replace-straggler M]` renders its
launch as

    python -m slurmtorch.submit.supervisor --nodes 2 --ntasks 2 --max-restarts 3 [...] -- \\
        srun <srun options> <python -m slurmtorch.bootstrap ...>

in the batch script, which runs on the allocation's first node. Each start of the step
runs on `--nodes` of the job's nodes that are not excluded (the job holds K more: the
spares), with its own MASTER_PORT (and MASTER_ADDR on the site's interface) picked on
the start's first node and `restart_count()` telling the ranks which start this is. While
the step runs, with `--hang-timeout`, the ranks' heartbeats are watched
(`heartbeats.hung_ranks`) and a step with a stopped or hung rank is ended at once; when
every rank stands still inside torch instead (`heartbeats.all_waiting`: nobody to blame),
their stacks are taken and said once and the step goes on until the group's timeout.
With `--replace-straggler`, the ranks' live samples are looked at once a round (`Stragglers`),
and a rank slower than the median by the margin in 3 rounds running ends the step as a
hung one does: its node is blamed, and the next start runs on a spare without it.

Each start runs the batch script's `launch` (`-- bash -c 'launch "$@"' launch`: the job's steps),
on the nodes it gives in role order (SLURMTORCH_ROLE_NODES); a script of before issue 45 gives
`srun ...`, placed here. A role job (`--roles LAYOUT`): its failure report names each rank's role. Its roles
share the job's nodes and spares, or, in a heterogeneous job, each role draws on its own
component's (`job_pools`); such a job, out of spares of a role's kind, ends instead of
being requeued.

After a failure, `restarts.blame` names the cause and the suspect nodes from what the
step left (its part of batch.out, the ranks' new stderr, their exit notes, the hung
ranks) and `restarts.decide` says what next: start again on the healthy nodes, requeue
the job with the suspects excluded (`scontrol update ExcNodeList` + `scontrol requeue`:
Slurm then ends this batch script and starts it again elsewhere), or give up with the
cause. The history is kept in the job folder (`restarts.json`) for the next start, the
next run after a requeue, `slurmtorch status` and `--wait`.

This is the job's own edge, on the batch node: with `submit/edge/` (the login node's) and
`slurmtorch.requeue` (the one requeue path, which a preempted rank takes too), the modules
that start processes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import hostlist

from slurmtorch import events, protocol, readback, resources
from slurmtorch import requeue as requeuing
from slurmtorch.errors import BootstrapError, SlurmtorchError
from slurmtorch.roles import RoleLayout, parse_roles
from slurmtorch.submit.batchnode.record import load_state, noted, save_state, say
from slurmtorch.submit.batchnode.restarts import Pool, blame, decide, place, short_role
from slurmtorch.submit.batchnode.steprun import TERM_GRACE_S, clear_beats, run_step
from slurmtorch.submit.batchnode.slurmjob import HET_NODELIST, dead_now, heterogeneous, job_fields, requeue
from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.submit.jobfolder.batchlines import step_refusal
from slurmtorch.submit.jobfolder.failures import latest_exits, lost_nodes, parse_failures
from slurmtorch.submit.jobfolder.heartbeats import interval_for
from slurmtorch.submit.jobfolder.report import with_roles

TAIL_BYTES = 64 * 1024  # of each log a failed start left: what the diagnosis reads (ranks' reports are short)
USAGE = ("usage: python -m slurmtorch.submit.supervisor --nodes N --ntasks N --max-restarts N "
         "[--spare-nodes K] [--hang-timeout S] [--replace-straggler MARGIN] [--backend B] "
         "[--roles LAYOUT] -- bash -c 'launch \"$@\"' launch [ARGS] | -- srun ...")
OPTIONS = {"--nodes", "--ntasks", "--max-restarts", "--spare-nodes", "--hang-timeout", "--backend",
           "--replace-straggler", "--roles"}


@dataclass(frozen=True)
class Args:
    nodes: int
    ntasks: int
    max_restarts: int
    hang_timeout: float | None
    backend: str
    srun: tuple[str, ...]  # the batch script's `bash -c 'launch "$@"' ...` (before issue 45: `srun ...`)
    spare_nodes: int = 0
    replace_straggler: float | None = None
    roles: RoleLayout | None = None  # a role job's layout

    @property
    def script(self) -> bool:
        """Each start runs the script's function (`launch`; `launch_roles` before issue 45), not an srun."""
        return self.srun[:1] != ("srun",)

    @property
    def layout(self) -> tuple[int, int, int]:
        """(nodes, ntasks, spare nodes): what a requeue may shrink the job to (restarts.requeue_size)."""
        return self.nodes, self.ntasks, self.spare_nodes


def parse_args(argv: Sequence[str]) -> Args:
    """The batch script's call (pure). Raises ValueError with the usage on anything else."""
    argv = list(argv)
    if "--" not in argv:
        raise ValueError(USAGE)
    head, srun = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    values = dict(zip(head[::2], head[1::2]))
    roles = values.get("--roles")
    if len(head) % 2 or not srun or srun[0] not in ("srun", "bash") \
            or not {"--nodes", "--ntasks", "--max-restarts"} <= set(values) or set(values) - OPTIONS:
        raise ValueError(USAGE)
    hang, straggler = values.get("--hang-timeout"), values.get("--replace-straggler")
    try:
        layout = parse_roles(roles) if roles is not None else None
    except BootstrapError as exc:
        raise ValueError(f"{exc.message}\n{USAGE}") from None
    return Args(int(values["--nodes"]), int(values["--ntasks"]), int(values["--max-restarts"]),
                float(hang) if hang else None, values.get("--backend", "gloo"), tuple(srun),
                int(values.get("--spare-nodes", 0)), float(straggler) if straggler else None, layout)


def job_pools(args: Args, env: dict[str, str] | os._Environ) -> tuple[Pool, ...]:
    """Where each start's nodes come from (restarts.place): the job's nodes, `--nodes` of
    them; a heterogeneous job's roles, each its count of its own component's (pure)."""
    if args.roles is not None and heterogeneous(env):
        return tuple((tuple(hostlist.expand_hostlist(env[HET_NODELIST.format(group)])), count)
                     for group, (_, count) in enumerate(args.roles.roles))
    return ((tuple(hostlist.expand_hostlist(env["SLURM_JOB_NODELIST"])), args.nodes),)


def step_argv(args: Args, nodes: Sequence[str], start: int = 0) -> list[str]:
    """The script's `launch` as it is (its nodes in SLURMTORCH_ROLE_NODES: start_env); an srun of
    before issue 45 with this start's nodes right after `srun` (pure), and on a restart `--overlap`
    (launchplan._overlap says why: the script's steps have it always)."""
    if args.script:
        return list(args.srun)
    overlap = ["--overlap"] if start else []
    return ["srun", f"--nodes={len(nodes)}", f"--ntasks={args.ntasks}", f"--nodelist={','.join(nodes)}",
            *overlap, *args.srun[1:]]


# --------------------------------------------------------------------------- one start


def rendezvous_file(environ) -> str:
    """The job's own copy of the picker (its folder's, written at submission: protocol.SHELL); a
    script queued before the copy was made: this install's."""
    copy = os.path.join(environ.get(protocol.SHELL, ""), "rendezvous.sh")
    return copy if environ.get(protocol.SHELL) and os.path.isfile(copy) else str(resources.templates_dir() / "rendezvous.sh")


def _rendezvous(node: str, here: str, what: list[str]) -> str:
    """The batch script's picker (templates/rendezvous.sh; WHAT: its function and arguments) on
    `node` (here, or a one-task step); "": no fabric address (the ranks meet at the host name)."""
    argv = ["bash", "-c", '. "$0" && "$@"', rendezvous_file(os.environ), *what]
    if node != here:
        argv = ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={node}", "--mpi=none", "--kill-on-bad-exit=1",
                *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"picking {' '.join(what)} on {node} failed: "
                           f"{(proc.stderr.strip() or 'no output').splitlines()[-1]}")
    return (proc.stdout.strip().splitlines() or [""])[-1]


def start_env(args: Args, start: int, folder: Path, nodes: Sequence[str], here: str,
              fixed: dict[str, str]) -> dict[str, str]:
    """The environment of start `start`: which start it is (restart_count()), the file its
    task 0 leaves once running, where the world meets, and the heartbeat interval."""
    env = dict(os.environ)
    env[protocol.RESTART_COUNT] = str(start)
    env[protocol.STARTED] = str(folder / protocol.started_marker(start))
    if args.script:
        env[protocol.ROLE_NODES] = ",".join(nodes)  # every role's nodes in role order (launch, the ranks)
    if args.hang_timeout:
        env[protocol.HEARTBEAT_S] = f"{interval_for(args.hang_timeout):g}"
    # A MASTER_ADDR/PORT the site fixed is kept; otherwise picked anew on this start's first
    # node (the old port may still be held by a rank of the failed start).
    if "MASTER_PORT" not in fixed:
        env["MASTER_PORT"] = _rendezvous(nodes[0], here, ["free_port"])
    address = _rendezvous(nodes[0], here, ["fabric_address", args.backend]) if "MASTER_ADDR" not in fixed else ""
    if address:
        env["MASTER_ADDR"] = address
    elif "MASTER_ADDR" not in fixed:
        env.pop("MASTER_ADDR", None)  # the ranks then meet at the step's first node, by name
    return env


def mark_start(folder: Path, start: int, nodes: Sequence[str], after: str) -> None:
    """`slurmtorch: start N on NODES, after: CAUSE` in batch.out and at the end of every rank's
    stderr: a reader (`logs`, `--wait` streaming rank 0's) sees the restart where it happened,
    and the failure report reads only what follows the last such line (batchlines.latest_start)."""
    line = protocol.start_line(start, nodes, after)
    sys.stderr.write(line)
    sys.stderr.flush()
    for log in folder.glob("rank-*.err"):
        try:
            with open(log, "a", encoding="utf-8") as f:
                f.write(line)
        except OSError:
            pass


def _sizes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in [folder / jobdir.BATCH_OUT, *folder.glob("rank-*.err")]
            if p.exists()}


def _since(path: Path, offset: int, limit: int = TAIL_BYTES) -> str:
    """What a start wrote to `path` after `offset`, at most its last `limit` bytes: a rank's
    report and srun's lines come at the end, and a rank may write gigabytes before them."""
    try:
        with readback.open_plain(path) as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(offset, size - limit))
            return f.read(limit).decode("utf-8", errors="replace")
    except (OSError, readback.NotRead):
        return ""


# --------------------------------------------------------------------------- after a start


def _addresses(nodes: Sequence[str]) -> dict[str, str]:
    """Node address -> name, so a rank named by its peers' view of it is named by its node."""
    out = {}
    for node in nodes:
        try:
            out[socket.gethostbyname(node)] = node
        except OSError:
            pass
    return out


def verdict_of(folder: Path, sizes: dict[str, int], start: int, rc: int, started: bool,
               hung: list[tuple[int, str, str]], allocated: Sequence[str], roles: RoleLayout | None = None,
               nodes: Sequence[str] = ()):
    """`blame` over what this start left; a role job's failures with their roles (`worker 0`),
    srun's lines placed by `nodes`, this start's in role order (srun numbers each role's tasks from 0)."""
    batch = _since(folder / jobdir.BATCH_OUT, sizes.get(jobdir.BATCH_OUT, 0))
    errs = {}
    for p in folder.glob("rank-*.err"):
        idx = readback.numbered(p.name, "rank-", ".err")
        if idx is not None:
            errs[idx] = _since(p, sizes.get(p.name, 0))
    exits = {r: e for r, e in latest_exits(jobdir.exit_notes(folder)).items() if e.restart == start}
    failures = with_roles(parse_failures(batch, errs, exits, roles.rank_hosts(nodes) if roles is not None else ()),
                          roles)
    if rc == 0 and not started:
        rc = 1
    return blame(failures, lost_nodes(batch), hung, _addresses(allocated), code=rc, refusal=step_refusal(batch),
                 roles=roles)


def start_watcher(args: Args, here: str, nodes: Sequence[str]) -> subprocess.Popen | None:
    """The batch node's watcher (batchwatch.py) as a one-task step on the last of `nodes` that
    is not this one; None for a one-node job (Slurm requeues that one itself).

    `--overlap`: it shares the node with the ranks' steps and holds nothing back from them.
    Its output goes nowhere: it writes its few lines to batch.out itself, since srun, here,
    is gone when it has something to say; srun's own lines about it (its node's failure)
    would read as the ranks' step's.
    """
    others = [n for n in nodes if n != here]
    if not others:
        return None
    argv = ["srun", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={others[-1]}", "--mpi=none",
            "--input=none", "--output=/dev/null", "--error=/dev/null",
            sys.executable, "-m", "slurmtorch.submit.batchnode.batchwatch", "--batch-host", here,
            "--max-restarts", str(args.max_restarts)]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()


class Watcher:
    """The batch node's watcher step while this supervisor runs (start_watcher)."""

    def __init__(self, args: Args, here: str):
        self.args, self.here = args, here
        self.proc: subprocess.Popen | None = None

    def ensure(self, healthy: Sequence[str]) -> None:
        """Before each start: a watcher on one of the `healthy` nodes, unless one still runs."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = start_watcher(self.args, self.here, healthy)

    def stop(self) -> None:
        stop(self.proc)


def supervise(args: Args) -> int:
    here = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    watcher = Watcher(args, here)
    try:
        return _supervise(args, here, watcher)
    finally:
        watcher.stop()


def _supervise(args: Args, here: str, watcher: Watcher) -> int:
    folder = Path(os.environ[protocol.JOB_DIR])
    pools = job_pools(args, os.environ)
    het = len(pools) > 1
    roles = tuple(role for role, _ in args.roles.roles) if het and args.roles is not None else ()
    allocated = list(dict.fromkeys(n for pool, _ in pools for n in pool))
    fixed = {k: os.environ[k] for k in ("MASTER_ADDR", "MASTER_PORT") if os.environ.get(k)}
    state = load_state(folder)
    while True:
        placed = place(pools, state.excluded)
        start = state.starts
        state = replace(state, starts=start + 1)
        save_state(folder, state, args.max_restarts)
        if placed is None and het:
            short = short_role(pools, state.excluded, roles) or "a role has fewer healthy nodes of its kind than it needs"
            say(f"start {start}: {short}; not starting (a heterogeneous job is not requeued)")
            return 1
        if placed is None:  # a requeued job that Slurm placed on a node excluded since
            healthy = [n for n in allocated if n not in state.excluded]
            say(f"start {start}: {len(healthy)} healthy nodes of the {args.nodes} needed; requeueing")
            return 0 if requeue(requeuing.target(os.environ), state.excluded, args.layout,
                                "placed on a node excluded since") and _wait_for_requeue() else 1
        nodes = list(placed)
        # The watcher runs on one of the batch script's nodes (a heterogeneous job's first component's).
        watcher.ensure([n for n in pools[0][0] if n not in state.excluded])
        env = start_env(args, start, folder, nodes, here, fixed)
        events.append(folder, "launched", start=start, nodes=nodes)
        clear_beats(folder)
        if start:
            last = state.events[-1] if state.events else None
            mark_start(folder, start, nodes, last.cause if last and last.start == start - 1
                       else "the job was requeued (preempted?)")
        sizes = _sizes(folder)
        rc, hung = run_step(step_argv(args, nodes, start), env, folder, args.hang_timeout, args.ntasks, start,
                            args.replace_straggler, group=args.script)
        started = Path(env[protocol.STARTED]).exists()
        Path(env[protocol.STARTED]).unlink(missing_ok=True)
        if rc == 0 and started and not hung:
            return 0
        verdict = verdict_of(folder, sizes, start, rc, started, hung, allocated, args.roles, nodes)
        plan = decide(state, verdict, allocated, args.nodes, args.max_restarts, now=time.time(),
                      dead=dead_now(requeuing.target(os.environ), allocated, listed=not het), pools=pools,
                      requeue=not het, roles=roles)
        state = plan.state
        noted(folder, plan, args.max_restarts)
        if plan.action == "restart":
            continue
        if plan.action == "requeue" and requeue(requeuing.target(os.environ), plan.nodes, args.layout,
                                                verdict.cause) and _wait_for_requeue():
            return 0
        return verdict.code or rc or 1


def _wait_for_requeue(timeout: float = 120) -> bool:
    """Slurm ends this batch script once the requeue is done; until then, wait (bounded).
    Once the job has left RUNNING this run is over: where Slurm tracks processes by their
    parents (proctrack/linuxproc, the testbed's), this one, ignoring TERM, outlived the
    batch shell and its KILL, and stayed 120 s (the soak found it)."""
    deadline = time.monotonic() + timeout
    job = requeuing.target(os.environ)
    while time.monotonic() < deadline:
        time.sleep(1)
        if job_fields(job).get("JobState", "RUNNING") not in ("RUNNING", "SUSPENDED"):
            return True
    say("error: the job was requeued but this run was not ended")
    return False


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    try:
        return supervise(args)
    except (OSError, RuntimeError, subprocess.SubprocessError, SlurmtorchError) as exc:
        say(f"error: the restart supervisor failed: {exc}")
        return 1

