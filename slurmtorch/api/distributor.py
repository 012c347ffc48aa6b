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
`python -m slurmtorch.bootstrap ... -m slurmtorch.bootstrap.runfn WORKDIR`; `runfn` loads the
cloudpickled `(fn, args, kwargs)` from WORKDIR, runs it, and answers through files
there. WORKDIR is the run folder (`runfolder`).

The pieces, one idea each: `layout` (how many nodes, ranks on each; `nodes=None` packs
ranks onto the fewest nodes), `payload` (what is sent, and what cannot be pickled),
`job` (`Job`, `JobFailed`, `RemoteError`), `handles` (Slurm or mpirun here).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from slurmtorch import protocol
from slurmtorch.api.clusterjob import ClusterJob
from slurmtorch.api.job import Job, JobFailed, RemoteError, checked_answer, say, stopped
from slurmtorch.api.layout import Layout, plan_layout
from slurmtorch.api.payload import prepare
from slurmtorch.usecases.runfolder import create_run_folder, run_folder_error
from slurmtorch.bootstrap import runfn
from slurmtorch.errors import SpecError, typed
from slurmtorch.options import API_KEYWORDS
from slurmtorch.usecases import distribute as distributing
from slurmtorch.usecases import launch

# Job, its errors and Layout live in their own modules; named here too, where docs/python-api.md sends users.
__all__ = ["Distributor", "Job", "JobFailed", "RemoteError", "Layout", "plan_layout"]

# The keywords the table of options (`Options`, api=True) offers the Distributor; those
# `_spec` fills itself, and the rest passed through to `Options` as given (the rank
# layout is ours).
SCHEDULER_OPTIONS = API_KEYWORDS
_FILLED = ("partition", "time", "account", "qos", "job_name", "env", "cpus_per_task", "launcher", "timeout")
PASSED_ON = tuple(name for name in SCHEDULER_OPTIONS if name not in _FILLED)


# --------------------------------------------------------------------------- the API


class Distributor:
    """Run a function or a file on `num_processes` ranks; see the module docstring.

    `local_mode=True` runs the ranks on this machine with mpirun (site `local` unless
    `site` is given); otherwise a Slurm job on `site` (default `$SLURMTORCH_SITE`).
    `scheduler_options` are the CLI's: partition, time, account, qos, job_name,
    env (mapping or `K=V` strings), cpus_per_task, launcher, timeout (the process
    group's, in seconds), and sbatch's constraint, mem, mem_per_cpu, mem_per_gpu,
    exclusive, dependency, begin, gres, reservation, nodelist, exclude, mail_type,
    mail_user, comment, sbatch_args and srun_args (lists of `--option=value`), cluster_spec
    (CLUSTER_SPEC's shape: ai-platform or vertex), and recovery's
    max_restarts, spare_nodes, hang_timeout and replace_straggler (see `slurmtorch sbatch --help`; the
    function resumes from `slurmtorch.checkpoint_dir()` when `slurmtorch.restart_count()`
    is above 0). `progress=False` silences run()'s state lines and rank 0's streamed output.
    `cluster`: run() or submit() it on that cluster of ~/.config/slurmtorch/clusters.yaml over
    SSH, with the cluster's site (default $SLURMTORCH_CLUSTER, unless `local_mode`); docs/python-api.md.
    `answer="json"`: rank 0's value comes back as JSON (plain data, refused in one line if it
    is not), so nothing the job or the cluster sends is unpickled here; default "pickle".
    """

    def __init__(self, num_processes: int = 1, nodes: int | None = None, use_gpu: bool = False,
                 local_mode: bool = False, site: str | os.PathLike | None = None, preset: str | None = None,
                 backend: str = "auto", *, progress: bool = True, cluster: str | None = None,
                 answer: str = "pickle", **scheduler_options: Any):
        for name, value in (("num_processes", num_processes), ("nodes", nodes)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise SpecError(f"{name} must be a positive integer, got {value!r}")
        unknown = sorted(set(scheduler_options) - set(SCHEDULER_OPTIONS))
        if unknown:
            raise SpecError(f"unknown Distributor option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}",
                            tip=f"scheduler options: {', '.join(SCHEDULER_OPTIONS)}")
        checked_answer(answer)
        if local_mode and cluster:
            raise SpecError("local_mode runs here, cluster= runs on a cluster: give one of them")
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
        self.answer = answer
        self.cluster = cluster or (None if local_mode else os.environ.get(protocol.CLUSTER) or None)
        self.scheduler_options = dict(scheduler_options)
        self._env = _env_items(scheduler_options.get("env"))

    def __repr__(self) -> str:
        # env values are often secrets, and this repr is script.sh's `# Run with:` line: names only.
        shown = {**self.scheduler_options, "env": [e.partition("=")[0] + "=..." for e in self._env]} \
            if "env" in self.scheduler_options else self.scheduler_options
        opts = "".join(f", {k}={v!r}" for k, v in shown.items())
        return (f"Distributor(num_processes={self.num_processes}, nodes={self.nodes}, use_gpu={self.use_gpu}, "
                f"local_mode={self.local_mode}, site={self.site!r}, preset={self.preset!r}, "
                f"backend={self.backend!r}{opts}" + (f", answer={self.answer!r})" if self.answer != "pickle" else ")"))

    # -- public

    def run(self, target: Callable | str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
        """Run and block; rank 0's return value (a function) or None (a file).

        Raises RemoteError (rank, host, traceback) when the rank that failed first raised,
        JobFailed when the job ended otherwise (its rank/host: a rank that died, and how, is
        in its message). An interrupt (Ctrl-C) cancels the job and says so in one line, then
        ends the program (SystemExit 130; KeyboardInterrupt in a REPL or notebook). With `cluster=NAME` (or
        $SLURMTORCH_CLUSTER), the job is submitted and waited for on that cluster over SSH, and
        the answer (or the error) comes back here.
        """
        if self.cluster:
            from slurmtorch.remote import distribute, forward  # lazy: only cluster= needs ssh's edge

            if forward.elsewhere(self.cluster):
                try:
                    return distribute.run(self, _sent(target, args, kwargs, self.cluster))
                except KeyboardInterrupt as stop:  # the cluster side cancelled it and said so
                    raise stopped(str(stop) or f"the run on cluster {self.cluster} was interrupted") from None
        job = self.submit_prepared(*prepare(target, args, kwargs))  # no file, no job before prepare passes
        try:
            return job.result(stream=self.progress)
        except JobFailed:
            raise
        except KeyboardInterrupt:
            raise stopped(job.cancel_on_interrupt()) from None
        except BaseException:
            job._cancel_quietly()
            raise

    def submit(self, target: Callable | str | os.PathLike, *args: Any, **kwargs: Any) -> Job | ClusterJob:
        """Start the job and return at once; the Job answers state/result/logs/cancel, and
        `Job.attach(job.job_id)` finds it again from another process. With `cluster=`, the job
        is submitted there and each question goes over SSH (a `ClusterJob`)."""
        if self.cluster:
            from slurmtorch.remote import distribute, forward  # lazy: only cluster= needs ssh's edge

            if forward.elsewhere(self.cluster):
                return ClusterJob(distribute.submit(self, _sent(target, args, kwargs, self.cluster)), self.cluster,
                                  answer=self.answer)
        meta, payload, name = prepare(target, args, kwargs)  # no file, no job before this passes
        return self.submit_prepared(meta, payload, name)

    def submit_prepared(self, meta: dict, payload: bytes | None, name: str) -> Job:
        """`submit` of a call already pickled (`prepare`'s): a laptop's, on its cluster's side."""
        run_id, workdir = distributing.new_run()
        kind = "mpirun" if self.local_mode else "sbatch"
        rendered = launch.rendered(self._spec(launch.site_for(kind, self.site), name, workdir, kind))
        spec = rendered.spec

        meta["redirect_logs"] = self.local_mode
        meta["answer"] = self.answer
        if self.local_mode:
            launch.check_launcher(spec, os.environ)
        try:
            create_run_folder(workdir)
        except OSError as exc:
            raise run_folder_error(exc, workdir) from None
        try:
            try:
                runfn.write_atomic(str(workdir / runfn.META), json.dumps(meta).encode())
                if payload is not None:
                    runfn.write_atomic(str(workdir / runfn.PAYLOAD), payload)
            except OSError as exc:
                raise run_folder_error(exc, workdir) from None
            handle = distributing.start(rendered, workdir, run_id,
                                        lambda line: print(line, file=sys.stderr, flush=True))
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        job = Job(handle, workdir, meta["kind"], name, spec.ntasks, self.answer)
        if self.progress:
            where = "here (mpirun)" if self.local_mode else (
                f"{spec.nodes} node{'s' if spec.nodes > 1 else ''} x {spec.ntasks_per_node} on site {spec.site}")
            say(f"job {job.job_id}: {name} on {spec.ntasks} rank{'s' if spec.ntasks > 1 else ''}, {where}")
        return job

    # -- building the spec: the CLI's Options, filled from our arguments

    def _spec(self, site, name: str, workdir: Path, kind: str):
        o = self.scheduler_options
        given = dict(
            module="slurmtorch.bootstrap.runfn", script_args=(str(workdir),), preset=self.preset,
            time=_opt_str(o.get("time")), account=o.get("account"), qos=o.get("qos"),
            job_name=o.get("job_name") or _job_name(name), timeout=o.get("timeout"),
            cpus_per_task=o.get("cpus_per_task"), backend=None if self.backend == "auto" else self.backend,
            **{k: _opt_tuple(o[k]) if k in ("sbatch_args", "srun_args") else o[k] for k in PASSED_ON if k in o},
            python=sys.executable, command=(f"{self!r}.run({name})",),
        )
        if kind == "mpirun":
            if self.backend == "auto" and self.use_gpu:
                given["backend"] = "nccl"  # the local site describes no GPUs; the user says there are
            return distributing.spec(site, given, "mpirun", None, None, ntasks=self.num_processes, launcher="mpirun",
                                   env=(*self._local_defaults(), *self._env))

        def plan(preset, partition, node):  # the rank layout is ours, on the partition and node type build_spec uses
            layout = plan_layout(self.num_processes, self.nodes if self.nodes is not None else preset.get("nodes"),
                                 self.use_gpu, node.gpus, node.cpus, partition.max_nodes,
                                 o.get("cpus_per_task") or preset.get("cpus_per_task"),
                                 where=f"node type {node.name!r} of partition {partition.name!r}")
            return layout.nodes, layout.ranks_per_node, layout.gpus_per_node

        return distributing.spec(site, given, "sbatch", plan, o.get("partition") or None, launcher=o.get("launcher"),
                               env=self._env)

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


# --------------------------------------------------------------------------- helpers


def _env_items(env: Mapping[str, Any] | Iterable[str] | None) -> tuple[str, ...]:
    if env is None:
        return ()
    if isinstance(env, Mapping):
        return tuple(f"{k}={v}" for k, v in env.items())
    if isinstance(env, str):
        return (env,)
    return tuple(str(e) for e in env)


def _opt_tuple(value: Any) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _job_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", name.rsplit(".", 1)[-1] if not name.endswith(".py") else name[:-3])
    return cleaned.strip("_") or "distributor"


def _loopback_interface() -> str | None:
    try:
        names = [n for _, n in socket.if_nameindex()]
    except OSError:
        return None
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return None


def _sent(target: Any, args: tuple, kwargs: dict, cluster: str) -> tuple[dict, bytes | None, str]:
    """A call for `cluster=`, pickled here (`prepare`); a file goes with `sbatch --cluster`, which syncs its tree."""
    if isinstance(target, (str, os.PathLike)):
        raise SpecError("Distributor(cluster=...) sends functions; a file goes with its code",
                        tip=f"{typed(f'sbatch {os.fspath(target)}', cluster)} ... syncs its tree and runs it")
    return prepare(target, args, kwargs)
