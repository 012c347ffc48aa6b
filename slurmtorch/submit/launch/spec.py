"""`JobSpec`: everything a template needs, checked against the site before rendering.

`build_spec(site, options)` is pure: no filesystem, no subprocess, no clock. It is a
straight line of steps, each a pure function owned by the module of its idea: the
program (here), where and how big (`allocation`), how ranks start (`launch`),
the environment (`environment`), preemption (`preemption`), arrays and sweeps
(`sweeps`), then the `#SBATCH` header from the resolved job. The CLI does the edge
checks (the SCRIPT exists, the interpreter path, the job folder root) and passes
their results in `Options`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from slurmtorch import __version__
from slurmtorch import shell
from slurmtorch.roles import RoleLayout
from slurmtorch.backends import MAX_TIMEOUT, timeout_problem
from slurmtorch.errors import SpecError, typed
from slurmtorch.submit.launch.allocation import (account_and_qos, check_limits, check_required_time, node_count, per_node,
                                                 resolve_target, role_layout, time_limit)
from slurmtorch.submit.sites.model import Container, MpiLaunch, NodeType, Partition, Site, layered_srun_args
from slurmtorch.submit.launch.environment import PathEdit, job_env
from slurmtorch.submit.launch.hetjob import HetComponent, components, split_roles
from slurmtorch.submit.jobfolder.snapshot import Snapshot
from slurmtorch.submit.launch.mpiflavour import mpirun_arguments
from slurmtorch.submit.launch.launcher import (backend_for, check_edf_env, choose_launcher, gpu_order_env, placement_env,
                                               resolve_containers, script_conventions, srun_mpi_for)
from slurmtorch.submit.sites.fabric import fabric_directives
from slurmtorch.options import Options, positive
from slurmtorch.submit.launch.preemption import check_warning_time, preempt_env, resolve_preemption
from slurmtorch.submit.launch.raycluster import ray_options
from slurmtorch.submit.launch.recovery import resolve_restarts
from slurmtorch.submit.launch.sbatch_options import sbatch_directives, srun_arguments
from slurmtorch.submit.launch.sweeps import plan_array
from slurmtorch.submit.launch.program import check_program, job_name
from slurmtorch.submit.launch.provenance import redact_env



@dataclass(frozen=True)
class JobSpec:
    """A fully resolved job: rendering it needs nothing else."""

    kind: str
    site: str
    preset: str | None
    partition: str | None
    nodes: int
    # Ranks on every node; in an uneven layout (-N 2 -n 3) the most a node is meant to hold
    # (ceil(ntasks / nodes)): the default CPUs per rank are sized for it.
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
    srun_mpi: str  # srun --mpi of the rank step (`none`: no --mpi option)
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
    # Role job: (role, nodes) in launch order and each role's container (None: none).
    roles: tuple[tuple[str, int], ...] = ()
    role_tasks: tuple[tuple[str, int], ...] = ()  # (role, tasks per node) where not 1: RoleLayout.tasks
    role_containers: tuple[tuple[str, Container | None], ...] = ()
    # Job array: Slurm's --array text, the trial ids it selects, and the sweep grid
    # (name, values) with the parameters of every trial id in the array.
    array: str | None = None
    trial_ids: tuple[int, ...] = ()
    sweep: tuple[tuple[str, tuple[str, ...]], ...] = ()
    trials: tuple[tuple[int, tuple[tuple[str, str], ...]], ...] = ()
    # Extra arguments of every srun that starts ranks (the plain step, torchrun's, each
    # role's): the one list launchplan.plan appends; --srun-arg, as typed.
    srun_args: tuple[str, ...] = ()
    # `slurmtorch mpirun`'s extra mpirun arguments, after its own: --mpirun-arg, as typed.
    mpirun_args: tuple[str, ...] = ()
    # --max-restarts: the step runs under the restart supervisor on `nodes` of the job's
    # nodes + spare_nodes; None: no restarts (the step's end is the job's).
    max_restarts: int | None = None
    spare_nodes: int = 0
    hang_timeout: int | None = None
    replace_straggler: float | None = None  # the supervisor's margin for handing a slow rank's node to a spare
    # Path compositions over the job's inherited value (environment.PathEdit), exported
    # after `env` as front:$NAME:back.
    env_paths: tuple[PathEdit, ...] = ()
    module_purge: bool = False
    module_use: tuple[str, ...] = ()
    after_modules: tuple[str, ...] = ()  # the site's trusted lines between the modules and the exports
    # Trusted admin lines run once per node (site's, then the node type's) before the ranks.
    node_prologue: tuple[str, ...] = ()
    gpu_vendor: str = "nvidia"
    # `directives` as the script's `#SBATCH` lines: checked and quoted once, here (sbatch_line).
    sbatch_lines: tuple[str, ...] = ()
    # --local-rank-arg: the spelling of the --local_rank=N argument every rank gets (None: none).
    local_rank_arg: str | None = None
    # --init-args: the rendezvous URL, rank and world size as the script's arguments (`initargs`).
    init_args: str | None = None
    # --cluster-spec: CLUSTER_SPEC's shape (protocol.CLUSTER_SPEC_SHAPES); None: the default.
    cluster_spec: str | None = None
    # --no-init: the ranks' bootstrap starts no process group; the script makes its own.
    no_init: bool = False
    # How the header asks for the GPUs (sites.model.GPU_REQUESTS): --gpus-per-node=N, --gres=gpu:N, none.
    gpu_request: str = "gpus-per-node"
    # The job runs a copy of its code taken at submission (code/ in its folder), None: in place.
    # Set by the sbatch verb at its edge (snapshot.locate looks at the file system).
    snapshot: Snapshot | None = None
    # Run from `slurmtorch alloc`'s shell (`slurmtorch run`), not as a batch job: the shell
    # has the modules and environment, the ranks' output goes to the terminal, and the
    # first node is reached with srun (launchplan.plan; submit/launch/interactive.py).
    interactive: bool = False
    # `slurmtorch mpirun`: the site's MPI launcher, ranks per node, binding (its `mpirun:` block).
    mpi_launch: MpiLaunch = MpiLaunch()
    # A role job over different resources: one heterogeneous job component per role (hetjob).
    het_components: tuple[HetComponent, ...] = ()
    # --ray: a Ray cluster in the allocation, the script its driver (submit/launch/raycluster.py).
    ray: bool = False

    @property
    def role_layout(self) -> RoleLayout:
        return RoleLayout(self.roles, self.role_tasks)

    @property
    def runs_again(self) -> bool:
        """Whether the job may run more than once in its folder (requeued, or restarted by
        the supervisor): every run's output is then appended, not replaced."""
        return self.requeue or self.max_restarts is not None

    @property
    def uneven(self) -> bool:
        """Whether the nodes run different numbers of ranks (-n not nodes x ntasks_per_node). A role
        job's roles may differ, each step asking its own; the header is its leader's."""
        return not self.roles and self.ntasks != self.nodes * self.ntasks_per_node

    @property
    def job_dir_pattern(self) -> str:
        """The job folder below job_root as a Slurm filename pattern."""
        return "%A/trial-%a" if self.array else "%j"


def build_spec(site: Site, options: Options) -> JobSpec:
    """Resolve options against the site's preset, partition and node type, or raise SpecError.

    The steps run in a fixed order: of several problems, the earliest step's is named.
    """
    check_program(options)
    o, role_asks = split_roles(ray_options(options))  # a role's own partition/GPUs: the leader's are the job's
    preset, partition, node = resolve_target(site, o)
    launcher, backend = choose_launcher(site, o, preset)
    gpus, ntasks_per_node, cpus_per_task = per_node(o, preset, partition, node)
    roles = role_layout(o, partition, launcher, ntasks_per_node, check_total=not role_asks.asks)
    het_components, roles = components(site, o, preset, roles, role_asks, (partition, node))
    nodes, ntasks = node_count(o, preset, partition, ntasks_per_node, roles, launcher)
    gpu_request, refused = site.gpu_request_for(partition, node), site.refused_for(partition)
    asked = sbatch_directives(o, node, partition.name, (nodes, gpus, ntasks_per_node, cpus_per_task),
                              gpu_request, refused)
    time = check_required_time(o, time_limit(o, preset, partition), partition, site)
    timeout = process_group_timeout(o, preset, site)
    env, env_paths = job_env(site, node, partition, preset, o, nodes)
    signal, requeue = resolve_preemption(o, preset)
    check_warning_time(signal, time)
    env.update({**dict(preempt_env(signal, requeue)), **placement_env(o, preset, site, env)})
    array, trial_ids, sweep, trials = plan_array(o, site.max_array_size)
    container, role_containers = resolve_containers(site, o, roles, launcher, preset)
    check_edf_env(container, env_paths, env)
    in_container = container is not None or any(c for _, c in role_containers)
    recovery = resolve_restarts(o, launcher, bool(het_components), in_container, nodes, partition.max_nodes,
                                partition.name, timeout, role_asks.spares)
    if not het_components:  # a heterogeneous job's components: each in hetjob.components
        check_limits(o, preset, site, partition, nodes + recovery.spare_nodes, time, recovery.spare_nodes)
    account, qos = account_and_qos(o, preset, partition, site)
    job = JobSpec(
        kind=o.kind,
        site=site.name,
        preset=o.preset if o.preset is not None else ("default" if preset else None),
        partition=partition.slurm_name if o.kind == "sbatch" else None,
        nodes=nodes,
        ntasks_per_node=ntasks_per_node,
        ntasks=ntasks,
        gpus_per_node=gpus,
        cpus_per_task=cpus_per_task,
        time=time,
        account=account,
        qos=qos,
        job_name=job_name(o),
        backend=backend_for(backend, gpus),
        launcher=launcher,
        srun_mpi=srun_mpi_for(site, node, partition, preset),
        env=tuple(env.items()),
        modules=job_modules(site, node, partition, preset),
        directives=(),  # from the job itself, just below
        prologue=site.prologue,
        epilogue=site.epilogue,
        python=site.python or o.python,
        script=o.script,
        module=o.module,
        script_args=tuple(o.script_args),
        timeout=timeout,
        job_root=o.job_root,
        container=container,
        hostfile=o.hostfile,
        templates=site.templates,
        command=redact_env(o.command, o.script_args),
        requeue=requeue,
        signal=signal,
        roles=roles.roles if roles else (), role_tasks=roles.tasks if roles else (),
        role_containers=role_containers,
        array=array, trial_ids=trial_ids, sweep=sweep, trials=trials,
        srun_args=srun_arguments(o, launcher, layered_srun_args(site.srun_args, node.srun_args, partition.srun_args,
                                                                preset.get("srun_args", ())), refused, partition.name),
        mpirun_args=mpirun_arguments(o.mpirun_args, o.kind, site.mpirun, o.hostfile), gpu_request=gpu_request,
        **recovery._asdict(),  # max_restarts, spare_nodes, hang_timeout, replace_straggler
        env_paths=env_paths,
        gpu_vendor=node.gpu_vendor,
        **script_conventions(o, preset, most_tasks_on_a_node(o, ntasks_per_node, ntasks, roles)),
        interactive=o.interactive,
        het_components=het_components,
        ray=bool(o.ray),
    )
    return _site_parts(job, site, node, partition, preset, asked)


def most_tasks_on_a_node(o: Options, ntasks_per_node: int, ntasks: int, roles: RoleLayout | None) -> int | None:
    """The most tasks any node runs: a batch job's per node (or a role's), a run here's all
    (one host); None over a --hostfile, whose hosts share the ranks as mpirun decides."""
    if o.kind == "mpirun":
        return None if o.hostfile else ntasks
    return max([ntasks_per_node, *(tasks for _, tasks in (roles.tasks if roles else ()))])


def process_group_timeout(o: Options, preset: dict, site: Site) -> int:
    """--timeout, else the preset's, else the site's; refused here above what the rank accepts
    (it would refuse it only after the job had waited its turn)."""
    timeout = positive("--timeout", o.pick(preset, "timeout", site.timeout))
    if timeout > MAX_TIMEOUT:
        raise SpecError(f"--timeout {timeout} {timeout_problem(timeout)}", tip="e.g. --timeout 1800 (seconds)")
    return timeout


def job_modules(site: Site, node: NodeType, partition: Partition, preset: dict) -> tuple[str, ...]:
    """The modules to load, the hardware's first (node type, partition): an architecture module
    selects the module tree the others come from (IDRIS: `module load arch/h100` before any
    other on gpu_p6), then the site's and the preset's."""
    return (*node.modules, *partition.modules, *site.modules, *preset.get("modules", ()))


def _site_parts(job: JobSpec, site: Site, node: NodeType, partition: Partition, preset: dict,
                asked: dict[str, str | bool]) -> JobSpec:
    """The job with what the site adds around it: the `#SBATCH` header (what the job's network
    environment needs, then the site's, partition's and preset's directives, then the options
    passed on), modules, the node prologue and how `slurmtorch mpirun` launches."""
    if job.kind == "mpirun" and (site.node_prologue or node.node_prologue):
        raise SpecError(f"site {site.name!r} has a node_prologue, which runs as a Slurm job step; "
                        "slurmtorch mpirun starts no Slurm job", tip=f"use {typed('sbatch')}")
    base = {**dict(fabric_directives(dict(job.env))), **dict(site.directives), **dict(partition.directives),
            **dict(preset.get("directives", ())), **asked}
    directives = sbatch_header(job, base)
    # `slurmtorch mpirun`'s launcher, and its GPU order for the ranks (the job's own --env wins).
    env = (*job.env, *((k, v) for k, v in gpu_order_env(site, job.kind, node).items() if k not in dict(job.env)))
    return replace(job, directives=directives, sbatch_lines=tuple(sbatch_line(n, v) for n, v in directives),
                   mpi_launch=site.mpirun, env=env, module_purge=site.module_purge, module_use=site.module_use,
                   after_modules=site.after_modules, node_prologue=(*site.node_prologue, *node.node_prologue))


def sbatch_header(job: JobSpec, base: dict[str, str | bool | None]) -> tuple[tuple[str, str | bool], ...]:
    """The `#SBATCH` header of a batch job (under it `base`: the site's, partition's and
    preset's, then the options passed on), sorted; an mpirun job carries only `base`. A name whose value in `base` is None is left out: a site's directive removed by
    a later layer, or the `partition` line on a QOS-routed site (the only line of ours a
    site may remove: validation refuses the others)."""
    out = {name: value for name, value in base.items() if value is not None}
    removed = {name for name, value in base.items() if value is None}
    if job.kind == "sbatch":
        if job.launcher == "torchrun":
            # One torchrun agent per node spawns the ranks; it gets the node's CPUs.
            out["ntasks-per-node"] = "1"
            out["cpus-per-task"] = str(job.ntasks_per_node * job.cpus_per_task)
        else:
            if job.uneven and job.max_restarts is not None:
                # Any node may have to take the fullest node's share once a spare stands in;
                # the supervisor's step asks for exactly --nodes and --ntasks.
                out["ntasks-per-node"] = str(job.ntasks_per_node)
            elif job.uneven:
                # -N 2 -n 3: Slurm fills the nodes in order as far as the CPUs per rank allow
                # (2+1), and srun's step follows. With --ntasks-per-node as well, Slurm would
                # allocate nodes x that many tasks and every srun warn that it ignores it.
                out["ntasks"] = str(job.ntasks)
            else:
                out["ntasks-per-node"] = str(job.ntasks_per_node)
            out["cpus-per-task"] = str(job.cpus_per_task)
        # A heterogeneous job's header is its first component's (the leader's nodes).
        out["nodes"] = str(job.het_components[0].nodes if job.het_components else job.nodes + job.spare_nodes)
        if "partition" not in removed:
            assert job.partition is not None  # build_spec sets it for every batch job
            out["partition"] = job.partition
        out["job-name"] = job.job_name
        if job.gpus_per_node and job.gpu_request == "gres":
            # JSC's and IDRIS's form; other generic resources the job asked for (--gres nvme:1) follow.
            others = [item for item in str(out.get("gres", "")).split(",") if item and not _is_gpu_gres(item)]
            out["gres"] = ",".join([f"gpu:{job.gpus_per_node}", *others])
        elif job.gpus_per_node and job.gpu_request == "gpus-per-node":
            out["gpus-per-node"] = str(job.gpus_per_node)
        if job.time is not None:
            out["time"] = job.time
        if job.account:
            out["account"] = job.account
        if job.qos:
            out["qos"] = job.qos
        if job.max_restarts is not None:
            # The supervisor restarts the step itself when a node fails (Slurm must not end
            # the job for it) and requeues the job when no spare is left.
            out["no-kill"] = True
        if job.runs_again:
            out["requeue"] = True
            # A requeued job runs again in the same folder: keep every run's output.
            out["open-mode"] = "append"
        else:
            # Slurm's default (JobRequeue=1) silently reruns a batch job from the start
            # when a node fails; without a checkpoint-aware --requeue it should end
            # (NODE_FAIL) and say so instead.
            out["no-requeue"] = True
        if job.signal:
            out["signal"] = job.signal
        # The batch step's own output goes into the job folder; `%` in a user's path
        # would be read as a Slurm filename pattern, so it is doubled.
        out["output"] = f"{slurm_pattern_escape(job.job_root)}/{job.job_dir_pattern}/batch.out"
        if job.array:
            out["array"] = job.array
    return tuple(sorted(out.items()))


def _is_gpu_gres(item: str) -> bool:
    return item.split(":", 1)[0].lower() == "gpu"


def sbatch_line(name: str, value: str | bool) -> str:
    """`#SBATCH --name=value` (`True`: the bare flag), the one check of a directive's name and
    value; a value sbatch cannot read back exactly is refused (shell.directive_value)."""
    if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
        raise SpecError(f"invalid #SBATCH option name {name!r}")
    if value is True:
        return f"#SBATCH --{name}"
    text = shell.directive_value(value, what=f"#SBATCH --{name} value")
    # sbatch's directive parser honours shell quotes but also treats a backslash as an
    # escape *inside* single quotes (`'a\\'` is an unmatched quote to it). A value with a
    # backslash is always quoted by directive_value, so doubling them reads back exactly.
    return f"#SBATCH --{name}={text.replace(chr(92), chr(92) * 2)}"


def slurm_pattern_escape(path: str) -> str:
    """Escape `%` for Slurm's --output/--error filename patterns (`%j`, `%t`, ...)."""
    return path.replace("%", "%%")
