"""The torch process group: ours, created at start, and the script's own init_process_group.

torch is imported only when a group is wanted (or by the script itself).

Scripts written for torchrun call `init_process_group` themselves. We wrap
`torch.distributed.init_process_group` (also as `distributed_c10d.init_process_group`
and the name `torch.distributed.device_mesh` imported, which `init_device_mesh`
calls) when torch.distributed is first imported:

* our group already exists (default): the script's call is a no-op when it asks for
  the same backend (or none) and a compatible rank/world size; a `timeout=` other
  than ours is applied to our group in place (the script's long barriers must not
  fail at our 600 s); a different backend (e.g. `--backend gloo` but the script says
  "cpu:gloo,cuda:nccl"), `pg_options`/`device_id`, or process-group settings the script
  put in the environment since ours was made (`group_settings`: torchtitan's NCCL error
  handling, flight recorder), replaces our group with the script's, re-using our store
  under a fresh prefix so no port is rebound; a
  different rank or world size is an error;
* no group yet (`--no-init`): the call goes through with our timeout added when the
  script passed none (gloo's default is 30 minutes of a hung job), and rank 0's port
  reservation is released once torch's store holds the port.

The wrapper is installed by an import hook, so `--no-init` costs nothing for a
script that never imports torch. The process group is destroyed at a normal exit
(`teardown`).
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import inspect
import os
import sys
import time
from typing import Any

from slurmtorch.bootstrap import contracts, flightrecorder, rendezvous
from slurmtorch.bootstrap.device import (backend_names, bound_per_rank, choose_backend, missing_backend,
                                         rank_device, visible_devices_var)
from slurmtorch.bootstrap.rankinfo import RankInfo
from slurmtorch.bootstrap.state import STATE
from slurmtorch import protocol
from slurmtorch.errors import BootstrapError


def install_patch_hook() -> None:
    """Wrap init_process_group as soon as torch.distributed exists (now or when imported)."""
    if STATE.hook_installed:
        return
    STATE.hook_installed = True
    if "torch.distributed" in sys.modules:
        _patch(sys.modules["torch.distributed"])
        return
    # A meta path finder needs only find_spec; subclassing importlib.abc's would cost
    # ~8 ms of imports in every rank, for a script that may never import torch.
    class _PatchOnImport:
        def find_spec(self, name, path, target=None):
            if name != "torch.distributed":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            loader = spec.loader if spec is not None else None
            exec_module = getattr(loader, "exec_module", None)
            if loader is None or exec_module is None:
                return spec  # an unusual loader: torch.distributed stays unwrapped

            def exec_and_patch(module):
                exec_module(module)
                _patch(module)

            try:
                loader.exec_module = exec_and_patch  # type: ignore[method-assign]
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
    if c10d is None or not callable(original) or getattr(original, "__slurmtorch__", False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        import datetime  # lazy: torch has imported it by now; a --no-init start never needs it

        call = dict(signature.bind_partial(*args, **kwargs).arguments)
        _check_built(dist_module, call.get("backend"))
        info = STATE.info
        ours = datetime.timedelta(seconds=STATE.timeout) if STATE.timeout is not None else None
        if c10d.is_initialized() and STATE.group_ours and info is not None:
            for key, mine in (("rank", info.rank), ("world_size", info.world_size)):
                theirs = call.get(key, -1)
                if theirs not in (-1, None) and int(theirs) != mine:
                    raise BootstrapError(
                        f"the script calls init_process_group({key}={theirs}) but slurmtorch set up {key} {mine}",
                        tip=WORLD_TIP)
            wanted = call.get("backend")
            timeout = call.get("timeout")
            if timeout is not None and not isinstance(timeout, datetime.timedelta):
                raise TypeError(f"Expected timeout argument to be of type datetime.timedelta, got {type(timeout)}")
            same_backend = wanted is None or str(wanted).lower() == str(STATE.backend).lower()
            # Options our group was not made with (pg_options, device_id) need a new group, and so do
            # settings the script put in the environment since (torchtitan's NCCL error handling and
            # flight recorder): torch reads them when a group is made.
            same_options = all(call.get(key) is None for key in ("pg_options", "device_id")) \
                and group_settings(os.environ) == STATE.group_env
            if same_backend and same_options:
                if timeout is None or timeout == ours:
                    return None  # our group is the one it asked for
                if _set_group_timeout(c10d, timeout):
                    STATE.timeout = timeout.total_seconds()
                    return None  # our group, with the script's timeout
            # Replace our group with the one asked for, keeping its store (and port) alive.
            store = c10d._get_default_store()
            c10d.destroy_process_group()
            STATE.reinits += 1
            call.pop("init_method", None)
            call["store"] = dist_module.PrefixStore(f"slurmtorch/reinit/{STATE.reinits}", store)
            call["backend"] = wanted if wanted is not None else STATE.backend
            if "mpi" not in backend_names(call["backend"]):  # MPI's come from MPI_COMM_WORLD (torch warns)
                call["rank"], call["world_size"] = info.rank, info.world_size
            if call.get("timeout") is None:
                call["timeout"] = ours
            store.set_timeout(call["timeout"])  # a store handed to torch keeps its own timeout
            STATE.timeout = call["timeout"].total_seconds()
            STATE.backend = str(call["backend"])
            STATE.kept_store = store
            flightrecorder.enable(STATE.backend)
            return original(**call)
        if call.get("timeout") is None and ours is not None:
            call["timeout"] = ours
        _refuse_a_world_of_one(call, info)
        _wait_for_store(call, info)
        flightrecorder.enable(str(call.get("backend") or ""))
        try:
            return original(**call)
        finally:
            STATE.release_port()

    init_process_group.__slurmtorch__ = True  # type: ignore[attr-defined]
    c10d.init_process_group = init_process_group
    dist_module.init_process_group = init_process_group
    # torch.distributed.device_mesh took the name while torch.distributed loaded (before
    # this runs), and init_device_mesh calls it: without this an FSDP2 script under
    # --no-init would get torch's 30-minute gloo default instead of our timeout.
    mesh = sys.modules.get(f"{dist_module.__name__}.device_mesh")
    if mesh is not None and getattr(mesh, "init_process_group", None) is original:
        mesh.init_process_group = init_process_group  # type: ignore[attr-defined]


# Variables torch, NCCL and Gloo read when a process group is made.
GROUP_SETTING_PREFIXES = ("TORCH_NCCL_", "TORCH_FR_", "NCCL_", "TORCH_GLOO_", "GLOO_", "TORCH_DISTRIBUTED_")


def group_settings(environ) -> dict[str, str]:
    """The process-group settings in `environ` (pure)."""
    return {k: v for k, v in environ.items() if k.startswith(GROUP_SETTING_PREFIXES)}


# Where a script's own rank or world size comes from when it is not ours: arguments it parses
# (ModelArts', imagenet's), or a helper that reads some launcher's variables (idr_torch).
WORLD_TIP = ("the script read its rank/world size from somewhere else: if it takes them as arguments, give "
             "--init-args (e.g. --init-args=rank:dist-url,rank,world-size); RANK, WORLD_SIZE, LOCAL_RANK and "
             "SLURM_PROCID/SLURM_NTASKS/SLURM_STEP_* are this world's")


def _refuse_a_world_of_one(call: dict, info: RankInfo | None) -> None:
    """No group of ours (--no-init): a script asking for a world of 1 in a job of several ranks
    would train once per rank, independently, and end well; refused. Other sizes are left to
    it (a script may spawn its own workers: --init-args=node)."""
    world = call.get("world_size", -1)
    if info is None or not info.in_group or info.world_size < 2 or world in (-1, None) or int(world) != 1:
        return
    raise BootstrapError(f"the script calls init_process_group(world_size=1) in a world of {info.world_size} ranks: "
                         "each rank would train alone", tip=WORLD_TIP)


def _check_built(dist_module, backend) -> None:
    """The script's own backend, checked as `--backend` is: a build without it (torch from
    PyPI has no MPI) gets the option's one line instead of torch's RuntimeError."""
    if backend is None:
        return
    have = {name: bool(getattr(dist_module, f"is_{name}_available", lambda: True)()) for name in ("nccl", "gloo", "mpi")}
    torch = sys.modules.get("torch")
    missing = missing_backend(backend, have, f"torch {getattr(torch, '__version__', '?')}")
    if missing is not None:
        raise missing


def _wait_for_store(call: dict, info: RankInfo | None) -> None:
    """A rank other than 0 that meets at our MASTER_ADDR:PORT waits until rank 0's store
    listens (`rendezvous.wait_listening`), so torch's client connects at its first try
    instead of backing off; a store that never comes is named here, with the wait bounded
    by the group's timeout. Other meeting points (a store of the script's, a file://
    method, the MPI backend) are left to torch."""
    if info is None or info.rank == 0 or info.world_size < 2 or call.get("store") is not None:
        return
    if str(call.get("backend") or "").lower() == "mpi":
        return
    method = call.get("init_method")
    ours = contracts.init_method(info)
    if method in (None, "env://"):
        env = os.environ
        if (env.get("MASTER_ADDR"), env.get("MASTER_PORT")) != (info.master_addr, str(info.master_port)):
            return
    elif method != ours:
        return
    timeout = call.get("timeout")
    seconds = timeout.total_seconds() if timeout is not None else 1800.0
    if not rendezvous.wait_listening(info.master_addr, info.master_port, seconds):
        raise BootstrapError(
            f"timed out after {seconds:g} s waiting for rank 0's store at {info.master_addr}:{info.master_port}: "
            "rank 0 never reached init_process_group (it hung or died before it)",
            tip="see rank 0's output for why")


def init_group(info: RankInfo, backend: str, timeout: float) -> str:
    """Import torch, pick the backend and this rank's GPU, and create the default group."""
    import datetime  # lazy: with torch only (which imports it anyway)

    t, c = time.perf_counter(), time.process_time()
    try:
        import torch  # lazy: seconds of start-up, only for ranks that want a group
        import torch.distributed as dist
    except ImportError as exc:
        raise BootstrapError(f"a process group needs torch, but it cannot be imported in {sys.executable}: {exc}",
                             tip="pip install 'slurmtorch[torch]' (or run with --no-init to only set the "
                                 "environment)") from None

    STATE.timings["import_torch"] = time.perf_counter() - t
    STATE.timings["import_torch_cpu"] = time.process_time() - c

    cuda = torch.cuda.is_available()
    chosen = choose_backend(backend, cuda, dist.is_nccl_available(), dist.is_gloo_available(),
                            dist.is_mpi_available(), f"torch {torch.__version__}")
    # Before the group: NCCL with two ranks on one GPU fails only in the first collective,
    # with its own traceback ("Duplicate GPU detected"); this names the layout and the fix.
    device = rank_device(chosen, info.local_rank, info.local_world_size, torch.cuda.device_count() if cuda else 0,
                         bound_per_rank(os.environ), visible_devices_var(bool(getattr(torch.version, "hip", None))),
                         os.environ.get(protocol.GPU_ORDER, "natural"))
    if device is not None:
        torch.cuda.set_device(device)
    kwargs: dict[str, Any] = dict(backend=chosen, timeout=datetime.timedelta(seconds=timeout))
    if chosen != "mpi":  # the MPI backend takes rank and size from MPI_COMM_WORLD
        kwargs.update(init_method=contracts.init_method(info), rank=info.rank, world_size=info.world_size)
    STATE.backend = chosen
    flightrecorder.enable(chosen)
    STATE.group_env = group_settings(os.environ)
    dist.init_process_group(**kwargs)  # the wrapper releases the port once the store has it
    STATE.group_ours = True
    if chosen == "gloo" and info.world_size > 1:
        # Every rank's gloo pairs are up before any rank runs its script. init_process_group
        # returns on a rank once its own pairs are connected; a script that ends at once (a
        # probe, a failed argument check) then closed them while a slower peer was still
        # connecting its own, and that peer's init failed with `Connection closed by peer`
        # (testbed: about 1 run in 3 of a 3-node job of a trivial script). NCCL connects
        # lazily and MPI_Init is collective: neither has that window.
        dist.barrier()
    return chosen


def teardown() -> None:
    """Destroy the process group (if any) and free the held port."""
    STATE.release_port()
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    # A group (or a DDP reducer holding one) caught in a reference cycle would live
    # until interpreter shutdown, where gloo's worker threads then die with
    # "terminate called without an active exception" (SIGABRT). Collect it now, unless
    # this is `python -m slurmtorch.bootstrap`, whose rank ends with os._exit and never
    # finalizes (exits.finish): there a full collection over torch's objects is ~0.2 s of
    # CPU per rank (2 cores, torch 2.13) spent for nothing.
    if not STATE.main:
        gc.collect()
