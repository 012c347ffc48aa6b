"""Render a `JobSpec` into the batch (or mpirun) script: pure, deterministic, no torch.

Templates live in `templates/` (a site may override any of them with its
`templates:` folder). Every value reaches the text through one of three filters:
`q` (shell.quote), `directive` (shell.directive_value) or `comment` (for the
provenance line); StrictUndefined turns a typo in a template into an error.
"""

from __future__ import annotations

import json
import os
import traceback
from dataclasses import dataclass, replace
from functools import lru_cache

import jinja2

from slurmtorch import protocol, resources
from slurmtorch import shell
from slurmtorch.errors import SlurmtorchError, TemplateError
from slurmtorch.roles import TRAINING_ROLES
from slurmtorch.submit.batchnode.batchbash import (PICK_PORT, REAP_ROLE_STEPS, ROLE_NODES_FILE, charliecloud_env,
                                                   pick_addr)
from slurmtorch.submit.jobfolder import ownership
from slurmtorch.submit.containers import EDF_END, EDF_FILE, container_args, edf_text, job_env_names
from slurmtorch.submit.mpiflavour import mpiexec_line
from slurmtorch.submit.raycluster import RayPlan, ray_plan
from slurmtorch.submit.scripttext import InCode, comment_quote, composed_path, script_join, script_quote
from slurmtorch.submit.sites.model import mpi_option
from slurmtorch.submit.spec import JobSpec, sbatch_line, slurm_pattern_escape
from slurmtorch.submit.sweeps import sweep_args, sweep_var, trial_folder

# Per-rank log redirection for launchers without srun's --output patterns. It is a
# constant passed as `bash -c` text; the job folder and argv arrive as positional
# parameters, so no user value is ever spliced into it.
# `op` is `>`, or `>>` for a job that can be requeued (it reruns in the same folder).
def _rank_log_wrapper(op: str) -> str:
    return ('r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}; d=$1; shift; '
            f'exec "$@" {op}"$d/rank-$r.out" 2{op}"$d/rank-$r.err"')


# A role job runs one srun step per role, so SLURM_PROCID counts within the role; the
# job rank (the log file's number) is the role's first rank ($1) plus it. Constant text
# like the rank wrapper: offset, folder and argv arrive as positional parameters.
def _role_log_wrapper(op: str) -> str:
    return ('r=$(( $1 + ${SLURM_PROCID:?} )); d=$2; shift 2; '
            f'exec "$@" {op}"$d/rank-$r.out" 2{op}"$d/rank-$r.err"')


RANK_LOG_WRAPPER = _rank_log_wrapper(">")
# In `slurmtorch alloc`'s shell a rank's output stays on the terminal: the folder argument
# is dropped and the rank runs as it is.
TERMINAL_WRAPPER = 'shift; exec "$@"'
ROLE_LOG_WRAPPER = _role_log_wrapper(">")

_FROM = {"srun": "slurm", "mpirun": "mpi", "torchrun": "env"}


@dataclass(frozen=True)
class RoleStep:
    """One role's srun step of a role job, unquoted."""

    role: str
    offset: int  # first job rank of the role
    count: int  # its nodes
    training: bool
    srun_args: tuple[str, ...]
    rank_argv: tuple[str, ...]
    # A heterogeneous job: its component, and `env` setting its node type's variables.
    het_group: int | None = None
    env_argv: tuple[str, ...] = ()
    node_offset: int = 0  # first node (index in the job's, role order) of the role


@dataclass(frozen=True)
class TrialCase:
    """One trial of a sweep, as the batch script's `case` sets it up, unquoted."""

    trial: int
    args: tuple[str, ...]  # appended to the script's arguments (--NAME VALUE), as the launcher passes them on
    exports: tuple[tuple[str, str], ...]  # SLURMTORCH_SWEEP_<NAME> and its value
    params: str  # SLURMTORCH_PARAMS: the parameters as compact JSON
    folder: str = ""  # its working folder below the submission folder's trials/ (sweeps.trial_folder)


# A launcher's variables that sbatch (--export=ALL) brings along from the submitting
# shell, e.g. after a local torchrun: the batch script unsets them, since they would
# describe another world than the job's (a stale MASTER_ADDR wins over the first node).
INHERITED_WORLD = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                   "ROLE_RANK", "ROLE_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                   "TORCHELASTIC_RUN_ID", "CLUSTER_SPEC", "TF_CONFIG")


@dataclass(frozen=True)
class Launch:
    """The argv pieces of the launch line, unquoted (templates quote them)."""

    rank_argv: tuple[str, ...]
    srun_args: tuple[str, ...] = ()
    mpirun_args: tuple[str, ...] = ()
    # `slurmtorch mpirun`: the site's MPI's launcher (mpiflavour), whether a pip wheel's beside
    # the job's python may stand in for PATH's, and how the variables reach the ranks.
    mpirun_program: str = "mpirun"
    mpirun_beside_python: bool = True
    mpirun_forwards: str = "-x forwards each variable above to remote hosts"
    torchrun_argv: tuple[str, ...] = ()
    rank_log_wrapper: str = RANK_LOG_WRAPPER
    role_steps: tuple[RoleStep, ...] = ()
    role_log_wrapper: str = ROLE_LOG_WRAPPER
    # A heterogeneous role job: each later component's `#SBATCH` lines (after `#SBATCH hetjob`).
    het_headers: tuple[tuple[str, ...], ...] = ()
    # srun exits 0 when its step never launched: check that srun's task 0 started
    # (bootstrap.note_started). Containers too: they mount the jobs folder (containers.mounts).
    started_check: bool = False
    # --max-restarts: the restart supervisor's own options (it runs `srun` + the ranks, and
    # checks each start itself); empty without restarts.
    supervisor_args: tuple[str, ...] = ()
    # The node prologue's srun options after its --nodes/--ntasks (which the template
    # writes from $SLURM_JOB_NUM_NODES); empty without a node prologue.
    node_prologue_args: tuple[str, ...] = ()
    # The ranks run in a container: the batch script then runs nothing of the submitting
    # host's python (its venv need not exist on the nodes) and picks the port in bash.
    in_container: bool = False
    # Who picks MASTER_PORT and MASTER_ADDR (rendezvous_flags): the batch script, on the
    # job's first node, when these are True.
    pick_port: bool = False
    pick_addr: bool = False
    # Ranks under ch-run (charliecloud): the job's variables the batch script writes for its
    # --set-env file (containers.CHARLIECLOUD_ENV); empty otherwise.
    charliecloud_env: tuple[str, ...] = ()
    # Where the script picks them: here (a batch script runs on the job's first node), or
    # from `slurmtorch alloc`'s shell, which runs where salloc ran (the login host on Slurm
    # 22.05), through this srun prefix on the allocation's first node (FIRST_NODE).
    first_node: tuple[str, ...] = ()
    # A role job: SLURMTORCH_ROLES, and the training roles (the torch world) for its comment.
    roles: str = ""
    training_roles: str = ""
    # A sweep: each trial's case in the batch script.
    trial_cases: tuple[TrialCase, ...] = ()
    # A cscs-ce container: its EDF (TOML), which the batch script writes into the job folder
    # as `edf_file` and names in srun's --environment; empty otherwise.
    edf: str = ""
    edf_file: str = EDF_FILE
    edf_end: str = EDF_END
    # --ray: the Ray cluster's steps (submit/raycluster.py); None otherwise.
    ray: RayPlan | None = None


def bootstrap_argv(spec: JobSpec, source: str, role: str | None = None, container=None) -> list[str]:
    """`<python> -m slurmtorch.bootstrap ...` as every rank runs it (in `container`, if any)."""
    python = container.interpreter if container is not None else spec.python
    argv = [python, "-m", "slurmtorch.bootstrap", "--backend", spec.backend,
            "--timeout", str(spec.timeout), "--from", source]
    if role is not None:
        argv += ["--role", role]
    if spec.local_rank_arg is not None:
        argv.append(f"--local-rank-arg={spec.local_rank_arg}")
    if spec.init_args is not None:
        argv.append(f"--init-args={spec.init_args}")
    if spec.cluster_spec is not None:
        argv.append(f"--cluster-spec={spec.cluster_spec}")
    if spec.no_init:
        argv.append("--no-init")
    if spec.module and spec.snapshot is not None and spec.snapshot.cwd is not None:
        # `python -m` imports from the working folder, the live tree: the job's copy instead.
        argv += ["--import-from", InCode(spec.snapshot.cwd)]
    if spec.module:
        argv += ["-m", spec.module]
    elif spec.script is not None:  # None: `slurmtorch alloc`'s spec, whose program comes with each run
        argv.append(_script_path(spec))
    argv += list(spec.script_args)
    return argv


def _script_path(spec: JobSpec) -> str:
    if spec.snapshot is None or spec.snapshot.script is None:
        return spec.script or ""
    return InCode(spec.snapshot.script)


def _layout(nodes: int, ntasks: int) -> list[str]:
    """srun's --nodes/--ntasks, always written: without them srun takes the layout from
    SLURM_NNODES/SLURM_NTASKS, which anything exported in the script could have changed."""
    return [f"--nodes={nodes}", f"--ntasks={ntasks}"]


def _append(spec: JobSpec) -> list[str]:
    # A requeued job starts again in the same folder: keep the earlier runs' rank logs.
    return ["--open-mode=append"] if spec.runs_again else []


# `slurmtorch alloc`'s shell reaches the allocation's first node with this step (one
# task there; the template adds --nodelist="$first_node"), to pick MASTER_PORT/ADDR where
# rank 0 runs: salloc's shell is not on it. Not --relative=0: Slurm only begins its search
# there, and while the step before still held node 1's CPUs the address step ran on node 2,
# whose address the ranks then waited at (1 run in 7 on the testbed). --overlap: the
# step needs no CPUs of its own, so it never waits for another step to let them go.
FIRST_NODE = ("srun", "--nodes=1", "--ntasks=1", "--overlap", "--mpi=none", "--quiet")


def _outputs(spec: JobSpec, logs: str) -> list[str]:
    """srun's options for where the ranks' output goes: each rank's log in the job folder;
    from `slurmtorch alloc`'s shell, the terminal (srun's own), and one Ctrl-C ends the
    step at once (--quit-on-interrupt; without it srun's first only prints the tasks'
    states: srun(1), SIGNALS AND ESCAPE SEQUENCES)."""
    if spec.interactive:
        return ["--quit-on-interrupt"]
    return [f"--output={logs}.out", f"--error={logs}.err", *_append(spec)]


def _redirect(spec: JobSpec) -> str:
    """`>>` for the rank log wrappers when the job can be requeued, like _append."""
    return ">>" if spec.runs_again else ">"


def _role_steps(spec: JobSpec) -> tuple[RoleStep, ...]:
    containers = dict(spec.role_containers)
    het = {c.role: c for c in spec.het_components}
    layout = spec.role_layout
    steps = []
    for role, count in spec.roles:
        prefix, pyxis = container_args(spec, containers.get(role))
        part = het.get(role)
        tasks = layout.tasks_of(role)
        # --mpi=none: the ranks take their world from SLURM_* and SLURMTORCH_ROLES, not MPI.
        # Its nodes: the template adds --nodelist (its count of the job's nodes from the role's
        # node_offset); in a heterogeneous job, from its own component's (--het-group).
        # Under the restart supervisor, --overlap: a failed start's step can stay in Slurm's books
        # on its surviving nodes (supervisor.step_argv), and the next start's would wait for it;
        # the roles' steps never share a node.
        overlap = ["--overlap"] if spec.max_restarts is not None else []
        srun = [*([f"--het-group={part.group}"] if part else []), "--kill-on-bad-exit=1", "--mpi=none",
                f"--nodes={count}", f"--ntasks={count * tasks}", f"--ntasks-per-node={tasks}", *overlap,
                f"--cpus-per-task={part.cpus_per_task if part else spec.cpus_per_task}", *pyxis, *spec.srun_args]
        argv = [*prefix, *bootstrap_argv(spec, "slurm", role, containers.get(role))]
        steps.append(RoleStep(role=role, offset=layout.offset(role), count=count, training=role in TRAINING_ROLES,
                              srun_args=tuple(srun), rank_argv=tuple(argv), het_group=part.group if part else None,
                              env_argv=part.env_argv if part else (), node_offset=layout.node_offset(role)))
    return tuple(steps)


def torchrun_literal(args, launcher: str = "torchrun") -> list[str]:
    """Arguments that torchrun passes on unchanged.

    torchrun runs every worker argument through string.Template's safe_substitute (its
    `${local_rank}` macro), which also turns `$$` into `$` and `$local_rank` into a
    number: `-- '$$' '${local_rank}'` arrived as `['$', '0']`. Doubling each `$` makes
    the substitution give back exactly what the user typed. Other launchers: as is.
    """
    if launcher != "torchrun":
        return list(args)
    return [InCode(a.replace("$", "$$")) if isinstance(a, InCode) else a.replace("$", "$$") for a in args]


def supervisor_args(spec: JobSpec) -> tuple[str, ...]:
    """The restart supervisor's options (submit/batchnode/supervisor.py), or () without --max-restarts."""
    if spec.max_restarts is None:
        return ()
    args = ["--nodes", str(spec.nodes), "--ntasks", str(spec.ntasks), "--max-restarts", str(spec.max_restarts)]
    if spec.spare_nodes:
        args += ["--spare-nodes", str(spec.spare_nodes)]
    if spec.hang_timeout is not None:
        args += ["--hang-timeout", str(spec.hang_timeout)]
    if spec.replace_straggler is not None:
        args += ["--replace-straggler", f"{spec.replace_straggler:g}"]
    if spec.roles:  # each start runs the batch script's launch_roles on the nodes it is given
        args += ["--roles", spec.role_layout.format()]
    return (*args, "--backend", spec.backend)


def node_prologue_args(spec: JobSpec) -> tuple[str, ...]:
    """srun options of the node prologue's step: one task per node, its output per node in
    the job folder (node-prologue-N.out, N the node's task). Not `spec.srun_args`: those
    are for the ranks (a --gpus-per-task there would not fit one task per node)."""
    if not spec.node_prologue or spec.kind != "sbatch":
        return ()
    logs = slurm_pattern_escape(spec.job_root) + f"/{spec.job_dir_pattern}/node-prologue-%t.out"
    return ("--ntasks-per-node=1", "--kill-on-bad-exit=1", "--mpi=none", f"--output={logs}", *_append(spec))


def launch_plan(spec: JobSpec) -> Launch:
    """Work out the launcher's arguments for this spec (pure).

    Every srun that starts ranks (the plain step, torchrun's agents, each role's step)
    ends with `spec.srun_args`, the one list of extra srun options.
    """
    in_container = spec.container is not None or any(c for _, c in spec.role_containers)
    pick_port, pick_addr = rendezvous_flags(spec, in_container)
    layout = spec.role_layout
    training = ", ".join(item for item in layout.format().split(",") if item.split("=")[0] in TRAINING_ROLES)
    edf = edf_text(spec, spec.container) if spec.container is not None and spec.container.runtime == "cscs-ce" else ""
    runtimes = {c.runtime for c in (spec.container, *(c for _, c in spec.role_containers)) if c is not None}
    ch_env = tuple(job_env_names(spec)) if "charliecloud" in runtimes and spec.kind == "sbatch" else ()
    return replace(_launch_plan(spec), node_prologue_args=node_prologue_args(spec), edf=edf,
                   in_container=in_container, pick_port=pick_port, pick_addr=pick_addr, charliecloud_env=ch_env,
                   first_node=FIRST_NODE if spec.interactive else (),
                   roles=layout.format(), training_roles=training, trial_cases=trial_cases(spec),
                   ray=ray_plan(spec, _ray_driver_outputs(spec)))


def _ray_driver_outputs(spec: JobSpec) -> list[str]:
    """The --ray driver's output where rank 0's goes. Its one task is named, not srun's %t: in a
    heterogeneous job's step Slurm 24.11 writes %t as 4294967295 (rank-4294967295.out, seen
    on the testbed; 22.05 writes 0)."""
    return _outputs(spec, slurm_pattern_escape(spec.job_root) + f"/{spec.job_dir_pattern}/rank-0")


def trial_cases(spec: JobSpec) -> tuple[TrialCase, ...]:
    """Every trial of a sweep as its case in the batch script sets it up (pure)."""
    return tuple(TrialCase(trial=t, args=tuple(torchrun_literal(sweep_args(params), spec.launcher)),
                           exports=tuple((sweep_var(name), value) for name, value in params),
                           params=json.dumps(dict(params), separators=(",", ":"), ensure_ascii=False),
                           folder=trial_folder(t, params))
                 for t, params in spec.trials)


def rendezvous_flags(spec: JobSpec, in_container: bool) -> tuple[bool, bool]:
    """Whether the batch script picks MASTER_PORT, and MASTER_ADDR, on the job's first node
    (where rank 0 runs): the one place that decides who does (pure).

    Nobody in the script when the site's environment fixes the value, or when the ranks
    find it themselves: MPI's rank 0 (mpirun, `--from mpi`), or the restart supervisor
    anew for each start. The address only on the site's interface (*_SOCKET_IFNAME, which
    the script tests at run time; without one the ranks meet at the first node's host
    name): on real clusters the host name resolves to the management network, the site's
    interface is the fabric. Role jobs and containers too (a container job's script finds
    it in bash: no python of the submitting host on the nodes).
    """
    fixed = {name for name, _ in spec.env}
    script = spec.kind == "sbatch" and spec.launcher in ("srun", "torchrun") and spec.max_restarts is None
    pick_port = script and "MASTER_PORT" not in fixed
    pick_addr = script and "MASTER_ADDR" not in fixed
    return pick_port, pick_addr


def _launch_plan(spec: JobSpec) -> Launch:
    launcher = spec.launcher if spec.kind == "sbatch" else "mpirun"
    # Under the restart supervisor each start gets its own marker, checked by the supervisor.
    # In a container too: the jobs folder is mounted at its own path (containers.mounts).
    started_check = spec.max_restarts is None and (bool(spec.roles) or launcher != "mpirun")
    if spec.roles:
        return Launch(rank_argv=(), role_steps=_role_steps(spec),
                      role_log_wrapper=_role_log_wrapper(_redirect(spec)), started_check=started_check,
                      supervisor_args=supervisor_args(spec),
                      het_headers=tuple(tuple(sbatch_line(n, v) for n, v in c.directives)
                                        for c in spec.het_components[1:]))
    container_prefix, pyxis = container_args(spec, spec.container)

    if launcher == "torchrun":
        rank = [*container_prefix, *bootstrap_argv(spec, _FROM["torchrun"], container=spec.container)]
        # torchrun (`python -m torch.distributed.run`, through the agent module that adds each
        # node's --rdzv-conf is_host and --local-addr: see bootstrap/agent.py) runs
        # `-m slurmtorch.bootstrap`.
        python, rest = rank[len(container_prefix)], rank[len(container_prefix) + 3:]
        torchrun = [*container_prefix, python, "-m", "slurmtorch.bootstrap.agent", "--backend", spec.backend,
                    "--nnodes", str(spec.nodes), "--nproc-per-node", str(spec.ntasks_per_node),
                    "--rdzv-backend", "c10d"]
        rank_argv = torchrun_literal(["-m", "slurmtorch.bootstrap", *rest])
        logs = slurm_pattern_escape(spec.job_root) + f"/{spec.job_dir_pattern}/node-%t"
        srun = [*_layout(spec.nodes, spec.nodes), "--kill-on-bad-exit=1", "--mpi=none", "--ntasks-per-node=1",
                f"--cpus-per-task={spec.ntasks_per_node * spec.cpus_per_task}",
                *_outputs(spec, logs), *pyxis, *spec.srun_args]
        return Launch(rank_argv=tuple(rank_argv), srun_args=tuple(srun), torchrun_argv=tuple(torchrun),
                      started_check=started_check)

    rank_argv = [*container_prefix, *bootstrap_argv(spec, _FROM[launcher], container=spec.container)]
    if launcher == "srun":
        logs = slurm_pattern_escape(spec.job_root) + f"/{spec.job_dir_pattern}/rank-%t"
        # Since Slurm 22.05 srun no longer inherits --cpus-per-task from sbatch. The restart
        # supervisor names each start's nodes and tasks itself (supervisor.step_argv).
        layout = [] if spec.max_restarts is not None else _layout(spec.nodes, spec.ntasks)
        srun = [*layout, "--kill-on-bad-exit=1", *mpi_option(spec.srun_mpi),
                f"--cpus-per-task={spec.cpus_per_task}",
                *_outputs(spec, logs), *pyxis, *spec.srun_args]
        return Launch(rank_argv=tuple(rank_argv), srun_args=tuple(srun), started_check=started_check,
                      supervisor_args=supervisor_args(spec))

    if spec.kind == "mpirun":  # outside Slurm: -n, the hosts, in the site's MPI's own spelling
        line = mpiexec_line(spec.mpi_launch, spec.ntasks, spec.hostfile,
                            [*(n for n, _ in spec.env), *(n for n, _, _ in spec.env_paths)])
        return Launch(rank_argv=tuple(rank_argv), mpirun_args=(*line.args, *spec.mpirun_args),
                      mpirun_program=line.program, mpirun_beside_python=line.beside_python,
                      mpirun_forwards=line.forwards)
    # mpirun in an allocation: Open MPI finds the hosts itself.
    mpirun = ["-n", str(spec.ntasks), *mpirun_binding(spec)]
    return Launch(rank_argv=tuple(rank_argv), mpirun_args=tuple(mpirun),
                  rank_log_wrapper=TERMINAL_WRAPPER if spec.interactive else _rank_log_wrapper(_redirect(spec)))


def mpirun_binding(spec: JobSpec) -> list[str]:
    """Open MPI's mapping and binding options that give each rank its share of its node (pure).

    Left alone, Open MPI 5 binds each rank to one core (`--report-bindings` on the testbed,
    at 1, 2 and 4 ranks): a one-rank-per-node job ran on 1 of each node's CPUs.
    In an allocation each rank gets what srun would give it, -c CPUs: `--map-by slot`
    places ranks on Slurm's slots (the job's tasks per node, an uneven 2+1 included),
    `PE=n` gives each n processing elements and `HWTCPUS` counts hardware threads as CPUs,
    as Slurm's CPU counts do (PRRTE's docs, Process placement: --map-by and --bind-to,
    https://docs.prrte.org/en/latest/placement/index.html; Open MPI 5.0 mpirun(1)).
    Outside Slurm (`slurmtorch mpirun`) the site's `mpirun:` block says (mpiflavour).
    """
    return ["--map-by", f"slot:PE={spec.cpus_per_task}:HWTCPUS", "--bind-to", "hwthread"]


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates, kept between CLI runs: compiling ours costs ~6 ms a run.

    In our private cache folder ($XDG_CACHE_HOME/slurmtorch/templates), not Jinja's
    default /tmp/_jinja2-cache-UID: a predictable /tmp name another user can make first
    (Jinja then refuses it, but chmods it before looking, following a planted link).
    Each entry is checked against its template's source, so an edited or site-overridden
    template is recompiled. SLURMTORCH_NO_TEMPLATE_CACHE=1 turns it off.
    """
    if os.environ.get("SLURMTORCH_NO_TEMPLATE_CACHE"):
        return None
    where = ownership.cache_folder("templates")
    return None if where is None else jinja2.FileSystemBytecodeCache(str(where))


@lru_cache(maxsize=8)
def environment(site_templates: str | None = None) -> jinja2.Environment:
    """The one Jinja2 environment: site overrides first, then the bundled templates."""
    loaders = []
    if site_templates:
        loaders.append(jinja2.FileSystemLoader(site_templates))
    loaders.append(jinja2.FileSystemLoader(str(resources.templates_dir())))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        bytecode_cache=_bytecode_cache(),
    )
    env.filters["q"] = script_quote
    env.filters["join_q"] = script_join
    env.filters["directive"] = shell.directive_value
    env.filters["envname"] = shell.env_name
    env.filters["comment"] = comment_quote
    env.filters["composed_path"] = composed_path
    return env


def fabric_host_named(spec: JobSpec) -> bool:
    """Whether the job's environment names the nodes' fabric host suffix (JSC's `i`)."""
    return any(name == protocol.FABRIC_HOST_SUFFIX for name, _ in spec.env)


def render_template(name: str, spec: JobSpec, **extra: object) -> str:
    """Template `name` with the spec, its launch plan and `extra` values."""
    launch = launch_plan(spec)  # outside the net below: a bug here is ours, not a template's
    try:
        template = environment(spec.templates).get_template(name)
        return template.render(spec=spec, launch=launch, inherited_world=INHERITED_WORLD,
                               pick_port_in_bash=PICK_PORT,
                               pick_addr_in_bash=pick_addr(spec.backend, fabric_host_named(spec)),
                               fabric_host=fabric_host_named(spec),
                               charliecloud_env_in_bash=charliecloud_env(list(launch.charliecloud_env)),
                               reap_role_steps=REAP_ROLE_STEPS, code_dir=protocol.CODE_DIR,
                               role_nodes_file=ROLE_NODES_FILE,
                               supervisor_end=protocol.SUPERVISOR_END, supervisor_killed=protocol.SUPERVISOR_KILLED,
                               **extra)
    except SlurmtorchError:
        raise
    except jinja2.TemplateNotFound as e:
        raise TemplateError(f"template {e.name!r} not found", tip="check the site's `templates:` folder") from None
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"{e.filename or e.name}:{e.lineno}: template syntax error: {e.message}") from None
    except jinja2.UndefinedError as e:
        raise TemplateError(f"template {name!r}: {e.message}") from None
    except Exception as e:  # noqa: BLE001 - a site's template can raise anything while rendering
        where = _template_line(e) or f"template {name!r}"
        detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise TemplateError(f"{where}: error while rendering: {type(e).__name__}{': ' + detail if detail else ''}",
                            tip="check the site's `templates:` folder") from None


def _template_line(exc: BaseException) -> str | None:
    """`file:line` of the innermost template frame (Jinja maps its frames to template lines)."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename.endswith(".j2"):
            return f"{frame.filename}:{frame.lineno}"
    return None


def render_sbatch(spec: JobSpec) -> str:
    """The batch script `sbatch` receives, byte for byte."""
    return render_template("sbatch.sh.j2", spec)


def render_mpirun(spec: JobSpec) -> str:
    """A script that runs the job with mpirun on hosts without Slurm."""
    return render_template("mpirun.sh.j2", spec)


def render(spec: JobSpec) -> str:
    return render_sbatch(spec) if spec.kind == "sbatch" else render_mpirun(spec)
