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

from slurmtorch import __version__
from slurmtorch import shell
from slurmtorch.errors import SpecError
from slurmtorch.submit.sites import BACKENDS, CONTAINER_RUNTIMES, LAUNCHERS, Container, Site, parse_time

_MODULE_RE = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"  # compiled on first use (re's cache): most jobs never need it
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
    roles: tuple[str, ...] = ()  # raw ROLE=COUNT strings (counts in nodes)
    container_image: str | None = None  # default image for every role
    container_runtime: str | None = None  # pyxis | apptainer (default: the site's, else pyxis)
    role_images: tuple[str, ...] = ()  # raw ROLE=IMAGE strings
    array: str | None = None  # Slurm --array text, e.g. 0-19%4 (or %2 with --sweep)
    sweep: tuple[str, ...] = ()  # raw NAME=V1,V2 strings; the grid is their product


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
    # Role job: (role, nodes) in launch order and each role's container (None: none).
    roles: tuple[tuple[str, int], ...] = ()
    role_containers: tuple[tuple[str, Container | None], ...] = ()
    # Job array: Slurm's --array text, the trial ids it selects, and the sweep grid
    # (name, values) with the parameters of every trial id in the array.
    array: str | None = None
    trial_ids: tuple[int, ...] = ()
    sweep: tuple[tuple[str, tuple[str, ...]], ...] = ()
    trials: tuple[tuple[int, tuple[tuple[str, str], ...]], ...] = ()

    @property
    def job_dir_pattern(self) -> str:
        """The job folder below job_root as a Slurm filename pattern."""
        return "%A/trial-%a" if self.array else "%j"


# Variables the batch script sets itself. An --env value for one would be overwritten
# or, worse, win: SLURM_EXPORT_ENV=NONE strips every srun step's environment, and a
# MASTER_ADDR/PORT typed on the submitting host sends the ranks to the wrong rendezvous.
SCRIPT_ENV = frozenset({
    "MASTER_ADDR", "MASTER_PORT", "SLURM_EXPORT_ENV", "SLURMTORCH_JOB_DIR", "SLURMTORCH_PARAMS",
    "SLURMTORCH_PREEMPT_REQUEUE", "SLURMTORCH_PREEMPT_SIGNAL", "SLURMTORCH_ROLES", "SLURMTORCH_STARTED",
    "SLURMTORCH_TRIAL",
})
SCRIPT_ENV_PREFIX = "SLURMTORCH_SWEEP_"


def parse_env(items: tuple[str, ...] | list[str], batch: bool = False) -> list[tuple[str, str]]:
    """`K=V` strings -> pairs; the name must be a plain shell name.

    With `batch`, names the batch script sets itself (SCRIPT_ENV) are refused.
    """
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SpecError(f"malformed --env {item!r}: expected NAME=VALUE", tip="e.g. --env NCCL_DEBUG=INFO")
        shell.env_name(name)
        if batch and (name in SCRIPT_ENV or name.startswith(SCRIPT_ENV_PREFIX)):
            raise SpecError(
                f"--env {name}: the batch script sets {name} itself",
                tip="a site that needs a fixed one sets it in its `env:`" if name.startswith("MASTER_")
                else f"leave --env {name} out; slurmtorch sets it for every job that needs it",
            )
        shell.quote(value, what=f"--env {name} value")  # refuses NUL and non-UTF-8 text
        out.append((name, value))
    return out


# Signals a rank can catch and survive by default action (KILL/STOP cannot be caught).
PREEMPT_SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "QUIT", "ALRM", "URG", "XCPU", "PWR")
_SIGNAL_RE = r"^(?:(?P<flags>[A-Z]+):)?(?P<sig>[A-Za-z0-9]+)(?:@(?P<time>[0-9]+))?$"  # compiled on first use (re's cache): most jobs never need it


def parse_signal(text: str, what: str = "--signal") -> str:
    """Check `--signal [R:]SIG[@SECONDS]` and normalise it to Slurm's form (`USR1@60`).

    `B:` (only the batch shell) is refused: slurmtorch's handler runs in the ranks,
    and a bare batch shell dies of SIGUSR1.
    """
    m = re.match(_SIGNAL_RE, str(text).strip())
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


_ARRAY_RE = (r"^(?P<ranges>[0-9]+(?:-[0-9]+(?::[0-9]+)?)?(?:,[0-9]+(?:-[0-9]+(?::[0-9]+)?)?)*)?"
             r"(?:%(?P<limit>[0-9]+))?$")  # compiled on first use
_SWEEP_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_-]*$"  # compiled on first use (re's cache): most jobs never need it
MAX_ARRAY_INDEX = 1000  # Slurm's default MaxArraySize is 1001
ARRAY_TIP = "e.g. --array 0-19%4 (indices 0..19, at most 4 at a time), --array 1,3,5-7, or --array %2 with --sweep"


def parse_array(text: str, grid: int | None = None) -> tuple[str, tuple[int, ...]]:
    """Check `--array` and expand its indices (pure); returns (Slurm's text, indices).

    With a sweep of `grid` trials the indices must be trial ids (0..grid-1), and a bare
    `%N` means every trial, at most N at a time.
    """
    text = str(text).strip()
    m = re.match(_ARRAY_RE, text)
    if not text or not m:
        raise SpecError(f"malformed --array {text!r}", tip=ARRAY_TIP)
    ranges, limit = m.group("ranges"), m.group("limit")
    if limit is not None and int(limit) < 1:
        raise SpecError(f"--array {text!r}: %{limit} would never run a task", tip=ARRAY_TIP)
    if ranges is None:
        if grid is None:
            raise SpecError(f"--array {text!r} names no indices", tip=ARRAY_TIP)
        ranges = f"0-{grid - 1}" if grid > 1 else "0"
        text = ranges + text
    indices: set[int] = set()
    for part in ranges.split(","):
        lo, _, rest = part.partition("-")
        hi, _, step = rest.partition(":")
        lo_i, hi_i, step_i = int(lo), int(hi) if hi else int(lo), int(step) if step else 1
        if hi_i < lo_i or step_i < 1:
            raise SpecError(f"--array {text!r}: range {part!r} is empty", tip=ARRAY_TIP)
        indices.update(range(lo_i, hi_i + 1, step_i))
    if max(indices) > MAX_ARRAY_INDEX:
        raise SpecError(f"--array {text!r}: index {max(indices)} exceeds Slurm's default limit {MAX_ARRAY_INDEX}",
                        tip=ARRAY_TIP)
    if grid is not None and max(indices) >= grid:
        raise SpecError(f"--array {text!r}: the sweep has {grid} trials (ids 0..{grid - 1}), not {max(indices) + 1}",
                        tip="leave --array out, or give only the limit: --array %2")
    return text, tuple(sorted(indices))


def parse_sweep(items: tuple[str, ...] | list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`NAME=V1,V2` strings -> ((name, values), ...) in the order given (pure)."""
    tip = "e.g. --sweep lr=1e-3,1e-4 --sweep bs=32,64 (a grid: every combination)"
    out: list[tuple[str, tuple[str, ...]]] = []
    for item in items:
        name, sep, values = str(item).partition("=")
        if not sep or not re.match(_SWEEP_NAME_RE, name):
            raise SpecError(f"malformed --sweep {item!r}: expected NAME=V1,V2,... "
                            "(NAME: letters, digits, '_' or '-')", tip=tip)
        if name in dict(out) or shell_name(name) in {shell_name(n) for n, _ in out}:
            raise SpecError(f"--sweep {name!r} given twice", tip=tip)
        vals = tuple(values.split(","))
        if any(v == "" for v in vals):
            raise SpecError(f"malformed --sweep {item!r}: an empty value", tip=tip)
        if len(set(vals)) != len(vals):
            raise SpecError(f"--sweep {item!r} repeats a value", tip=tip)
        for v in vals:
            shell.quote(v, what=f"--sweep {name} value")  # refuses NUL and non-UTF-8 text
        out.append((name, vals))
    return tuple(out)


def shell_name(name: str) -> str:
    """Sweep parameter NAME -> its variable SLURMTORCH_SWEEP_<NAME> (upper case, '-' -> '_')."""
    return "SLURMTORCH_SWEEP_" + name.upper().replace("-", "_")


def sweep_grid(sweep: tuple[tuple[str, tuple[str, ...]], ...]) -> list[tuple[tuple[str, str], ...]]:
    """Every combination, the last parameter varying fastest: trial k is the k-th."""
    import itertools

    if not sweep:
        return []
    names = [n for n, _ in sweep]
    return [tuple(zip(names, combo)) for combo in itertools.product(*(v for _, v in sweep))]


def sweep_args(params: tuple[tuple[str, str], ...]) -> list[str]:
    """A trial's parameters as script arguments: `--lr 1e-3 --bs 32`."""
    return [x for name, value in params for x in (f"--{name}", value)]


def _container(base: Container | None, runtime: str, image: str) -> Container:
    """A container of `image` under `runtime` that keeps the site's mounts and interpreter."""
    return Container(runtime=runtime, image=image, mounts=base.mounts if base else (),
                     python=base.python if base else None)


def parse_role_images(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    from slurmtorch.roles import ROLE_ORDER

    out: dict[str, str] = {}
    for item in items:
        role, sep, image = str(item).partition("=")
        if not sep or not image:
            raise SpecError(f"malformed --role-image {item!r}: expected ROLE=IMAGE",
                            tip="e.g. --role-image ps=nvcr.io/org/ps:1.0")
        if role not in ROLE_ORDER:
            raise SpecError(f"unknown role {role!r} in --role-image {item!r}", tip=f"roles: {', '.join(ROLE_ORDER)}")
        shell.directive_value(image, what="--role-image")  # no newline/NUL
        out[role] = image
    return out


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
    if o.module is not None and not re.match(_MODULE_RE, o.module):
        raise SpecError(f"invalid module name {o.module!r}", tip="a dotted Python module path, e.g. pkg.train")

    # Checked here to name the value; rendering quotes each of them again.
    if o.script is not None:
        shell.quote(o.script, what="SCRIPT path")
    for i, arg in enumerate(o.script_args, 1):
        shell.quote(arg, what=f"script argument {i}")

    if o.kind == "sbatch" and "\\" in o.job_root:
        # Slurm turns off every %-pattern in an --output/--error path that holds a
        # backslash: each rank's log would be one literal `rank-%t.out` in `%j`.
        raise SpecError(f"job folder root {o.job_root!r} contains a backslash, which turns off Slurm's "
                        "%j/%t patterns in log paths", tip="set SLURMTORCH_HOME to a path without '\\'")

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

    layout = None
    if o.roles:
        from slurmtorch.errors import BootstrapError
        from slurmtorch.roles import parse_roles

        if o.kind != "sbatch":
            raise SpecError("--role needs slurmtorch sbatch")
        try:
            layout = parse_roles(list(o.roles))
        except BootstrapError as exc:
            raise SpecError(exc.message, tip=exc.tip) from None
        if launcher != "srun":
            raise SpecError(f"--role runs one srun step per role; launcher {launcher!r} cannot",
                            tip="use --launcher srun")
        if ntasks_per_node != 1:
            raise SpecError(f"--role counts nodes, one task each; --ntasks-per-node {ntasks_per_node} cannot apply",
                            tip="leave --ntasks-per-node out (a role replica is a node, as on AI Platform)")
        if o.nodes is not None and o.nodes != layout.total:
            raise SpecError(f"--nodes {o.nodes} but the roles add up to {layout.total} nodes",
                            tip="leave --nodes out with --role")
        if layout.total > partition.max_nodes:
            raise SpecError(
                f"roles {layout.format()} need {layout.total} nodes, but partition {partition.name!r} "
                f"allows at most {partition.max_nodes}",
                tip="lower the role counts, or use another partition",
            )
    if o.kind == "sbatch":
        nodes = layout.total if layout else _positive("--nodes", pick("nodes", 1))
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
    for key, value in parse_env(o.env, batch=o.kind == "sbatch"):
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

    # Sweeps and arrays: one Slurm job array; each array task is one multi-node job.
    sweep = parse_sweep(o.sweep)
    grid = sweep_grid(sweep)
    array, trial_ids = None, ()
    if o.array is not None or sweep:
        if o.kind != "sbatch":
            raise SpecError("--array and --sweep need slurmtorch sbatch")
        array, trial_ids = parse_array(o.array if o.array is not None else "%" + str(len(grid)),
                                       len(grid) if sweep else None)
    trials = tuple((t, grid[t] if grid else ()) for t in trial_ids)

    # Containers: the site's, or --container-image/--container-runtime; --role-image per role.
    role_images = parse_role_images(o.role_images)
    base = site.container
    runtime = o.container_runtime or (base.runtime if base else "pyxis")
    if runtime not in CONTAINER_RUNTIMES:
        raise SpecError(f"unknown --container-runtime {runtime!r}", tip=f"use one of {', '.join(CONTAINER_RUNTIMES)}")
    if o.container_image is not None:
        shell.directive_value(o.container_image, what="--container-image")
        base = _container(base, runtime, o.container_image)
    elif base is not None and o.container_runtime is not None:
        base = _container(base, runtime, base.image)
    if role_images and not layout:
        raise SpecError("--role-image needs --role", tip="use --container-image for a job without roles")
    role_containers: list[tuple[str, Container | None]] = []
    if layout:
        site_roles = dict(getattr(site.container, "roles", ()) or ())
        for role, _ in layout.roles:
            image = role_images.get(role) or site_roles.get(role)
            if image is not None:
                c = _container(base, runtime, image)
            else:
                c = base
            role_containers.append((role, c))
    for unknown in set(role_images) - {r for r, _ in (layout.roles if layout else ())}:
        raise SpecError(f"--role-image {unknown}=...: the job has no {unknown} role")
    any_pyxis = any(c is not None and c.runtime == "pyxis" for c in [base, *(c for _, c in role_containers)])
    if any_pyxis and launcher != "srun":
        raise SpecError("pyxis containers (srun --container-image) need --launcher srun")

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
        folder = "%A/trial-%a" if array else "%j"
        directives["output"] = f"{slurm_pattern_escape(o.job_root)}/{folder}/batch.out"
        if array:
            directives["array"] = array
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
        container=base,
        hostfile=o.hostfile,
        templates=site.templates,
        command=tuple(o.command),
        requeue=requeue if o.kind == "sbatch" else False,
        signal=signal if o.kind == "sbatch" else None,
        roles=layout.roles if layout else (),
        role_containers=tuple(role_containers),
        array=array,
        trial_ids=trial_ids,
        sweep=sweep,
        trials=trials,
    )


def trials_record(spec: JobSpec) -> dict | None:
    """What `trials.json` in an array job's folder holds: the array and every trial's
    parameters (for `status` and `logs --trial`); None for a job without --array/--sweep."""
    if not spec.array:
        return None
    return {"array": spec.array, "sweep": [[n, list(v)] for n, v in spec.sweep],
            "trials": {str(t): dict(params) for t, params in spec.trials}}


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
