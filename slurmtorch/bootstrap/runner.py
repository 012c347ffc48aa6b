"""The in-rank entry point: `python -m slurmtorch.bootstrap` and `slurmtorch.init()`.

Whatever started this process (mpirun, srun with or without MPI, torchrun, nothing),
derive the world, export the env:// / NODE_RANK / CLUSTER_SPEC / TF_CONFIG contract,
set up `torch.distributed` (unless --no-init), then run the user's SCRIPT or -m MODULE
as `__main__`.

Decisions, with their why:

- Scripts written for torchrun call `init_process_group` themselves. We wrap
  `torch.distributed.init_process_group` (also as `distributed_c10d.init_process_group`
  and the name `torch.distributed.device_mesh` imported, which `init_device_mesh`
  calls) when torch.distributed is first imported:
  * our group already exists (default): the script's call is a no-op when it asks for
    the same backend (or none) and a compatible rank/world size; a `timeout=` other
    than ours is applied to our group in place (the script's long barriers must not
    fail at our 600 s); a different backend (e.g. `--backend gloo` but the script says
    "cpu:gloo,cuda:nccl"), or `pg_options`/`device_id`, replaces our group with the
    script's, re-using our store under a fresh prefix so no port is rebound; a
    different rank or world size is an error;
  * no group yet (`--no-init`): the call goes through with our timeout added when the
    script passed none (gloo's default is 30 minutes of a hung job), and rank 0's port
    reservation is released once torch's store holds the port.
  The wrapper is installed by an import hook, so `--no-init` costs nothing for a
  script that never imports torch.
- An exception in any rank prints `rank R on HOST failed:` and the traceback (a
  BootstrapError: its one-line message and tip), then ends the whole job at once:
  MPI_Abort under MPI (mpirun and srun then kill every rank), otherwise an immediate
  exit 1 (torchrun kills the others; under srun use --kill-on-bad-exit=1, else the
  peers fail on the closed connection within seconds). A failing rank skips atexit
  handlers: promptness first. SystemExit codes pass through (a non-zero one ends the
  job the same way, with that code). The process group is destroyed at a normal exit.
- Always a timeout: `--timeout` (default 600 s) goes to init_process_group.
- torch is imported only when a group is wanted (or by the script itself).
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()  # phase timings (SLURMTORCH_TIMINGS) count from here
_C0 = time.process_time()

import math  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass, field

from slurmtorch.bootstrap import rankinfo
from slurmtorch.backends import BACKENDS
from slurmtorch.errors import BootstrapError
from slurmtorch.roles import ROLE_ORDER
from slurmtorch.bootstrap.rankinfo import RankInfo

__all__ = ["init", "main", "RankInfo"]

DEFAULT_TIMEOUT = 600.0
FROM = ("auto", "mpi", "slurm", "env", "torchrun", "single")

USAGE = ("usage: python -m slurmtorch.bootstrap [--backend auto|nccl|gloo|mpi] [--timeout SECONDS] "
         "[--no-init] [--from auto|mpi|slurm|env|torchrun|single] [--init-args[=rank|node]] [--role ROLE] "
         "(SCRIPT | -m MODULE) [ARGS...]")

HELP = USAGE + """

Derive this rank's world from the launcher (mpirun, srun, torchrun, or none), export
MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/NODE_RANK/GROUP_RANK,
CLUSTER_SPEC and TF_CONFIG, initialise torch.distributed, and run SCRIPT (or -m MODULE)
as __main__. Without SCRIPT: a self-check that prints the world and an all_reduce.

  --backend B       auto (nccl with CUDA+NCCL, else gloo) | nccl | gloo | mpi
  --timeout S       process-group timeout in seconds (default 600)
  --no-init         only set the environment; the script calls init_process_group
  --from F          where the world comes from: auto | mpi | slurm | env | torchrun | single
  --init-args       append --init_method tcp://ADDR:PORT --rank R --world_size N
  --init-args=node  the same per node (node rank / node count; one task per node;
                    implies --no-init, the script starts its own processes)
  --role ROLE       this srun step runs ROLE of a role job (master|chief|worker|ps|
                    evaluator; layout in $SLURMTORCH_ROLES); ps and evaluator ranks
                    get the contracts but no process group
"""


@dataclass
class Options:
    backend: str = "auto"
    timeout: float = DEFAULT_TIMEOUT
    init: bool = True
    source: str = "auto"
    init_args: str | None = None
    role: str | None = None
    script: str | None = None
    module: str | None = None
    args: list[str] = field(default_factory=list)


class UsageError(BootstrapError):
    exit_code = 2


# About 31 years: longer than any job runs, far below where torch's microsecond count of
# a timedelta overflows (~9.2e12 s, which gloo then rejects as a negative timeout).
MAX_TIMEOUT = 1e9


def timeout_problem(seconds: float) -> str | None:
    """Pure: why `seconds` cannot be a process-group timeout, or None when it can."""
    if not math.isfinite(seconds) or seconds <= 0:
        return ("must be a positive, finite number of seconds "
                "(a process group without a timeout can hang forever)")
    if seconds > MAX_TIMEOUT:
        return f"must be at most {MAX_TIMEOUT:.0f} seconds"
    return None


def parse_args(argv: list[str]) -> Options:
    """Our options stop at SCRIPT or -m MODULE; everything after belongs to the script."""
    opts = Options()
    i = 0

    def value(name: str, inline: str | None) -> str:
        nonlocal i
        if inline is not None:
            return inline
        if i + 1 >= len(argv):
            raise UsageError(f"{name} needs a value", tip=USAGE)
        i += 1
        return argv[i]

    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            if i + 1 < len(argv):
                opts.script, opts.args = argv[i + 1], list(argv[i + 2:])
            break
        if arg == "-m":
            if i + 1 >= len(argv):
                raise UsageError("-m needs a module name", tip=USAGE)
            opts.module, opts.args = argv[i + 1], list(argv[i + 2:])
            break
        if arg in ("-h", "--help"):
            raise SystemExit(print(HELP) or 0)
        if not arg.startswith("-") or arg == "-":
            opts.script, opts.args = arg, list(argv[i + 1:])
            break
        name, eq, inline = arg.partition("=")
        inline = inline if eq else None
        if name == "--backend":
            opts.backend = value(name, inline)
            if opts.backend not in BACKENDS:
                raise UsageError(f"--backend {opts.backend!r} is not one of {', '.join(BACKENDS)}")
        elif name == "--timeout":
            text = value(name, inline)
            try:
                opts.timeout = float(text)
            except ValueError:
                raise UsageError(f"--timeout {text!r} is not a number of seconds") from None
            problem = timeout_problem(opts.timeout)
            if problem:
                raise UsageError(f"--timeout {text}: {problem}")
        elif name == "--no-init":
            opts.init = False
        elif name == "--from":
            opts.source = value(name, inline)
            if opts.source not in FROM:
                raise UsageError(f"--from {opts.source!r} is not one of {', '.join(FROM)}")
        elif name == "--role":
            opts.role = value(name, inline)
            if opts.role not in ROLE_ORDER:
                raise UsageError(f"--role {opts.role!r} is not one of {', '.join(ROLE_ORDER)}")
        elif name == "--init-args":
            # Only the `=` form takes a value: `--init-args train.py` must not eat the script.
            opts.init_args = inline or "rank"
            if opts.init_args not in ("rank", "node"):
                raise UsageError(f"--init-args={opts.init_args} is not rank or node")
            if opts.init_args == "node":
                opts.init = False
        else:
            raise UsageError(f"unknown option {arg!r}", tip=USAGE)
        i += 1
    return opts


# ------------------------------------------------------------------ state

_STATE: dict = {}
_MARKS: list[tuple[str, float]] = [("start", _T0)]
_CPU_MARKS: list[tuple[str, float]] = [("start", _C0)]


def _mark(name: str) -> None:
    _MARKS.append((name, time.perf_counter()))
    _CPU_MARKS.append((name, time.process_time()))


def note_started(environ=os.environ) -> None:
    """Leave the file the batch script names in SLURMTORCH_STARTED (srun's task 0 only).

    srun exits 0 when its step never launched (slurmstepd failing to set up PMIx, say):
    this file is how the batch script tells that apart from a job whose ranks all ended
    well. Best effort: a folder this process cannot write leaves no file, and the batch
    script only checks where the ranks see the job folder (no container).
    """
    path = environ.get("SLURMTORCH_STARTED")
    if path and environ.get("SLURM_PROCID") == "0":
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
        except OSError:
            pass


def phase_durations(marks: list[tuple[str, float]], external: dict[str, float]) -> dict[str, float]:
    """Pure: seconds per phase from consecutive marks, with MPI's and torch's own costs split out.

    `external` holds durations measured inside a phase that are not ours (MPI_Init inside
    detection, `import torch` inside init); they are moved to their own keys.
    """
    out = {}
    for (_, a), (name, b) in zip(marks, marks[1:]):
        out[name] = b - a
    if "detect" in out:
        for key in ("mpi_init", "agree"):
            if key in external:
                out["detect"] -= external[key]
                out[key] = external[key]
    if "init_process_group" in out and "import_torch" in external:
        out["init_process_group"] -= external["import_torch"]
        out["import_torch"] = external["import_torch"]
    return out


def _write_timings(info: RankInfo) -> None:
    """With SLURMTORCH_TIMINGS=DIR, each rank writes DIR/rank-R.json (for benchmarks/phases.py)."""
    folder = os.environ.get("SLURMTORCH_TIMINGS")
    if not folder:
        return
    import json

    from slurmtorch.bootstrap import mpi

    external = {k: v for k, v in mpi.TIMINGS.items()}
    external.update(_STATE.get("timings", {}))
    with open(os.path.join(folder, f"rank-{info.rank}.json"), "w") as fh:
        # Wall time, and this process's CPU time for the same phases: with more ranks than
        # cores, wall time grows with the oversubscription while the work does not.
        json.dump({"rank": info.rank, "world_size": info.world_size,
                   "phases": phase_durations(_MARKS, external),
                   "cpu": phase_durations(_CPU_MARKS, {k[:-4]: v for k, v in external.items()
                                                       if k.endswith("_cpu")})}, fh)


def _hostname() -> str:
    return socket.gethostname()


def _release_port() -> None:
    reservation = _STATE.pop("reservation", None)
    if reservation is not None:
        reservation.close()


def derive(source: str = "auto", backend: str = "auto", env=None, hostname: str | None = None,
           role: str | None = None):
    """The world and (on the master) the held MASTER_PORT; the side-effecting edge of rankinfo."""
    from slurmtorch.bootstrap import rendezvous

    environ = os.environ if env is None else env
    hostname = hostname or _hostname()
    if role is not None:
        info = rankinfo.from_roles(environ, hostname, role)
        reservation = None
        if info.rank == 0 and info.in_group:
            reservation = rendezvous.reserve_port(info.master_port)
        else:
            rendezvous.check_reachable(rendezvous.host_address(info.master_addr), info.layout.total)
        return info, reservation
    src = rankinfo.detect_source(environ) if source == "auto" else source
    backend_hint = "nccl" if backend == "nccl" else "gloo"
    reservation = None
    if src == "mpi":
        from slurmtorch.bootstrap import mpi

        mpi.apply_mca_defaults(environ, backend)
        info, reservation = mpi.from_comm(dict(environ), hostname, backend_hint)
    elif src == "slurm":
        info = rankinfo.from_env(environ, hostname, "slurm")
        if info.rank == 0:
            reservation = rendezvous.reserve_port(info.master_port)
        elif info.node_rank != 0:
            rendezvous.check_reachable(rendezvous.host_address(info.master_addr), info.num_nodes)
    elif src in ("env", "torchrun"):
        info = rankinfo.from_env(environ, hostname, src)
    elif src == "single":
        port = environ.get("MASTER_PORT", "").strip()
        reservation = rendezvous.reserve_port(int(port) if port.isdigit() else 0)
        addr = environ.get("MASTER_ADDR", "").strip() or "127.0.0.1"
        info = rankinfo.single(hostname, addr, reservation.port, environ)
    else:
        raise BootstrapError(f"unknown world source {src!r}", tip=f"use one of {', '.join(FROM)}")
    if src != "slurm":
        rendezvous.check_reachable(info.master_addr, info.num_nodes)
    return info, reservation


def _cpus_available() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def thread_defaults(environ, local_world_size: int, cpus: int) -> dict[str, str]:
    """Pure: OMP_NUM_THREADS for ranks sharing a node, unless the user set it.

    Like torchrun, which sets 1 when several ranks share a node: N ranks each starting
    a thread per core oversubscribe the node badly. We give each rank its share:
    srun's SLURM_CPUS_PER_TASK when present, else the CPUs this process may use
    divided by the ranks on the node. Must be set before torch is imported.
    """
    if "OMP_NUM_THREADS" in environ or local_world_size <= 1:
        return {}
    per_task = environ.get("SLURM_CPUS_PER_TASK", "").strip()
    threads = int(per_task) if per_task.isdigit() and int(per_task) > 0 else max(1, cpus // local_world_size)
    return {"OMP_NUM_THREADS": str(threads)}


def choose_backend(requested: str, cuda: bool, nccl: bool, gloo: bool, mpi: bool, version: str = "") -> str:
    """Pure: the backend to use, or one clear line about what this torch build lacks."""
    if requested == "auto":
        if cuda and nccl:
            return "nccl"
        if gloo:
            return "gloo"
        raise BootstrapError(f"torch {version} has neither NCCL with CUDA nor gloo", tip="install a torch build with gloo")
    have = {"nccl": nccl, "gloo": gloo, "mpi": mpi}
    if requested in have and not have[requested]:
        tips = {"nccl": "use --backend gloo, or a CUDA build of torch on GPU nodes",
                "mpi": "use --backend gloo/nccl; torch from PyPI has no MPI backend (build torch against your MPI)",
                "gloo": "use --backend nccl/mpi, or a torch build with gloo"}
        raise BootstrapError(f"backend {requested!r} is not built into this torch ({version})", tip=tips[requested])
    if requested == "nccl" and not cuda:
        raise BootstrapError("backend 'nccl' needs CUDA, but torch sees no GPU here",
                             tip="use --backend gloo (or auto) on CPU nodes")
    return requested


def pick_device(local_rank: int, local_world_size: int, device_count: int) -> int:
    """Pure: the GPU for this rank. All node GPUs visible -> LOCAL_RANK; one visible
    (Slurm's --gpus-per-task binds one per task) -> 0."""
    if device_count >= local_world_size:
        return local_rank
    if device_count == 1:
        return 0
    raise BootstrapError(f"{local_world_size} ranks on this node but {device_count} visible GPUs",
                         tip="request one GPU per task (--gpus-per-task=1) or as many tasks per node as GPUs")


def rank_device(backend: str, local_rank: int, local_world_size: int, device_count: int) -> int | None:
    """Pure: the GPU to make current in this rank, or None to leave CUDA alone.

    Whenever GPUs are visible, whatever the backend: a gloo job's CUDA tensors and
    libraries that read `torch.cuda.current_device()` would otherwise all pile onto
    GPU 0. Only NCCL insists that the GPUs fit the ranks; gloo/mpi with more ranks
    than GPUs keep CUDA's default.
    """
    if device_count < 1:
        return None
    try:
        return pick_device(local_rank, local_world_size, device_count)
    except BootstrapError:
        if backend == "nccl":
            raise
        return None


# ------------------------------------------------------------------ torch.distributed

def _install_patch_hook() -> None:
    """Wrap init_process_group as soon as torch.distributed exists (now or when imported)."""
    if _STATE.get("hook"):
        return
    _STATE["hook"] = True
    if "torch.distributed" in sys.modules:
        _patch(sys.modules["torch.distributed"])
        return
    # A meta path finder needs only find_spec; subclassing importlib.abc's would cost
    # ~8 ms of imports in every rank, for a script that may never import torch.
    class _PatchOnImport:
        def find_spec(self, name, path, target=None):
            if name != "torch.distributed":
                return None
            import importlib.util

            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            exec_module = getattr(spec and spec.loader, "exec_module", None)
            if exec_module is None:
                return spec  # an unusual loader: torch.distributed stays unwrapped

            def exec_and_patch(module):
                exec_module(module)
                _patch(module)

            try:
                spec.loader.exec_module = exec_and_patch
            except (AttributeError, TypeError):
                pass
            return spec

    sys.meta_path.insert(0, _PatchOnImport())


def _patch(dist_module) -> None:
    """Wrap init_process_group in a freshly imported torch.distributed.

    Runs inside the user's `import torch`, so it never raises: a torch build without
    distributed_c10d (or one whose init_process_group we cannot read) is left unwrapped.
    """
    try:
        _wrap_init(dist_module)
    except Exception:  # noqa: BLE001 - an unusual torch build must still import
        pass


def _set_group_timeout(c10d, timeout) -> bool:
    """Give the existing default group (and its store) `timeout`; False when this torch cannot.

    c10d's `_set_pg_timeout` changes the gloo/NCCL backends' default timeout in place
    (checked on torch 2.13: a gloo all_reduce then waits for exactly the new time); the
    store's timeout bounds NCCL's lazy communicator set-up and new_group.
    """
    setter = getattr(c10d, "_set_pg_timeout", None)
    if setter is None:
        return False
    try:
        setter(timeout)
        c10d._get_default_store().set_timeout(timeout)
    except Exception:  # noqa: BLE001 - fall back to replacing the group
        return False
    return True


def _wrap_init(dist_module) -> None:
    c10d = getattr(dist_module, "distributed_c10d", None)
    original = getattr(c10d, "init_process_group", None)
    if not callable(original) or getattr(original, "__slurmtorch__", False):
        return
    import functools
    import inspect

    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        import datetime

        call = dict(signature.bind_partial(*args, **kwargs).arguments)
        info: RankInfo | None = _STATE.get("info")
        ours = datetime.timedelta(seconds=_STATE["timeout"]) if "timeout" in _STATE else None
        if c10d.is_initialized() and _STATE.get("group_ours") and info is not None:
            for key, mine in (("rank", info.rank), ("world_size", info.world_size)):
                theirs = call.get(key, -1)
                if theirs not in (-1, None) and int(theirs) != mine:
                    raise BootstrapError(
                        f"the script calls init_process_group({key}={theirs}) but slurmtorch set up {key} {mine}",
                        tip="read RANK/WORLD_SIZE from the environment, or run with --no-init")
            wanted = call.get("backend")
            timeout = call.get("timeout")
            if timeout is not None and not isinstance(timeout, datetime.timedelta):
                raise TypeError(f"Expected timeout argument to be of type datetime.timedelta, got {type(timeout)}")
            same_backend = wanted is None or str(wanted).lower() == str(_STATE["backend"]).lower()
            # Options our group was not made with (pg_options, device_id) need a new group.
            same_options = all(call.get(key) is None for key in ("pg_options", "device_id"))
            if same_backend and same_options:
                if timeout is None or timeout == ours:
                    return None  # our group is the one it asked for
                if _set_group_timeout(c10d, timeout):
                    _STATE["timeout"] = timeout.total_seconds()
                    return None  # our group, with the script's timeout
            # Replace our group with the one asked for, keeping its store (and port) alive.
            store = c10d._get_default_store()
            c10d.destroy_process_group()
            _STATE["reinits"] = _STATE.get("reinits", 0) + 1
            call.pop("init_method", None)
            call["store"] = dist_module.PrefixStore(f"slurmtorch/reinit/{_STATE['reinits']}", store)
            call["rank"], call["world_size"] = info.rank, info.world_size
            call["backend"] = wanted if wanted is not None else _STATE["backend"]
            if call.get("timeout") is None:
                call["timeout"] = ours
            store.set_timeout(call["timeout"])  # a store handed to torch keeps its own timeout
            _STATE["timeout"] = call["timeout"].total_seconds()
            _STATE["backend"] = str(call["backend"])
            _STATE["keep_store"] = store
            return original(**call)
        if call.get("timeout") is None and ours is not None:
            call["timeout"] = ours
        try:
            return original(**call)
        finally:
            _release_port()

    init_process_group.__slurmtorch__ = True
    c10d.init_process_group = init_process_group
    dist_module.init_process_group = init_process_group
    # torch.distributed.device_mesh took the name while torch.distributed loaded (before
    # this runs), and init_device_mesh calls it: without this an FSDP2 script under
    # --no-init would get torch's 30-minute gloo default instead of our timeout.
    mesh = sys.modules.get(f"{dist_module.__name__}.device_mesh")
    if mesh is not None and getattr(mesh, "init_process_group", None) is original:
        mesh.init_process_group = init_process_group


def _init_group(info: RankInfo, backend: str, timeout: float) -> str:
    import datetime

    t, c = time.perf_counter(), time.process_time()
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        raise BootstrapError(f"a process group needs torch, but it cannot be imported in {sys.executable}: {exc}",
                             tip="pip install 'slurmtorch[torch]' (or run with --no-init to only set the "
                                 "environment)") from None

    timings = _STATE.setdefault("timings", {})
    timings["import_torch"] = time.perf_counter() - t
    timings["import_torch_cpu"] = time.process_time() - c

    from slurmtorch.bootstrap import contracts

    cuda = torch.cuda.is_available()
    chosen = choose_backend(backend, cuda, dist.is_nccl_available(), dist.is_gloo_available(),
                            dist.is_mpi_available(), f"torch {torch.__version__}")
    device = rank_device(chosen, info.local_rank, info.local_world_size, torch.cuda.device_count() if cuda else 0)
    if device is not None:
        torch.cuda.set_device(device)
    kwargs = dict(backend=chosen, timeout=datetime.timedelta(seconds=timeout))
    if chosen != "mpi":  # the MPI backend takes rank and size from MPI_COMM_WORLD
        kwargs.update(init_method=contracts.init_method(info), rank=info.rank, world_size=info.world_size)
    _STATE["backend"] = chosen
    dist.init_process_group(**kwargs)  # the wrapper releases the port once the store has it
    _STATE["group_ours"] = True
    return chosen


def init(backend: str = "auto", timeout: float = DEFAULT_TIMEOUT, source: str = "auto",
         process_group: bool = True, role: str | None = None) -> RankInfo:
    """Derive this rank's world, export the contracts, and (by default) init torch.distributed.

    Idempotent: a second call returns the first call's `RankInfo`. `source` is
    auto | mpi | slurm | env | torchrun | single; `backend` auto | nccl | gloo | mpi;
    `timeout` in seconds goes to init_process_group.
    """
    if "info" in _STATE:
        return _STATE["info"]
    from slurmtorch.bootstrap import contracts

    problem = timeout_problem(float(timeout))
    if problem:
        raise BootstrapError(f"timeout={timeout!r} {problem}", tip="e.g. timeout=600 (seconds)")
    _STATE["timeout"] = float(timeout)
    info, reservation = derive(source, backend, role=role)
    process_group = process_group and info.in_group
    _mark("detect")
    _STATE["reservation"] = reservation
    _STATE["info"] = info
    exported = contracts.env_for(info)
    os.environ.update(exported)
    for key in contracts.unset_keys(exported):  # inherited from a parent process, not ours
        os.environ.pop(key, None)
    os.environ.update(contracts.slurm_task_env(info, os.environ))
    os.environ.update(thread_defaults(os.environ, info.local_world_size, _cpus_available()))
    _install_patch_hook()
    if process_group:
        _init_group(info, backend, timeout)
        _mark("init_process_group")
    if not _STATE.get("main"):
        import atexit

        atexit.register(teardown)
    return info


def teardown() -> None:
    """Destroy the process group (if any) and free the held port."""
    _release_port()
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    # A group (or a DDP reducer holding one) caught in a reference cycle would live
    # until interpreter shutdown, where gloo's worker threads then die with
    # "terminate called without an active exception" (SIGABRT). Collect it now.
    import gc

    gc.collect()


# ------------------------------------------------------------------ running the target

def run_target(opts: Options) -> None:
    """Run SCRIPT or -m MODULE as __main__, as `python SCRIPT ARGS` would."""
    import runpy

    _mark("handover")
    _write_timings(_STATE["info"])

    args = list(opts.args)
    if opts.init_args:
        from slurmtorch.bootstrap import contracts

        args += contracts.init_args(_STATE["info"], opts.init_args)
    if opts.module:
        sys.argv = [opts.module, *args]  # run_module puts the file path in argv[0]
        runpy.run_module(opts.module, run_name="__main__", alter_sys=True)
        return
    script = opts.script
    if not os.path.exists(script):
        raise BootstrapError(f"script {script!r} not found (cwd {os.getcwd()})")
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


def line_atomic_stdio(streams=None) -> None:
    """Unbuffered stdout/stderr become line-buffered: still live, one write per line.

    torchrun starts its workers with `python -u`, and PYTHONUNBUFFERED is common on
    clusters; print() then writes the text and the newline separately, and ranks that
    share one log (torchrun's per-node file, Hydra's merged stream) cut each other's
    lines in half. Line buffering flushes at every newline, so nothing waits that a
    reader would miss, except a partial line until its newline or an explicit flush.
    """
    for stream in (sys.stdout, sys.stderr) if streams is None else streams:
        if getattr(stream, "write_through", False):
            try:
                stream.reconfigure(write_through=False, line_buffering=True)
            except (AttributeError, ValueError, OSError):
                pass


def _say(line: str) -> None:
    """One write per line: under PYTHONUNBUFFERED, print() writes the text and the newline
    separately, and a launcher that merges the ranks' output (MPICH's Hydra) interleaves them."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def self_check(info: RankInfo, initialised: bool) -> int:
    """Print the world; with a group, all_reduce (rank+1) and compare with N(N+1)/2."""
    line = f"slurmtorch: {info.describe()}"
    if not initialised:
        _say(line + " (no process group: --no-init)")
        return 0
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", torch.cuda.current_device()) if _STATE["backend"] == "nccl" else "cpu"
    value = torch.tensor([float(info.rank + 1)], device=device)
    dist.all_reduce(value)
    got, expected = int(value.item()), info.world_size * (info.world_size + 1) // 2
    ok = got == expected
    _say(f"{line} backend {_STATE['backend']} all_reduce {got} (expected {expected}) {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


# How long a rank that failed only because a peer died or hung (a timeout, a reset
# connection) waits before it ends the job: its peers, failing at about the same moment,
# get to report too, so the one rank that said nothing is the one that hung.
CONSEQUENCE_GRACE_S = 1.0


def _fail(code: int, text: str) -> None:
    """Report and end the whole job now (a consequence of a peer's failure: nearly now)."""
    info = _STATE.get("info")
    who = info.rank if info is not None else rankinfo.rank_hint(os.environ)
    try:
        sys.stdout.flush()
    except Exception:
        pass
    sys.stderr.write(f"rank {who} on {_hostname()} failed:\n{text.rstrip()}\n")
    sys.stderr.flush()
    from slurmtorch.submit import failures
    from slurmtorch.bootstrap import mpi

    if info is not None and info.world_size > 1 and failures.is_consequence(text):
        time.sleep(CONSEQUENCE_GRACE_S)

    mpi.abort(code)  # returns only when MPI is not running
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """`python -m slurmtorch.bootstrap ...`; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        sys.stderr.write(exc.render() + "\n")
        return exc.exit_code
    _STATE["main"] = True
    note_started()
    line_atomic_stdio()
    code = 0
    try:
        info = init(opts.backend, opts.timeout, opts.source, process_group=opts.init, role=opts.role)
        if opts.script or opts.module:
            from slurmtorch.bootstrap import preempt

            preempt.install()  # no-op unless the job was submitted with --signal
            run_target(opts)
        else:
            code = self_check(info, opts.init and info.in_group)
    except SystemExit as exc:
        if exc.code is None or exc.code == 0:
            code = 0
        elif isinstance(exc.code, int):
            _fail(exc.code, f"exited with code {exc.code}")
        else:
            _fail(1, str(exc.code))
    except BootstrapError as exc:
        _fail(exc.exit_code, exc.render())
    except KeyboardInterrupt:
        _fail(130, "interrupted")
    except BaseException:
        import traceback

        _fail(1, traceback.format_exc())
    teardown()
    finish(code)
    return code  # not reached: finish() ends the process


def finish(code: int) -> None:
    """End a rank whose script returned: what interpreter exit does, minus its abort.

    Python's finalization can kill a finished rank: a gloo worker thread still alive
    (a DDP reducer or a future callback holding the group) wakes up, tries to take the
    GIL to drop a tensor, is ended with pthread_exit inside a noexcept frame, and
    libstdc++ calls `terminate called without an active exception` (SIGABRT; srun then
    kills the step). Seen in 1 of 15 srun launches of examples/train_ddp.py. So we do
    the parts of exit the user can observe ourselves, in Python's order (non-daemon
    threads joined, atexit handlers, buffers flushed, MPI finalized), then leave with
    os._exit: no finalization, no C++ destructors of threads torch still runs.
    """
    threading = sys.modules.get("threading")
    if threading is not None:
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
    import atexit

    atexit._run_exitfuncs()  # the user's and libraries' handlers (logging, multiprocessing)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken pipe: nothing more can be said there
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)  # C-level stdio buffers (printf from extensions)
    except (OSError, AttributeError):
        pass
    from slurmtorch.bootstrap import mpi

    mpi.finalize()  # mpirun counts a rank that skips MPI_Finalize as failed
    os._exit(code)
