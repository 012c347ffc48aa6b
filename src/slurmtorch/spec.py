"""`JobSpec`: everything a template needs, checked against the site before rendering.

`build_spec(site, options)` is pure: no filesystem, no subprocess, no clock. The CLI
does the edge checks (the SCRIPT exists, the interpreter path, the job folder root)
and passes their results in `Options`.
"""

from __future__ import annotations

import os

import re
from dataclasses import dataclass, field
from typing import Any

from . import __version__, shell
from .errors import SpecError
from .sites import BACKENDS, LAUNCHERS, Container, Site, parse_time

_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
KINDS = ("sbatch", "mpirun")
MAX_JOB_NAME = 1024  # slurmctld's limit for a job name


@dataclass(frozen=True)
class Options:
    """What the user asked for; None means "take the preset's, else the default"."""

    kind: str = "sbatch"
    script: str | None = None
    module: str | None = None
    script_args: tuple[str, ...] = ()
    preset: str | None = None
    partition: str | None = None
    nodes: int | None = None
    ntasks_per_node: int | None = None
    ntasks: int | None = None  # mpirun -n
    hostfile: str | None = None
    gpus_per_node: int | None = None
    cpus_per_task: int | None = None
    time: str | None = None
    account: str | None = None
    qos: str | None = None
    job_name: str | None = None
    backend: str | None = None
    launcher: str | None = None
    timeout: int | None = None
    env: tuple[str, ...] = ()  # raw K=V strings as typed
    requeue: bool | None = None  # --requeue/--no-requeue; --signal implies --requeue
    signal: str | None = None  # --signal [R:]SIG[@SECONDS], e.g. USR1@60
    python: str = "python3"  # the submitting interpreter; the site's `python` wins
    job_root: str = "~/.slurmtorch/jobs"  # absolute in practice; the CLI resolves it
    command: tuple[str, ...] = ()  # argv that made this, for the provenance header


@dataclass(frozen=True)
class JobSpec:
    """A fully resolved job: rendering it needs nothing else."""

    kind: str
    site: str
    preset: str | None
    partition: str | None
    nodes: int
    ntasks_per_node: int
    ntasks: int
    gpus_per_node: int
    cpus_per_task: int
    time: str | None
    account: str | None
    qos: str | None
    job_name: str
    backend: str
    launcher: str
    mpi_plugin: str
    env: tuple[tuple[str, str], ...]
    modules: tuple[str, ...]
    directives: tuple[tuple[str, str | bool], ...]  # sorted; values unquoted
    prologue: tuple[str, ...]
    epilogue: tuple[str, ...]
    python: str
    script: str | None
    module: str | None
    script_args: tuple[str, ...]
    timeout: int
    job_root: str
    container: Container | None = None
    hostfile: str | None = None
    templates: str | None = None
    command: tuple[str, ...] = ()
    version: str = __version__
    requeue: bool = False
    signal: str | None = None  # as Slurm reads it, e.g. USR1@60
    extra: tuple[tuple[str, Any], ...] = field(default=())


def parse_env(items: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
    """`K=V` strings -> pairs; the name must be a plain shell name."""
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SpecError(f"malformed --env {item!r}: expected NAME=VALUE", tip="e.g. --env NCCL_DEBUG=INFO")
        shell.env_name(name)
        shell.quote(value)  # refuses NUL
        out.append((name, value))
    return out


# Signals a rank can catch and survive by default action (KILL/STOP cannot be caught).
PREEMPT_SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "QUIT", "ALRM", "URG", "XCPU", "PWR")
_SIGNAL_RE = re.compile(r"^(?:(?P<flags>[A-Z]+):)?(?P<sig>[A-Za-z0-9]+)(?:@(?P<time>[0-9]+))?$")


def parse_signal(text: str, what: str = "--signal") -> str:
    """Check `--signal [R:]SIG[@SECONDS]` and normalise it to Slurm's form (`USR1@60`).

    `B:` (only the batch shell) is refused: slurmtorch's handler runs in the ranks,
    and a bare batch shell dies of SIGUSR1.
    """
    m = _SIGNAL_RE.match(str(text).strip())
    tip = f"e.g. --signal USR1@60 (signals: {', '.join(PREEMPT_SIGNALS)}; @ seconds before the time limit)"
    if not m:
        raise SpecError(f"invalid {what} {text!r}", tip=tip)
    flags, sig, when = m.group("flags"), m.group("sig").upper(), m.group("time")
    if flags is not None and flags != "R":
        raise SpecError(f"{what} {text!r}: only the R: flag is supported",
                        tip="B: would signal only the batch shell, not the ranks that run the hooks")
    sig = sig[3:] if sig.startswith("SIG") else sig
    if sig not in PREEMPT_SIGNALS:
        raise SpecError(f"{what} {text!r}: {sig} cannot be used for preemption", tip=tip)
    if when is not None and int(when) > 65535:
        raise SpecError(f"{what} {text!r}: at most 65535 seconds before the time limit", tip=tip)
    return f"{'R:' if flags else ''}{sig}{'@' + str(int(when)) if when is not None else ''}"


def _positive(name: str, value: int, tip: str | None = None) -> int:
    if value < 1:
        raise SpecError(f"{name} must be at least 1, got {value}", tip=tip)
    return value


def build_spec(site: Site, options: Options) -> JobSpec:
    """Resolve options against the site's preset, partition and node type, or raise SpecError."""
    o = options
    if o.kind not in KINDS:
        raise SpecError(f"unknown job kind {o.kind!r}")
    if (o.script is None) == (o.module is None):
        raise SpecError("give exactly one of SCRIPT or -m MODULE", tip="e.g. slurmtorch sbatch train.py, or -m pkg.train")
    if o.module is not None and not _MODULE_RE.match(o.module):
        raise SpecError(f"invalid module name {o.module!r}", tip="a dotted Python module path, e.g. pkg.train")

    preset = site.preset(o.preset)

    def pick(name: str, default: Any = None) -> Any:
        value = getattr(o, name)
        if value is not None:
            return value
        return preset.get(name, default)

    partition = site.partition(pick("partition"))
    node = site.node_type(partition.node_type)

    launcher = pick("launcher") or site.launcher
    if launcher not in LAUNCHERS:
        raise SpecError(f"unknown launcher {launcher!r}", tip=f"valid launchers: {', '.join(LAUNCHERS)}")
    backend = pick("backend") or "auto"
    if backend not in BACKENDS:
        raise SpecError(f"unknown backend {backend!r}", tip=f"valid backends: {', '.join(BACKENDS)}")
    if site.container is not None and site.container.runtime == "pyxis" and launcher != "srun":
        raise SpecError(f"site {site.name!r} runs ranks in a pyxis container, which needs --launcher srun")

    gpus = pick("gpus_per_node", node.gpus)
    if gpus < 0:
        raise SpecError(f"--gpus-per-node must not be negative, got {gpus}")
    if gpus > node.gpus:
        raise SpecError(
            f"{gpus} GPUs per node requested, but node type {node.name!r} of partition {partition.name!r} has {node.gpus}",
            tip=f"use --gpus-per-node {node.gpus} or less, or another partition",
        )
    ntasks_per_node = _positive("--ntasks-per-node", pick("ntasks_per_node", gpus or 1))
    default_cpus = max(1, node.cpus // ntasks_per_node)
    cpus_per_task = _positive("--cpus-per-task", pick("cpus_per_task", default_cpus))
    if ntasks_per_node * cpus_per_task > node.cpus:
        raise SpecError(
            f"{ntasks_per_node} tasks x {cpus_per_task} CPUs per node exceeds the {node.cpus} CPUs "
            f"of node type {node.name!r}",
            tip=f"use --cpus-per-task {default_cpus} or fewer tasks per node",
        )

    if o.kind == "sbatch":
        nodes = _positive("--nodes", pick("nodes", 1))
        if nodes > partition.max_nodes:
            raise SpecError(
                f"{nodes} nodes requested, but partition {partition.name!r} allows at most {partition.max_nodes}",
                tip=f"use --nodes {partition.max_nodes} or less, or another partition",
            )
        ntasks = nodes * ntasks_per_node
    else:
        n = o.ntasks if o.ntasks is not None else preset.get("ntasks")
        if n is None:
            raise SpecError("mpirun needs the number of ranks", tip="pass -n N")
        ntasks = _positive("-n", n)
        nodes = 1

    time = pick("time", partition.default_time)
    if time is not None:
        time = str(time)
        try:
            seconds = parse_time(time)
        except ValueError:
            raise SpecError(
                f"invalid --time {time!r}",
                tip="Slurm formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS",
            ) from None
        if seconds <= 0:
            raise SpecError(f"--time {time!r} is zero")
        if o.kind == "sbatch" and seconds > parse_time(partition.max_time):
            raise SpecError(
                f"time limit {time} exceeds the maximum {partition.max_time} of partition {partition.name!r}",
                tip=f"use --time {partition.max_time} or less",
            )

    timeout = _positive("--timeout", pick("timeout", site.timeout))

    if backend == "auto":
        # NCCL when the ranks own GPUs; Gloo otherwise. `mpi` is only ever chosen explicitly.
        backend = "nccl" if gpus > 0 else "gloo"

    env: dict[str, str] = {}
    for key, value in node.network_env():
        env[key] = value
    for key, value in site.env:
        env[key] = value
    # The node type's own env is the admin's last word for that hardware.
    for key, value in node.env:
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    for key, value in preset.get("env", ()):
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    for key, value in parse_env(o.env):
        env[key] = value

    signal = pick("signal")
    if signal is not None:
        signal = parse_signal(signal, "--signal" if o.signal is not None else f"preset {o.preset or 'default'!r} signal")
    requeue = pick("requeue")
    requeue = bool(signal) if requeue is None else bool(requeue)
    if signal and o.kind == "sbatch":
        # The rank's handler (slurmtorch.preempt.install) reads these.
        env["SLURMTORCH_PREEMPT_SIGNAL"] = signal.split("@", 1)[0].rsplit(":", 1)[-1]
        env["SLURMTORCH_PREEMPT_REQUEUE"] = "1" if requeue else "0"

    job_name = o.job_name or (o.module if o.module else _stem(o.script))
    if len(job_name) > MAX_JOB_NAME:
        # slurmctld refuses longer names ("Pathname ... too long") only after submission.
        raise SpecError(f"job name is {len(job_name)} characters; Slurm allows at most {MAX_JOB_NAME}",
                        tip="pass a shorter --job-name")
    modules = tuple(site.modules) + tuple(preset.get("modules", ()))

    directives: dict[str, str | bool] = dict(site.directives)
    directives.update(dict(preset.get("directives", ())))
    account = pick("account")
    qos = pick("qos")
    if o.kind == "sbatch":
        if launcher == "torchrun":
            # One torchrun agent per node spawns the ranks; it gets the node's CPUs.
            directives["ntasks-per-node"] = "1"
            directives["cpus-per-task"] = str(ntasks_per_node * cpus_per_task)
        else:
            directives["ntasks-per-node"] = str(ntasks_per_node)
            directives["cpus-per-task"] = str(cpus_per_task)
        directives["nodes"] = str(nodes)
        directives["partition"] = partition.name
        directives["job-name"] = job_name
        if gpus:
            directives["gpus-per-node"] = str(gpus)
        if time is not None:
            directives["time"] = time
        if account:
            directives["account"] = account
        if qos:
            directives["qos"] = qos
        if requeue:
            directives["requeue"] = True
            # A requeued job runs again in the same folder: keep every run's output.
            directives["open-mode"] = "append"
        else:
            # Slurm's default (JobRequeue=1) silently reruns a batch job from the start
            # when a node fails; without a checkpoint-aware --requeue it should end
            # (NODE_FAIL) and say so instead.
            directives["no-requeue"] = True
        if signal:
            directives["signal"] = signal
        # The batch step's own output goes into the job folder; `%` in a user's path
        # would be read as a Slurm filename pattern, so it is doubled.
        directives["output"] = f"{slurm_pattern_escape(o.job_root)}/%j/batch.out"
    for name, value in directives.items():
        if value is not True:
            shell.directive_value(value, what=f"#SBATCH --{name} value")

    return JobSpec(
        kind=o.kind,
        site=site.name,
        preset=o.preset if o.preset is not None else ("default" if preset else None),
        partition=partition.name if o.kind == "sbatch" else None,
        nodes=nodes,
        ntasks_per_node=ntasks_per_node,
        ntasks=ntasks,
        gpus_per_node=gpus,
        cpus_per_task=cpus_per_task,
        time=time,
        account=account,
        qos=qos,
        job_name=job_name,
        backend=backend,
        launcher=launcher,
        mpi_plugin=site.mpi_plugin,
        env=tuple(env.items()),
        modules=modules,
        directives=tuple(sorted(directives.items())),
        prologue=site.prologue,
        epilogue=site.epilogue,
        python=site.python or o.python,
        script=o.script,
        module=o.module,
        script_args=tuple(o.script_args),
        timeout=timeout,
        job_root=o.job_root,
        container=site.container,
        hostfile=o.hostfile,
        templates=site.templates,
        command=tuple(o.command),
        requeue=requeue if o.kind == "sbatch" else False,
        signal=signal if o.kind == "sbatch" else None,
    )


def slurm_pattern_escape(path: str) -> str:
    """Escape `%` for Slurm's --output/--error filename patterns (`%j`, `%t`, ...)."""
    return path.replace("%", "%%")


def _stem(script: str | None) -> str:
    name = (script or "job").rstrip("/").rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0] if "." in name[1:] else name
    return stem or "job"


def split_script(script_and_args: list[str] | None, module: str | None) -> tuple[str | None, list[str]]:
    """SCRIPT [ARGS...] or -m MODULE [ARGS...]; SCRIPT must exist and becomes absolute.

    The one filesystem check of the spec side, called at the edge (CLI, Distributor)
    before `build_spec`, so a missing SCRIPT never reaches a job folder.
    """
    items = list(script_and_args or [])
    if module is not None:
        return None, items
    if not items:
        raise SpecError("missing SCRIPT", tip="e.g. slurmtorch sbatch train.py -- --lr 0.1, or -m pkg.train")
    script, args = items[0], items[1:]
    if not os.path.isfile(script):
        raise SpecError(f"SCRIPT {script} does not exist", tip="check the path; use -m MODULE for a module")
    return os.path.abspath(script), args
