"""A `--ray` job's node: Ray started, watched and stopped on one node of the allocation.

Each Ray step of a `--ray` batch script (submit/launch/raycluster.py) runs this with the job's
python, in the job's container if it has one, as the ranks run the bootstrap:

    python -m slurmtorch.bootstrap.raynode head   HOST:PORT --cpus C --gpus G --backend B --deadline S [--role R]
    python -m slurmtorch.bootstrap.raynode worker HOST:PORT --cpus C --gpus G --backend B --deadline S [--role R]
    python -m slurmtorch.bootstrap.raynode driver HOST:PORT --nodes N --deadline S [--import-from DIR] (SCRIPT | -m MODULE) ARGS
    python -m slurmtorch.bootstrap.raynode stop   HOST:PORT

`head` and `worker` run `ray start` (not `--block`) in a session of their own, then watch
that session's raylet (and the head's GCS) every POLL_S: `ray start --block` treats a raylet
ended by SIGTERM as a clean exit and would go on blocking with no node behind it. A vital
process gone while the job runs is this node's death: one line naming the node, exit 1,
and the batch script ends the job; so is a Ray that never started (no ray in the job's python,
or `ray start` failing: the line says why, where before it was only in ray-NODE.out). On SIGTERM (the batch script's stop, passed on by srun)
every process of that session is ended, TERM then KILL, and Ray's folder removed: only this
job's Ray, where `ray stop` would end every Ray of the user's on the node.
A loaded node meets Ray's fixed start-up waits: the raylet ends when its agents take over 15 s
to start, and `ray start` gives up on a node not registered after 30 s. A worker whose raylet
ended starting is started again (STARTS, within --deadline); a `ray start` that gave up while
the node's vital processes run is a node that registers late, which the driver waits for
(--hang-timeout). The head is not started again: its GCS is the cluster's.
Each node's own address is on the site's fabric interface (rendezvous.site_address, as a
rank's MASTER_ADDR), else its host name's: a worker that let Ray pick would take the
interface of its default route, the management network on most clusters.
Ray's other ports are this job's too (`RayPorts`): where Ray has a fixed default (the
dashboard's 8265 and the client server's 10001 on the head, the dashboard agent's 52365 and
the workers' 10002-19999 on every node), two jobs sharing a node, or a user's own Ray there,
would meet on it: the second dashboard and agent fail to bind, and two client servers both
listen on 10001 (SO_REUSEPORT), each taking half of the connections. Each is picked free on
the node as MASTER_PORT is (rendezvous.free_port), the workers' left to the kernel; the
head's line in batch.out names its dashboard where it listens.

`driver` (raydriver.py) waits for the head to answer and for all N nodes to join (the deadline),
then runs the script in this process, as `python SCRIPT` would, with RAY_ADDRESS set. `stop`
runs once per node at the end: anything of this job's Ray still there is ended.
Only `driver` imports ray, lazily: `slurmtorch --help` and rendering never do.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from slurmtorch import protocol
from slurmtorch.bootstrap.rendezvous import free_port, host_address, site_address, split_address, wait_listening
from slurmtorch.bootstrap.raysession import GRACE_S, SESSION_FILE, end_processes, recorded, session_processes
from slurmtorch.errors import BootstrapError

POLL_S = 0.5  # how often a node's raylet is looked at: its death ends the job this much later at most
# Ray's unix sockets live under its temp folder (session_*/sockets/plasma_store, ~62 characters
# more), and a socket's path holds at most 107: the folder is short, in /tmp, one per job and node.
MAX_TEMP = 107 - 64
RAY_LOG = "ray-{node}.out"  # in the job's folder: a node's `ray start` output, for the user alone
VITAL = {"head": ("gcs_server", "raylet"), "worker": ("raylet",)}
# How long `ray start` waits for its node to register with the GCS before it exits 1 (Ray 2.60's
# node.py, fixed: no option or variable changes it). A raylet registers once its Python agents
# have started: on a loaded node that took longer, and the raylet registered all the same.
RAY_START_WAIT_S = 30
# `ray start` tries a worker gets: its raylet gives its agents 15 s to start (Ray 2.60, fixed:
# ray-project/ray#65983) and ends when they take longer, as on a loaded node; a try again finds
# the node less loaded (the cluster's other processes have started) and Ray's modules compiled.
STARTS = 3
# The files in Ray's session folder in which a node's agents write their ports, each name
# followed by the node's id: its raylet reads them all before it registers the node.
AGENT_PORT_FILES = ("metrics_agent_port", "metrics_export_port", "runtime_env_agent_port", "dashboard_agent_listen_port")
DASHBOARD_HOST = "127.0.0.1"  # Ray's default: its dashboard runs jobs for whoever reaches it, so not on the fabric
USAGE = ("usage: python -m slurmtorch.bootstrap.raynode (head|worker) HOST:PORT --cpus C --gpus G --backend B "
         "--deadline S [--role R] | driver HOST:PORT --nodes N --deadline S [--import-from DIR] (SCRIPT | -m MODULE) "
         "[ARGS...] | stop HOST:PORT")


def say(line: str) -> None:
    sys.stderr.write(f"slurmtorch: {line}\n")
    sys.stderr.flush()


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".", 1)[0]


def temp_dir() -> str:
    """This job's Ray folder on this node (per node too: nodes may share a /tmp)."""
    path = f"/tmp/slurmtorch-ray-{os.environ.get('SLURM_JOB_ID', os.getpid())}-{node_name()}"
    if len(path) > MAX_TEMP:
        raise BootstrapError(f"Ray's folder {path} is longer than {MAX_TEMP} characters, too long for Ray's sockets")
    return path


def ray_log(node: str) -> str:
    """Where this node's `ray start` writes: the job's folder (RAY_LOG), else /dev/null."""
    folder = os.environ.get(protocol.JOB_DIR)
    return os.path.join(folder, RAY_LOG.format(node=node)) if folder else os.devnull


def last_line(path: str, tail: int = 4096) -> str:
    """The last line with words of a log (its last `tail` bytes only), '' when none."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
            text = f.read(tail).decode(errors="replace")
    except OSError:
        return ""
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def stop_here() -> None:
    """The end of the job on this node: its raynode told to stop (it ends its Ray and leaves
    with 0: srun's step ends quietly, where a signal through srun would end it with errors),
    then whatever of this job's Ray is left ended, and its folder removed."""
    temp = temp_dir()
    sid, watcher = recorded(temp)
    if watcher is not None:
        try:
            os.kill(watcher, signal.SIGTERM)
            deadline = time.monotonic() + GRACE_S + 5
            while time.monotonic() < deadline:
                os.kill(watcher, 0)
                time.sleep(0.05)
        except OSError:
            pass  # gone: it has stopped its Ray
    end_processes(sid, temp)


@dataclass(frozen=True)
class RayPorts:
    """The ports of this node's Ray that Ray would otherwise take at a fixed default, picked
    free here: the dashboard agent's (every node), the dashboard's and the client server's
    (the head's; the client server's only where Ray can run one: its grpc is installed)."""

    agent: int
    dashboard: int | None = None
    client: int | None = None


def pick_ports(kind: str, taken: int) -> RayPorts:
    """Free ports on this node for `kind`'s RayPorts, none of them `taken` (the GCS's) or twice."""
    wanted = 3 if kind == "head" else 1
    ports: list[int] = []
    while len(ports) < wanted:
        port = free_port()
        if port != taken and port not in ports:
            ports.append(port)
    if kind != "head":
        return RayPorts(agent=ports[0])
    # Ray refuses a client server port without its client's grpc (`ray[client]`); it runs none then.
    client = ports[2] if importlib.util.find_spec("grpc") is not None else None
    return RayPorts(agent=ports[0], dashboard=ports[1], client=client)


def ray_start_argv(kind: str, head: tuple[str, int], own_ip: str, opts: dict[str, str], temp: str,
                   ports: RayPorts) -> list[str]:
    """`ray start` for this node, with the job's python (Ray's CLI module: `ray` need not be on PATH)."""
    argv = [sys.executable, "-m", "ray.scripts.scripts", "start", f"--node-ip-address={own_ip}",
            f"--num-cpus={opts['--cpus']}", f"--num-gpus={opts['--gpus']}", f"--temp-dir={temp}",
            # Compute nodes are often offline: Ray would otherwise try to report usage.
            "--disable-usage-stats",
            # Workers on ports the kernel gives (0: Ray's "random ports"), not from the
            # 10002-19999 that every Ray on the node shares by default.
            "--min-worker-port=0", "--max-worker-port=0",
            f"--dashboard-agent-listen-port={ports.agent}"]
    if opts.get("--role"):  # a role job's node: the role, for the driver to place work by (role_resource)
        argv.append(f"--resources={json.dumps({role_resource(opts['--role']): 1})}")
    if kind != "head":
        return [*argv, f"--address={head[0]}:{head[1]}"]
    # The dashboard left to Ray's default (on where `ray[default]` is installed; a port it
    # cannot bind leaves the head running without it), on a port of its own.
    argv += ["--head", f"--port={head[1]}", f"--dashboard-host={DASHBOARD_HOST}", f"--dashboard-port={ports.dashboard}"]
    return [*argv, f"--ray-client-server-port={ports.client}"] if ports.client is not None else argv


def started(kind: str, returncode: int, alive: Collection[str]) -> bool:
    """Whether this node's Ray runs once `ray start` has ended with `returncode` (`alive`: the
    names of its session's processes then): it ended with 0, or it gave up on its node's
    registration (RAY_START_WAIT_S, Ray's own and fixed) while every vital process of the node
    still runs: a loaded node's raylet, slow to start its agents, registers later all the same."""
    return returncode == 0 or all(name in alive for name in VITAL[kind])


def late_note(kind: str, returncode: int, deadline: float) -> str:
    """What batch.out adds to the line of a node whose `ray start` gave up on it (started)."""
    vital = " and ".join(VITAL[kind])
    return (f"it registers late: ray start stopped waiting after Ray's own {RAY_START_WAIT_S} s and exited with "
            f"{returncode}, its {vital} running; the driver waits up to {deadline:g} s (--hang-timeout) for every node")


def role_resource(role: str) -> str:
    """The Ray resource a role job's node has one of (`role:worker`): `ray.remote(resources=
    {"role:worker": 0.1})` places a task on the workers' nodes, as Ray's `accelerator_type:X` does."""
    return f"role:{role}"


def up_line(kind: str, node: str, own_ip: str, head_port: int, dashboard: int | None) -> str:
    """This node's line in batch.out once its Ray is up; the head's names its dashboard where
    it listens (`dashboard`: its port then), and how to reach it from the login node."""
    if kind != "head":
        return f"Ray {kind} on {node} up at {own_ip}"
    line = f"Ray head on {node} up at {own_ip}:{head_port}"
    if dashboard is None:
        return f"{line}; no dashboard (Ray runs one where ray[default] is installed; why not: {ray_log(node)})"
    return (f"{line}; its dashboard at http://{DASHBOARD_HOST}:{dashboard} on {node} "
            f"(from the login node: ssh -L {dashboard}:{DASHBOARD_HOST}:{dashboard} {node})")


@dataclass(frozen=True)
class Start:
    """One `ray start` of this node: its process, the session its Ray runs in (the process's
    own: Ray calls setpgrp, never setsid), and the ports picked for it."""

    process: subprocess.Popen
    sid: int
    ports: RayPorts


def start_ray(kind: str, head: tuple[str, int], own_ip: str, opts: dict[str, str], temp: str) -> Start:
    """`ray start` in a session of its own, its output to ray-NODE.out, the session recorded for `stop`."""
    os.makedirs(temp, mode=0o700, exist_ok=True)
    ports = pick_ports(kind, head[1])
    with open(ray_log(node_name()), "ab") as log:  # Ray's banner there; our own lines go to batch.out
        process = subprocess.Popen(ray_start_argv(kind, head, own_ip, opts, temp, ports), stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    with open(os.path.join(temp, SESSION_FILE), "w") as f:  # for `stop`: Ray's workers rename themselves
        f.write(f"{process.pid} {os.getpid()}\n")
    return Start(process, process.pid, ports)


def await_start(kind: str, start: Start, temp: str, stopping: list[int]) -> str:
    """How this node's `ray start` ended: "up"; "late" (it gave up on a node whose vital processes
    run: `started`); "unready" (its raylet ended waiting for its agents: `ended_unready`); "died"
    (its raylet ended past that wait, the node perhaps joined); "failed"; or "stopping" (SIGTERM
    came first). A raylet that ends while `ray start` still waits for it is not waited for."""
    polls = 0
    while start.process.poll() is None and not stopping:
        # /proc read every POLL_S, the exit looked at every 0.1 s
        if polls % round(POLL_S / 0.1) == 0 and (ended := raylet_ended(start.sid, temp)):
            return ended
        polls += 1
        time.sleep(0.1)
    if stopping:
        return "stopping"
    if start.process.returncode == 0:
        return "up"
    if started(kind, start.process.returncode, set(session_processes(start.sid, temp).values())):
        return "late"
    return raylet_ended(start.sid, temp) or "failed"


def raylet_ended(sid: int, temp: str) -> str | None:
    """"unready" when this node's raylet ran (it wrote its log in Ray's session folder here) and
    ended before its agents had written their ports there: it ended in Ray's fixed 15 s wait for
    them (ray-project/ray#65983), before it could register, as on a loaded node; "died" when it
    ended past that wait; None while it runs, or before it ran."""
    if not any(size_of(path) for path in glob.glob(os.path.join(temp, "session_*", "logs", "raylet.out"))):
        return None
    if "raylet" in session_processes(sid, temp).values():
        return None
    # Looked at once it has ended: a port file missing now was missing before its end.
    ready = all(glob.glob(os.path.join(temp, "session_*", f"{name}_*")) for name in AGENT_PORT_FILES)
    return "died" if ready else "unready"


def size_of(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def run_node(kind: str, head_text: str, opts: dict[str, str]) -> int:
    """Start this node's Ray, watch it, stop it when told (SIGTERM); 1 when it died or never started.
    A worker whose raylet dies starting is started again (STARTS) while --deadline lasts."""
    node, temp, deadline = node_name(), temp_dir(), float(opts["--deadline"])
    if importlib.util.find_spec("ray") is None:  # `ray start` would say so only in its log
        sys.stderr.write(protocol.ray_not_started_line(kind, node, f"its python ({sys.executable}) has no ray "
                                                                   "(No module named 'ray')"))
        return 1
    head = split_address(head_text)
    own_ip = head[0] if kind == "head" else (
        site_address(os.environ, socket.gethostname(), opts["--backend"]) or host_address(node))
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    until = time.monotonic() + deadline
    if kind == "worker" and not wait_listening(head[0], head[1], deadline, poll_s=0.1):
        say(f"error: Ray worker on {node}: the head at {head[0]}:{head[1]} did not answer within {deadline:g} s")
        return 1
    for attempt in range(1, STARTS + 1):
        start = start_ray(kind, head, own_ip, opts, temp)
        try:
            outcome = await_start(kind, start, temp, stopping)
            if outcome == "stopping":
                return 0
            unready = (f"its raylet ended before its agents had started (Ray gives them 15 s, fixed, which a loaded "
                       f"node can take; ray start's output: {ray_log(node)})")
            # Not the head again: its GCS is the cluster's, which other nodes and the driver may have joined.
            if outcome == "unready" and kind == "worker" and attempt < STARTS and time.monotonic() < until \
                    and not stopping:
                say(f"Ray worker on {node}: {unready}; starting it again, try {attempt + 1} of {STARTS}")
                continue
            if outcome in ("unready", "failed"):
                said = last_line(ray_log(node))
                why = unready if outcome == "unready" else (f"ray start exited with {start.process.returncode}"
                                                             f"{f': {said}' if said else ''} (its output: {ray_log(node)})")
                sys.stderr.write(protocol.ray_not_started_line(kind, node, why))
                return 1
            if outcome == "died":
                return died(kind, node, "raylet", temp)
            # `ray start` returns once the dashboard listens, or has given up on it.
            dashboard = start.ports.dashboard if start.ports.dashboard and wait_listening(
                DASHBOARD_HOST, start.ports.dashboard, 0) else None
            line = up_line(kind, node, own_ip, head[1], dashboard)
            say(line if outcome == "up" else f"{line}; {late_note(kind, start.process.returncode, deadline)}")
            return watch(kind, node, start.sid, temp, stopping)
        finally:
            end_processes(start.sid, temp)
    return 1


def watch(kind: str, node: str, sid: int, temp: str, stopping: list[int]) -> int:
    """Until SIGTERM (0), or until a vital process of this node's Ray ends (1, its line in batch.out)."""
    while not stopping:
        alive = set(session_processes(sid, temp).values())
        gone = [name for name in VITAL[kind] if name not in alive]
        if gone and not stopping:
            return died(kind, node, gone[0], temp)
        time.sleep(POLL_S)
    return 0


def died(kind: str, node: str, process: str, temp: str) -> int:
    """This node's death, in batch.out: 1."""
    sys.stderr.write(protocol.ray_died_line(kind, node, f"its {process} ended (Ray's logs: {temp}/session_latest/logs "
                                                        f"on {node})"))
    sys.stderr.flush()
    return 1


def parse(argv: Sequence[str]) -> tuple[str, str, dict[str, str], list[str]]:
    """(kind, HOST:PORT, options, program) from the batch script's words (pure)."""
    if len(argv) < 2 or argv[0] not in ("head", "worker", "driver", "stop"):
        raise ValueError(USAGE)
    kind, head, rest = argv[0], argv[1], list(argv[2:])
    wanted = {"head": ("--cpus", "--gpus", "--backend", "--deadline"), "worker": ("--cpus", "--gpus", "--backend",
                                                                                "--deadline"),
              "driver": ("--nodes", "--deadline"), "stop": ()}[kind]
    opts: dict[str, str] = {}
    optional = ("--import-from",) if kind == "driver" else ("--role",)
    while rest[:1] and rest[0] in (*wanted, *optional) and len(rest) > 1:
        opts[rest[0]] = rest[1]
        rest = rest[2:]
    if set(wanted) - set(opts) or (kind == "driver") != bool(rest) or rest[:1] == ["-m"] and len(rest) < 2:
        raise ValueError(USAGE)
    return kind, head, opts, rest


def main(argv: Sequence[str] | None = None) -> int:
    try:
        kind, head, opts, program = parse(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    try:
        if kind == "driver":
            from slurmtorch.bootstrap.raydriver import drive  # lazy: the driver step's alone

            return drive(head, opts, program)
        if kind == "stop":
            stop_here()
            return 0
        return run_node(kind, head, opts)
    except BootstrapError as exc:
        say(f"error: Ray on {node_name()}: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
