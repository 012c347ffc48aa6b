"""`Distributor`: run a function (or a file) on N ranks and get rank 0's answer back.

    from slurmtorch import Distributor

    def train(lr):
        import torch.distributed as dist      # the process group is already set up
        ...
        return metrics                         # rank 0's return value comes back

    Distributor(num_processes=8, site="mycluster").run(train, 1e-3)     # a Slurm job
    Distributor(num_processes=2, local_mode=True).run(train, 1e-3)      # mpirun, here
    Distributor(num_processes=8).run("train.py", "--lr", "1e-3")        # a file: None back

It is the CLI's path with a Python front: options -> `spec.build_spec` (the site's
preset, partition and node type apply) -> `render` -> `submit` (sbatch, or the
rendered mpirun script run here for `local_mode`). Every rank runs
`python -m slurmtorch.bootstrap ... -m slurmtorch.bootstrap.runfn WORKDIR`; `_runfn` loads the
cloudpickled `(fn, args, kwargs)` from WORKDIR, runs it, and answers through files
there (see `_runfn`). WORKDIR is `$SLURMTORCH_HOME/distributor/<run>/`, mode 0700,
on the shared file system the job folders already need.

Rank layout (`nodes=None`): a node holds as many ranks as it has GPUs (`use_gpu`) or
CPUs (divided by `cpus_per_task` when given), and the job takes the fewest nodes
that hold `num_processes` ranks spread evenly (Slurm gives every node the same
`--ntasks-per-node`). So 4 CPU ranks on the testbed's 4-CPU nodes are one node with
4 ranks; 16 GPU ranks on 8-GPU nodes are 2 nodes x 8; pass `nodes=` to spread them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmtorch.bootstrap import runfn as _runfn
from slurmtorch.errors import SlurmtorchError, SpecError

__all__ = ["Distributor", "Job", "JobFailed", "RemoteError", "Layout", "plan_layout"]

# Options passed through to the CLI's `spec.Options` (the rank layout is ours).
SCHEDULER_OPTIONS = ("partition", "time", "account", "qos", "job_name", "env", "cpus_per_task",
                     "launcher", "timeout")
CANCEL_GRACE_S = 10.0
_FAILED_RE = re.compile(r"^rank (\d+) on (\S+) failed:\n", re.M)


# --------------------------------------------------------------------------- errors


class JobFailed(SlurmtorchError):
    """The job ended without an answer: cancelled, timed out, killed, or a rank failed."""

    exit_code = 1

    def __init__(self, message: str, tip: str | None = None, *, job_id: str = "", state: str = "",
                 job_exit_code: int | None = None):
        super().__init__(message, tip)
        self.job_id = job_id
        self.state = state
        self.job_exit_code = job_exit_code


class RemoteError(JobFailed):
    """A rank raised: which rank, on which host, and its traceback as the rank printed it."""

    def __init__(self, rank: int, host: str, traceback_text: str, *, job_id: str = "", exc_type: str = "",
                 state: str = "", job_exit_code: int | None = None):
        self.rank = rank
        self.host = host
        self.traceback_text = traceback_text
        self.exc_type = exc_type
        super().__init__(f"rank {rank} on {host} failed (job {job_id}):\n{traceback_text.rstrip()}",
                         job_id=job_id, state=state, job_exit_code=job_exit_code)

    def __reduce__(self):
        return (_remote_error, (self.rank, self.host, self.traceback_text, self.job_id, self.exc_type))


def _remote_error(rank, host, text, job_id, exc_type):
    return RemoteError(rank, host, text, job_id=job_id, exc_type=exc_type)


# --------------------------------------------------------------------------- layout (pure)


@dataclass(frozen=True)
class Layout:
    nodes: int
    ranks_per_node: int
    gpus_per_node: int


def plan_layout(num_processes: int, nodes: int | None, use_gpu: bool, node_gpus: int, node_cpus: int,
                max_nodes: int, cpus_per_task: int | None = None, where: str = "") -> Layout:
    """Spread `num_processes` ranks evenly over nodes (see the module docstring for the rule)."""
    if nodes is not None:
        if num_processes % nodes:
            divisors = [d for d in range(1, num_processes + 1) if num_processes % d == 0]
            raise SpecError(
                f"num_processes={num_processes} cannot be spread evenly over nodes={nodes} "
                "(Slurm gives every node the same number of tasks)",
                tip=f"use nodes in {divisors}, or a multiple of {nodes} processes")
        per = num_processes // nodes
        return Layout(nodes, per, per if use_gpu else 0)
    if use_gpu:
        if node_gpus < 1:
            raise SpecError(f"use_gpu=True, but {where or 'the node type'} has no GPUs",
                            tip="use_gpu=False, or a partition with GPU nodes (partition=...)")
        capacity = node_gpus
    else:
        capacity = max(1, node_cpus // (cpus_per_task or 1))
    least = -(-num_processes // capacity)
    for n in range(least, num_processes + 1):
        if num_processes % n == 0:
            if n > max_nodes:
                break
            per = num_processes // n
            return Layout(n, per, per if use_gpu else 0)
    raise SpecError(
        f"num_processes={num_processes} does not fit evenly on at most {max_nodes} nodes of "
        f"{capacity} {'GPUs' if use_gpu else 'CPUs'} ({where or 'this partition'})",
        tip=f"use at most {max_nodes * capacity} processes, a multiple of {capacity}, or pass nodes=")


# --------------------------------------------------------------------------- pickling


def _installed(module) -> bool:
    """Whether a module comes from the interpreter's own library folders (importable on the ranks)."""
    import site
    import sysconfig

    path = getattr(module, "__file__", None)
    if not path:
        return True  # built-in or namespace package: leave it to cloudpickle
    roots = [*site.getsitepackages(), site.getusersitepackages()]
    roots += [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    path = os.path.realpath(path)
    return any(path.startswith(os.path.realpath(r) + os.sep) for r in roots if r)


def _by_value_package(fn: Any):
    """The top-level package to ship by value: user code the ranks may not be able to import.

    cloudpickle already ships `__main__` (scripts, notebooks) by value; a function from
    a module that is not installed (a test file, a module next to a notebook) is sent
    by value too, with the rest of its package, rather than as an import the ranks
    might fail. Installed packages travel by reference, as imports.
    """
    import functools

    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)
    name = getattr(fn, "__module__", None) or type(fn).__module__
    if not name or name == "__main__" or name not in sys.modules:
        return None
    top = name.partition(".")[0]
    module = sys.modules.get(top)
    if module is None or top == "slurmtorch" or _installed(module):
        return None
    return module


def _code_names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _code_names(const)
    return names


def _parts(obj: Any, label: str) -> list[tuple[str, Any]]:
    """What `obj` drags into its pickle, each with a name a user recognises."""
    import functools
    import inspect
    import types

    if isinstance(obj, functools.partial):
        return ([(f"{label} (partial's function)", obj.func)]
                + [(f"argument {i} of {label}", a) for i, a in enumerate(obj.args)]
                + [(f"keyword argument {k!r} of {label}", v) for k, v in obj.keywords.items()])
    if inspect.ismethod(obj):
        return [(f"the object {label} is bound to", obj.__self__), *_parts(obj.__func__, label)]
    if isinstance(obj, types.FunctionType):
        qual = obj.__qualname__
        out = []
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
            try:
                out.append((f"variable {name!r} captured by {qual}", cell.cell_contents))
            except ValueError:  # an empty cell
                pass
        for name in sorted(_code_names(obj.__code__)):
            if name in obj.__globals__ and not isinstance(obj.__globals__[name], types.ModuleType):
                out.append((f"global {name!r} used by {qual}", obj.__globals__[name]))
        for i, value in enumerate(obj.__defaults__ or ()):
            out.append((f"default argument {i} of {qual}", value))
        for name, value in (obj.__kwdefaults__ or {}).items():
            out.append((f"default of keyword {name!r} of {qual}", value))
        return out
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        return [(f"attribute {k!r} of {label}", v) for k, v in attrs.items()]
    return []


def _culprit(obj: Any, label: str, dumps: Callable[[Any], bytes], depth: int = 0) -> tuple[str, Any, Exception] | None:
    """The innermost named piece of `obj` that does not pickle (None when all do)."""
    for part_label, value in _parts(obj, label):
        try:
            dumps(value)
        except Exception as exc:  # noqa: BLE001 - any pickling failure names a culprit
            if depth < 3:
                deeper = _culprit(value, part_label, dumps, depth + 1)
                if deeper is not None:
                    return deeper
            return part_label, value, exc
    return None


def pickle_call(fn: Callable, args: tuple, kwargs: dict) -> bytes:
    """cloudpickle `(fn, args, kwargs)`, or a SpecError naming what cannot be sent."""
    try:
        import cloudpickle
    except ImportError:
        raise SlurmtorchError("running a function needs cloudpickle",
                              tip="pip install 'slurmtorch[api]' (or pass a file: run('train.py', ...))") from None
    package = _by_value_package(fn)
    registered = package is not None and package.__name__ in cloudpickle.list_registry_pickle_by_value()
    if package is not None and not registered:
        cloudpickle.register_pickle_by_value(package)
    try:
        try:
            return cloudpickle.dumps((fn, args, kwargs))
        except Exception as exc:  # noqa: BLE001 - reported with its culprit below
            name = getattr(fn, "__qualname__", None) or type(fn).__name__
            candidates = [(name, fn), *[(f"argument {i}", a) for i, a in enumerate(args)],
                          *[(f"keyword argument {k!r}", v) for k, v in kwargs.items()]]
            found = None
            for label, value in candidates:
                try:
                    cloudpickle.dumps(value)
                except Exception as inner:  # noqa: BLE001
                    found = _culprit(value, label, cloudpickle.dumps) or (label, value, inner)
                    break
            label, value, err = found or (name, fn, exc)
            raise SpecError(
                f"cannot send {name} to the ranks: {label} ({type(value).__module__}.{type(value).__qualname__}) "
                f"cannot be pickled: {err}",
                tip="create it inside the function (each rank opens its own lock, file or socket), "
                    "or pass what is needed to build it") from None
    finally:
        if package is not None and not registered:
            cloudpickle.unregister_pickle_by_value(package)


# --------------------------------------------------------------------------- the API


class Distributor:
    """Run a function or a file on `num_processes` ranks; see the module docstring.

    `local_mode=True` runs the ranks on this machine with mpirun (site `local` unless
    `site` is given); otherwise a Slurm job on `site` (default `$SLURMTORCH_SITE`).
    `scheduler_options` are the CLI's: partition, time, account, qos, job_name,
    env (mapping or `K=V` strings), cpus_per_task, launcher, timeout (the process
    group's, in seconds). `progress=False` silences run()'s state lines and rank 0's
    streamed output.
    """

    def __init__(self, num_processes: int = 1, nodes: int | None = None, use_gpu: bool = False,
                 local_mode: bool = False, site: str | os.PathLike | None = None, preset: str | None = None,
                 backend: str = "auto", *, progress: bool = True, **scheduler_options: Any):
        for name, value in (("num_processes", num_processes), ("nodes", nodes)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise SpecError(f"{name} must be a positive integer, got {value!r}")
        unknown = sorted(set(scheduler_options) - set(SCHEDULER_OPTIONS))
        if unknown:
            raise SpecError(f"unknown Distributor option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}",
                            tip=f"scheduler options: {', '.join(SCHEDULER_OPTIONS)}")
        if local_mode and nodes not in (None, 1):
            raise SpecError(f"local_mode runs on this machine only, but nodes={nodes}",
                            tip="drop nodes=, or local_mode=False to submit a Slurm job")
        self.num_processes = num_processes
        self.nodes = nodes
        self.use_gpu = use_gpu
        self.local_mode = local_mode
        self.site = str(site) if site is not None else None
        self.preset = preset
        self.backend = backend
        self.progress = progress
        self.scheduler_options = dict(scheduler_options)
        self._env = _env_items(scheduler_options.get("env"))

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.scheduler_options.items())
        return (f"Distributor(num_processes={self.num_processes}, nodes={self.nodes}, use_gpu={self.use_gpu}, "
                f"local_mode={self.local_mode}, site={self.site!r}, preset={self.preset!r}, "
                f"backend={self.backend!r}{opts})")

    # -- public

    def run(self, target: Callable | str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
        """Run and block; rank 0's return value (a function) or None (a file).

        Raises RemoteError (rank, host, traceback) when a rank raised, JobFailed when
        the job ended otherwise. An interrupt (Ctrl-C) cancels the job.
        """
        job = self.submit(target, *args, **kwargs)
        try:
            return job._result(None, stream=self.progress)
        except JobFailed:
            raise
        except BaseException:
            job._cancel_quietly()
            raise

    def submit(self, target: Callable | str | os.PathLike, *args: Any, **kwargs: Any) -> Job:
        """Start the job and return at once; the Job answers state/result/logs/cancel."""
        meta, payload, name = _prepare(target, args, kwargs)  # no file, no job before this passes
        from slurmtorch.submit import render
        from slurmtorch.submit import sites
        from slurmtorch.submit import scheduler as sub

        home = sub.jobs_root().parent
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
        workdir = home / "distributor" / run_id
        if self.local_mode:
            site = sites.load_site(self.site or "local")
            spec = self._spec(site, name, workdir, kind="mpirun")
            text = render.render_mpirun(spec)
        else:
            from slurmtorch.submit.sites import site_ref

            site = sites.load_site(site_ref(self.site, None))
            spec = self._spec(site, name, workdir, kind="sbatch")
            text = render.render_sbatch(spec)

        meta["redirect_logs"] = self.local_mode
        try:
            _make_workdir(workdir)
        except OSError as exc:
            raise _workdir_error(exc, workdir) from None
        try:
            try:
                _runfn.write_atomic(str(workdir / _runfn.META), json.dumps(meta).encode())
                if payload is not None:
                    _runfn.write_atomic(str(workdir / _runfn.PAYLOAD), payload)
            except OSError as exc:
                raise _workdir_error(exc, workdir) from None
            if self.local_mode:
                handle: _Handle = _LocalHandle.start(text, workdir, run_id)
            else:
                s = sub.submit(text, sub.jobs_root())
                torchrun = (spec.nodes, spec.ntasks_per_node) if spec.launcher == "torchrun" else None
                handle = _SlurmHandle(s.job_id, s.job_dir, sub.jobs_root(), torchrun)
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        job = Job(handle, workdir, meta["kind"], name, spec.ntasks)
        if self.progress:
            where = "here (mpirun)" if self.local_mode else (
                f"{spec.nodes} node{'s' if spec.nodes > 1 else ''} x {spec.ntasks_per_node} on site {spec.site}")
            _say(f"job {job.job_id}: {name} on {spec.ntasks} rank{'s' if spec.ntasks > 1 else ''}, {where}")
        return job

    # -- building the spec: the CLI's Options, filled from our arguments

    def _spec(self, site, name: str, workdir: Path, kind: str):
        from slurmtorch.submit import spec as specmod
        from slurmtorch.submit import scheduler as sub

        o = self.scheduler_options
        common = dict(
            module="slurmtorch.bootstrap.runfn", script_args=(str(workdir),), preset=self.preset,
            time=_opt_str(o.get("time")), account=o.get("account"), qos=o.get("qos"),
            job_name=o.get("job_name") or _job_name(name), timeout=o.get("timeout"),
            cpus_per_task=o.get("cpus_per_task"), python=sys.executable, job_root=str(sub.jobs_root()),
            command=(f"{self!r}.run({name})",),
        )
        if kind == "mpirun":
            backend = self.backend
            if backend == "auto" and self.use_gpu:
                backend = "nccl"  # the local site describes no GPUs; the user says there are
            options = specmod.Options(
                kind="mpirun", ntasks=self.num_processes, launcher="mpirun",
                backend=None if backend == "auto" else backend,
                env=(*self._local_defaults(), *self._env), **common)
            return specmod.build_spec(site, options)
        preset = site.preset(self.preset)
        partition = site.partition(o.get("partition") or preset.get("partition"))
        node = site.node_type(partition.node_type)
        nodes = self.nodes if self.nodes is not None else preset.get("nodes")
        layout = plan_layout(self.num_processes, nodes, self.use_gpu, node.gpus, node.cpus, partition.max_nodes,
                             o.get("cpus_per_task") or preset.get("cpus_per_task"),
                             where=f"node type {node.name!r} of partition {partition.name!r}")
        options = specmod.Options(
            kind="sbatch", partition=partition.name, nodes=layout.nodes, ntasks_per_node=layout.ranks_per_node,
            gpus_per_node=layout.gpus_per_node, launcher=o.get("launcher"),
            backend=None if self.backend == "auto" else self.backend, env=self._env, **common)
        return specmod.build_spec(site, options)

    def _local_defaults(self) -> tuple[str, ...]:
        """One host: rendezvous over loopback, and let mpirun put more ranks than cores."""
        taken = set(os.environ) | {item.partition("=")[0] for item in self._env}
        defaults = {"MASTER_ADDR": "127.0.0.1"}
        loopback = _loopback_interface()
        if loopback and not ({"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"} & taken):
            defaults["GLOO_SOCKET_IFNAME"] = loopback
        if self.num_processes > (os.cpu_count() or 1):
            defaults["PRTE_MCA_rmaps_default_mapping_policy"] = ":oversubscribe"  # Open MPI 5
            defaults["OMPI_MCA_rmaps_base_oversubscribe"] = "1"  # Open MPI 4
        return tuple(f"{k}={v}" for k, v in defaults.items() if k not in taken)


class Job:
    """A submitted run. `job_id` is the Slurm job id (or `local-...` for local_mode)."""

    def __init__(self, handle: _Handle, workdir: Path, kind: str, name: str, ntasks: int):
        self._handle = handle
        self.workdir = workdir
        self.kind = kind
        self.name = name
        self.ntasks = ntasks
        self._outcome: tuple[bool, Any] | None = None

    @property
    def job_id(self) -> str:
        return self._handle.job_id

    def __repr__(self) -> str:
        return f"Job({self.job_id!r}, {self.name})"

    def state(self) -> str:
        """PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ... (Slurm's words)."""
        return self._handle.status().state

    def wait(self, timeout: float | None = None) -> str:
        """Block until the job ends (TimeoutError after `timeout` s); its final state."""
        return self._wait(timeout, stream=False).state

    def result(self, timeout: float | None = None) -> Any:
        """Rank 0's return value (None for a file); raises RemoteError / JobFailed, or
        TimeoutError when the job is still running after `timeout` seconds."""
        return self._result(timeout, stream=False)

    def logs(self, rank: int | None = None, stream: str = "both", *, node: int | None = None) -> str:
        """What rank `rank` (default 0) printed so far: stream "out", "err" or "both" (out, then err).

        Under torchrun each node writes one log holding all its ranks, and torchrun, not
        Slurm, decides which node holds which rank: ask by `node=` (default node 0) on
        more than one node; `rank=` then raises SpecError.
        """
        if stream not in ("out", "err", "both"):
            raise SpecError(f"stream must be 'out', 'err' or 'both', got {stream!r}")
        if rank is not None and not 0 <= rank < self.ntasks:
            raise SpecError(f"rank {rank} is not in this job (ranks 0..{self.ntasks - 1})")
        out, err = self._handle.log_paths(rank, node)
        chosen = {"out": [out], "err": [err], "both": [out, err]}[stream]
        return "".join(_read_text(p) for p in chosen)

    def cancel(self) -> None:
        """Cancel the job (scancel, or signal the local mpirun); a finished job is left alone."""
        if not self._handle.status().done:
            self._handle.cancel()

    # -- internals

    def _cancel_quietly(self) -> None:
        try:
            self.cancel()
        except Exception:  # noqa: BLE001 - the interrupt that got us here matters more
            pass

    def _result(self, timeout: float | None, stream: bool) -> Any:
        if self._outcome is None:
            status = self._wait(timeout, stream)
            try:
                self._outcome = (True, self._collect(status))
            except JobFailed as exc:
                self._outcome = (False, exc)
        ok, value = self._outcome
        if not ok:
            raise value
        return value

    def _wait(self, timeout: float | None, stream: bool):
        from slurmtorch.submit import scheduler as sub

        deadline = None if timeout is None else time.monotonic() + timeout
        tails = []
        if stream:
            out, err = self._handle.log_paths(None, None)  # rank 0's (node 0's under torchrun)
            tails = [sub.Tail(out, sys.stdout), sub.Tail(err, sys.stderr)]
        shown = None
        while True:
            for t in tails:
                t.pump()
            status = self._handle.status()
            if stream and (status.state, status.nodes) != shown:
                shown = (status.state, status.nodes)
                if not status.done:
                    where = f" on {status.nodes}" if status.nodes and status.state == "RUNNING" else ""
                    why = f" ({status.reason})" if status.reason not in ("", "None", "(null)") and \
                        status.state == "PENDING" else ""
                    _say(f"job {self.job_id}: {status.state}{where}{why}")
            if status.done:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.job_id} is still {status.state} after {timeout:g} s")
            time.sleep(sub.POLL_S)
        sub.drain(tails)
        if stream:
            code = "" if status.exit_code is None else f" (exit {status.exit_code})"
            _say(f"job {self.job_id}: {status.state}{code}")
        return status

    def _collect(self, status) -> Any:
        """Turn the ended job's files into rank 0's value, a RemoteError or a JobFailed.

        A job that COMPLETED with exit 0 succeeded, whatever error files the folder holds:
        a requeued job (a `requeue: true` preset, preemption) runs again in the same
        folder, where an earlier run's error-rank-*.json and *.err stay; within one run a
        rank that raises always makes the job's exit non-zero. So the result comes first,
        and a failure is told from the latest run's reports (`_reported_error`).
        """
        exit_code = status.exit_code
        completed = status.state == "COMPLETED" and not exit_code
        error = None if completed else (self._reported_error() or self._logged_failure())
        if error is not None:
            rank, host, text, exc_type = error
            self._drop_pickles()
            raise RemoteError(rank, host, text, job_id=self.job_id, exc_type=exc_type, state=status.state,
                              job_exit_code=exit_code)
        if completed:
            if self.kind != "function":
                self._drop_pickles()
                return None
            path = self.workdir / _runfn.RESULT
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                raise JobFailed(f"job {self.job_id} completed but rank 0 left no result in {self.workdir}",
                                tip=self._handle.log_tip(), job_id=self.job_id, state=status.state,
                                job_exit_code=exit_code) from None
            import cloudpickle

            try:
                value = cloudpickle.loads(data)
            except Exception as exc:  # noqa: BLE001 - e.g. a class this process cannot import
                raise SlurmtorchError(f"cannot load rank 0's result of job {self.job_id} ({path}): "
                                      f"{type(exc).__name__}: {exc}",
                                      tip="return plain data (numbers, lists, dicts, tensors, state_dicts)") from None
            self._drop_pickles()
            return value
        self._drop_pickles()
        if status.state.startswith("CANCELLED"):
            word = "was cancelled"
        elif status.state == "ENDED":  # known only from its folder, and no exit-code in it
            word = "ended without recording an exit code (cancelled, timed out or lost with its node?)"
        else:
            word = f"ended {status.state}"
        code = "" if exit_code is None else f" (exit {exit_code})"
        line = self._handle.headline()
        raise JobFailed(f"job {self.job_id} {word}{code}" + (f": {line}" if line else ""),
                        tip=self._handle.log_tip(), job_id=self.job_id, state=status.state, job_exit_code=exit_code)

    def _reported_error(self) -> tuple[int, str, str, str] | None:
        """The first error a rank wrote (earliest time) in the latest run: later ones are
        peers losing it, and a requeued job's earlier runs (a lower SLURM_RESTART_COUNT,
        recorded as `restart`) are history. A rerun that failed without reporting shows
        the earlier run's error: the best account left."""
        records = []
        for path in self.workdir.glob(f"{_runfn.ERROR_PREFIX}*.json"):
            try:
                records.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        if not records:
            return None
        latest = max(int(r.get("restart", 0)) for r in records)
        records = [r for r in records if int(r.get("restart", 0)) == latest]
        r = min(records, key=lambda r: (r.get("time", 0), r.get("rank", 0)))
        return int(r["rank"]), str(r["host"]), str(r["traceback"]), str(r.get("exc_type", ""))

    def _logged_failure(self) -> tuple[int, str, str, str] | None:
        """A rank that failed before `_runfn` ran (e.g. in the bootstrap) says so on its stderr."""
        found = []
        for path in self._handle.failure_logs():
            text = _read_text(path)
            for m in _FAILED_RE.finditer(text):
                found.append((path.stat().st_mtime, int(m.group(1)), m.group(2), _failure_text(text[m.end():])))
        if not found:
            return None
        _, rank, host, text = min(found)
        return rank, host, text, ""

    def _drop_pickles(self) -> None:
        """Payload and result can be large; the small files (meta, errors, local logs) stay."""
        for name in (_runfn.PAYLOAD, _runfn.RESULT):
            try:
                (self.workdir / name).unlink()
            except FileNotFoundError:
                pass


# --------------------------------------------------------------------------- where the job runs


class _Handle:
    job_id: str

    def status(self): ...  # submit.JobStatus

    def cancel(self) -> None: ...

    def log_paths(self, rank: int | None, node: int | None) -> tuple[Path, Path]: ...

    def failure_logs(self) -> list[Path]: ...

    def headline(self) -> str: ...

    def log_tip(self) -> str: ...


class _SlurmHandle(_Handle):
    """`torchrun`: (nodes, ranks per node) when torchrun launches the ranks (one log per node).
    `runner`: submit's, for the scheduler commands (tests pass a fake)."""

    def __init__(self, job_id: str, job_dir: Path, root: Path, torchrun: tuple[int, int] | None = None,
                 runner: Callable | None = None):
        self.job_id, self.job_dir, self.root, self.torchrun = job_id, job_dir, root, torchrun
        self.runner = runner

    def _runner(self) -> dict:
        return {} if self.runner is None else {"runner": self.runner}

    def status(self):
        from slurmtorch.submit import scheduler as sub

        return sub.job_status(self.job_id, self.root, **self._runner())

    def cancel(self) -> None:
        from slurmtorch.submit import scheduler as sub
        from slurmtorch.errors import SubmitError

        try:
            sub.cancel(self.job_id, **self._runner())
        except SubmitError:
            if not self.status().done:  # else it ended between our look and scancel: fine
                raise

    def log_paths(self, rank: int | None, node: int | None) -> tuple[Path, Path]:
        from slurmtorch.submit import scheduler as sub

        out, err = sub.log_names(self.torchrun, rank, node)
        return self.job_dir / out, self.job_dir / err

    def failure_logs(self) -> list[Path]:
        return sorted(self.job_dir.glob("*.err"))

    def headline(self) -> str:
        return _headline(self.job_dir / "batch.out")

    def log_tip(self) -> str:
        return f"see: slurmtorch logs {self.job_id} --rank 0 (or --batch); folder {self.job_dir}"


class _LocalHandle(_Handle):
    """The rendered mpirun script, run here in its own process group (so cancel reaches all of it)."""

    def __init__(self, job_id: str, workdir: Path, pgid: int):
        self.job_id, self.workdir, self.pgid = job_id, workdir, pgid

    @classmethod
    def start(cls, script: str, workdir: Path, run_id: str) -> _LocalHandle:
        from slurmtorch import shell
        from slurmtorch.submit import scheduler as sub
        from slurmtorch.errors import SubmitError

        # `set -m`: the background job gets its own process group. It runs the script
        # (a file: one argument is limited to 128 KiB), then records its exit code
        # (tmp + rename); the outer shell returns at once.
        try:
            sub.write_new(workdir / "mpirun.sh", script)
        except OSError as exc:
            raise _workdir_error(exc, workdir) from None
        inner = ('bash "$1/mpirun.sh" </dev/null >"$1/launcher.out" 2>&1; '
                 'printf "%s\\n" "$?" >"$1/exit-code.tmp"; mv -f "$1/exit-code.tmp" "$1/exit-code"')
        pidfile = shell.quote(str(workdir / "launcher.pid"))
        wrapper = (f"set -m\nbash -c {shell.quote(inner)} slurmtorch-local "
                   f"{shell.quote(str(workdir))} </dev/null >/dev/null 2>&1 &\n"
                   f"printf '%s\\n' \"$!\" >{pidfile}\n")
        rc = sub.run_local(wrapper, workdir / "start.sh")
        try:
            pgid = int((workdir / "launcher.pid").read_text())
        except (OSError, ValueError):
            raise SubmitError(f"could not start mpirun here (bash exited {rc})") from None
        return cls(f"local-{run_id}", workdir, pgid)

    def _exit_code(self) -> int | None:
        try:
            return int((self.workdir / "exit-code").read_text().strip())
        except (OSError, ValueError):
            return None

    def status(self):
        from slurmtorch.submit import scheduler as sub

        code = self._exit_code()
        if (self.workdir / "cancelled").exists():
            return sub.JobStatus(self.job_id, "CANCELLED", code, source="local")
        if code is None and _group_alive(self.pgid):
            return sub.JobStatus(self.job_id, "RUNNING", None, nodes="localhost", source="local")
        code = self._exit_code()  # it may have ended between the two looks
        if code is None:
            return sub.JobStatus(self.job_id, "FAILED", None, "mpirun ended without an exit code", source="local")
        return sub.JobStatus(self.job_id, "COMPLETED" if code == 0 else "FAILED", code, source="local")

    def cancel(self) -> None:
        (self.workdir / "cancelled").touch()
        # mpirun forwards SIGTERM to its ranks; whatever is left after the grace gets SIGKILL.
        for sig, grace in ((signal.SIGTERM, CANCEL_GRACE_S), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                if not _group_alive(self.pgid):
                    return
                time.sleep(0.05)

    def log_paths(self, rank: int | None, node: int | None) -> tuple[Path, Path]:
        from slurmtorch.submit import scheduler as sub

        out, err = sub.log_names(None, rank, node)  # mpirun here: `_runfn` writes rank-R.out|err
        return self.workdir / out, self.workdir / err

    def failure_logs(self) -> list[Path]:
        return [*sorted(self.workdir.glob("rank-*.err")), self.workdir / "launcher.out"]

    def headline(self) -> str:
        return _headline(self.workdir / "launcher.out")

    def log_tip(self) -> str:
        return f"see {self.workdir / 'launcher.out'} and rank-*.out|err there"


# --------------------------------------------------------------------------- helpers


def _prepare(target: Any, args: tuple, kwargs: dict) -> tuple[dict, bytes | None, str]:
    """(meta, payload, name) for a function or a file; raises before anything is written."""
    if isinstance(target, (str, os.PathLike)):
        if kwargs:
            raise SpecError(f"a file takes command-line arguments only, got keyword arguments {sorted(kwargs)}",
                            tip='pass them as strings, e.g. run("train.py", "--lr", "0.1")')
        from slurmtorch.submit.spec import split_script

        script, argv = split_script([os.fspath(target), *(str(a) for a in args)], None)
        return {"kind": "file", "script": script, "args": argv}, None, Path(script).name
    if not callable(target):
        raise SpecError(f"run() takes a function or the path of a Python file, got {type(target).__name__}")
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    meta = {"kind": "function", "name": name, "python": list(sys.version_info[:2])}
    return meta, pickle_call(target, args, kwargs), name


def _make_workdir(workdir: Path) -> None:
    """`$SLURMTORCH_HOME/distributor/<run>`: private (0700), like everything under it;
    missing levels above it (SLURMTORCH_HOME) never world-writable, whatever the umask."""
    from slurmtorch.submit import scheduler as sub

    parent = workdir.parent
    sub.ensure_folder(parent.parent)
    parent.mkdir(exist_ok=True, mode=0o700)
    if parent.stat().st_mode & 0o022:
        os.chmod(parent, 0o700)
    os.mkdir(workdir, 0o700)
    os.chmod(workdir, 0o700)  # mkdir's mode is masked by the umask


def _workdir_error(exc: OSError, workdir: Path):
    from slurmtorch.submit import scheduler as sub

    return sub.folder_error(exc, workdir.parent, "run folder")


def _env_items(env: Mapping[str, Any] | Iterable[str] | None) -> tuple[str, ...]:
    if env is None:
        return ()
    if isinstance(env, Mapping):
        return tuple(f"{k}={v}" for k, v in env.items())
    if isinstance(env, str):
        return (env,)
    return tuple(str(e) for e in env)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _job_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", name.rsplit(".", 1)[-1] if not name.endswith(".py") else name[:-3])
    return cleaned.strip("_") or "distributor"


def _loopback_interface() -> str | None:
    import socket

    try:
        names = [n for _, n in socket.if_nameindex()]
    except OSError:
        return None
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return None


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies do not count: PID 1 may reap late)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    try:
        leader = _proc_stat(proc / str(pgid))
        if leader is not None and leader[1] == pgid and leader[0] != "Z":
            return True
    except OSError:
        pass
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        stat = _proc_stat(entry)
        if stat is not None and stat[1] == pgid and stat[0] not in ("Z", "X"):
            return True
    return False


def _proc_stat(entry: Path) -> tuple[str, int] | None:
    """(state, process group) from /proc/PID/stat; the command name may hold spaces and ')'."""
    try:
        text = (entry / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return (fields[0], int(fields[2])) if len(fields) > 2 else None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _headline(path: Path) -> str:
    """The line of a launcher's log worth one line of an error: the first naming an error,
    else the first that is not decoration (Open MPI frames its messages in dashes)."""
    lines = [ln.strip() for ln in _read_text(path).splitlines() if re.search(r"[A-Za-z0-9]", ln)]
    for line in lines:
        if "error" in line.lower():
            return line
    return lines[0] if lines else ""


def _failure_text(text: str) -> str:
    """A rank's failure report runs to the end of its stderr, but in a shared launcher log
    mpirun's own banner (a line of dashes) or another rank's report may follow."""
    end = re.search(r"^(-{10,}|rank \d+ on \S+ failed:|prterun |srun: )", text, re.M)
    return text[:end.start()] if end else text


def _say(text: str) -> None:
    print(f"slurmtorch: {text}", file=sys.stderr, flush=True)
