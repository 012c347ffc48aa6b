"""A job's launch as data (pure): one planner per shape turns a `JobSpec` into `Launch`, its
steps (`steps.Step`) and the few facts the batch script needs around them.

Shapes: one srun step of ranks; torchrun's agents (one per node); mpirun in an allocation or
outside Slurm; a step per role (one allocation, or a heterogeneous job's components); a Ray
cluster (`raycluster.ray_steps`); the site's node prologue, a check before them. With
--max-restarts the same steps run in the script's `launch` function, which the restart
supervisor runs for each start on the nodes it gives (SLURMTORCH_ROLE_NODES).
Every srun that starts ranks ends with `spec.srun_args`, the one list of extra srun options.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from slurmtorch import shell
from slurmtorch.protocol import NODE_PROLOGUE_ERR
from slurmtorch.roles import TRAINING_ROLES
from slurmtorch.submit.launch.containers import CHARLIECLOUD_ENV, EDF_FILE, InJobFolder, container_args, edf_text, \
    job_env_names
from slurmtorch.submit.launch.mpiflavour import MpiexecLine, mpiexec_line
from slurmtorch.submit.launch.raycluster import ray_steps
from slurmtorch.submit.launch.scripttext import InCode, Interpreter, ShellWord
from slurmtorch.submit.sites.model import mpi_option
from slurmtorch.submit.launch.spec import JobSpec, sbatch_line, slurm_pattern_escape
from slurmtorch.submit.launch.steps import CHECK, JOB, SERVICE, Step
from slurmtorch.submit.jobfolder.trialfolders import trial_folder
from slurmtorch.submit.launch.sweeps import sweep_args, sweep_var

# Per-rank logs for a launcher without srun's --output patterns: constant `bash -c` text; the job
# folder, the role's first rank and argv arrive as positional parameters, so no user value is ever
# spliced into it. `op`: `>`, or `>>` for a job that runs again in its folder (requeued, restarted).
def _rank_log_wrapper(op: str) -> str:
    return ('r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}; d=$1; shift; '
            f'exec "$@" {op}"$d/rank-$r.out" 2{op}"$d/rank-$r.err"')


# A role's srun step numbers its tasks from 0 (SLURM_PROCID): the job rank is the role's first ($1) plus it.
def _role_log_wrapper(op: str) -> str:
    return ('r=$(( $1 + ${SLURM_PROCID:?} )); d=$2; shift 2; '
            f'exec "$@" {op}"$d/rank-$r.out" 2{op}"$d/rank-$r.err"')


RANK_LOG_WRAPPER = _rank_log_wrapper(">")
ROLE_LOG_WRAPPER = _role_log_wrapper(">")
# In `slurmtorch alloc`'s shell a rank's output stays on the terminal: the folder is dropped.
TERMINAL_WRAPPER = 'shift; exec "$@"'
JOB_DIR = ShellWord('"$SLURMTORCH_JOB_DIR"')

_FROM = {"srun": "slurm", "mpirun": "mpi", "torchrun": "env"}


@dataclass(frozen=True)
class TrialCase:
    """One trial of a sweep, as the batch script's `case` sets it up, unquoted."""

    trial: int
    args: tuple[str, ...]  # appended to the script's arguments (--NAME VALUE), as the launcher passes them on
    exports: tuple[tuple[str, str], ...]  # SLURMTORCH_SWEEP_<NAME> and its value
    params: str  # SLURMTORCH_PARAMS: the parameters as compact JSON
    folder: str = ""  # its working folder below the submission folder's trials/ (sweeps.trial_folder)


@dataclass(frozen=True)
class Launch:
    """The launch: its steps, and what the script sets up around them."""

    steps: tuple[Step, ...]
    about: str  # one line for the script's comment above the launch
    # Where the ranks meet: the batch script picks MASTER_PORT / MASTER_ADDR on the first node
    # (rendezvous_flags); the restart supervisor picks them itself for each start.
    pick_port: bool = False
    pick_addr: bool = False
    # The hostlists of the nodes the steps' slices index, as the script names them: the allocation's,
    # a heterogeneous job's every component's in role order; "": none, or the supervisor's
    # (SLURMTORCH_ROLE_NODES, this start's).
    node_list: str = ""
    roles: str = ""  # SLURMTORCH_ROLES: a role job's layout (the ranks find their place in it)
    supervisor: tuple[str, ...] = ()  # --max-restarts: the supervisor's options; it runs `launch` per start
    started_check: bool = False  # srun exits 0 when its step never launched: task 0 leaves a file
    python: str = ""  # the host's interpreter, named once ($python) where a step runs it; "" in a container job
    mpirun: str = ""  # the launcher the script finds first (mpirun, mpiexec), for mpirun's shapes
    mpirun_beside_python: bool = True  # a pip wheel's launcher beside $python may stand in for PATH's
    ray: bool = False  # a Ray cluster: the head's address ($ray_head) from MASTER_ADDR and MASTER_PORT

    @property
    def background(self) -> bool:
        """Several steps at once, reaped as they end (templates/reap.sh)."""
        return sum(s.end != CHECK for s in self.steps) > 1


def bootstrap_argv(spec: JobSpec, source: str, role: str | None = None, container=None) -> list[str]:
    """`<python> -m slurmtorch.bootstrap ...` as every rank runs it (in `container`, if any)."""
    python = container.interpreter if container is not None else Interpreter(spec.python)
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


def outputs(spec: JobSpec, logs: str) -> list[str]:
    """srun's options for where the ranks' output goes: each rank's log in the job folder;
    from `slurmtorch alloc`'s shell, the terminal (srun's own), and one Ctrl-C ends the
    step at once (--quit-on-interrupt; without it srun's first only prints the tasks'
    states: srun(1), SIGNALS AND ESCAPE SEQUENCES)."""
    if spec.interactive:
        return ["--quit-on-interrupt"]
    return [f"--output={logs}.out", f"--error={logs}.err", *_append(spec)]


def job_logs(spec: JobSpec, name: str) -> str:
    """A Slurm filename pattern for `name` in the job's folder (rank-%t, node-%t)."""
    return slurm_pattern_escape(spec.job_root) + f"/{spec.job_dir_pattern}/{name}"


def _redirect(spec: JobSpec) -> str:
    """`>>` for the rank log wrappers when the job can be requeued, like _append."""
    return ">>" if spec.runs_again else ">"


def _edf(spec: JobSpec) -> list:
    """srun's --environment for a cscs-ce container: its EDF, which the script writes in the job folder."""
    cscs = spec.container is not None and spec.container.runtime == "cscs-ce"
    return [InJobFolder("--environment=", EDF_FILE)] if cscs else []


def _overlap(spec: JobSpec) -> list[str]:
    """Under the restart supervisor, --overlap: a failed start's step can stay in Slurm's books on its
    surviving nodes (Slurm 22.05 keeps it, holding their CPUs, until the job ends), and the next start's
    would wait for it ("Requested nodes are busy") forever; a start's steps never share a node."""
    return ["--overlap"] if spec.max_restarts is not None else []


def ranks_step(spec: JobSpec) -> Step:
    """One srun step of every rank (`--from slurm`). Since Slurm 22.05 srun no longer inherits
    --cpus-per-task from sbatch. Under the supervisor: this start's nodes."""
    prefix, pyxis = container_args(spec, spec.container)
    options = [*_layout(spec.nodes, spec.ntasks), "--kill-on-bad-exit=1", *mpi_option(spec.srun_mpi),
               f"--cpus-per-task={spec.cpus_per_task}", *_overlap(spec), *outputs(spec, job_logs(spec, "rank-%t")),
               *pyxis, *spec.srun_args, *_edf(spec)]
    return Step("ranks", (*prefix, *bootstrap_argv(spec, "slurm", container=spec.container)), tuple(options),
                nodes=(0, spec.nodes) if spec.max_restarts is not None else None)


def torchrun_step(spec: JobSpec) -> Step:
    """torchrun's agent on every node (`python -m slurmtorch.bootstrap.agent`, which adds each node's
    --rdzv-conf is_host and --local-addr on the site's interface: torch would take both from a host
    name that may resolve to another network, pytorch#73656), its c10d rendezvous on the first node
    at the port picked there; its own logs in the job folder (else /tmp/torchelastic_* forever)."""
    prefix, pyxis = container_args(spec, spec.container)
    rank = bootstrap_argv(spec, _FROM["torchrun"], container=spec.container)
    agent = [*prefix, rank[0], "-m", "slurmtorch.bootstrap.agent", "--backend", spec.backend,
             "--nnodes", str(spec.nodes), "--nproc-per-node", str(spec.ntasks_per_node), "--rdzv-backend", "c10d",
             "--log-dir", InJobFolder("", "torchelastic"),
             "--rdzv-endpoint", ShellWord('"${MASTER_ADDR:-${nodes[0]}}:$MASTER_PORT"'),
             "--rdzv-id", ShellWord('"$SLURM_JOB_ID"')]
    options = [*_layout(spec.nodes, spec.nodes), "--kill-on-bad-exit=1", "--mpi=none", "--ntasks-per-node=1",
               f"--cpus-per-task={spec.ntasks_per_node * spec.cpus_per_task}",
               *outputs(spec, job_logs(spec, "node-%t")), *pyxis, *spec.srun_args, *_edf(spec)]
    return Step("ranks", (*agent, *torchrun_literal(["-m", "slurmtorch.bootstrap", *rank[3:]])), tuple(options))


def mpirun_step(spec: JobSpec) -> tuple[Step, MpiexecLine]:
    """mpirun in an allocation (Open MPI finds the hosts itself), each rank's log by the wrapper;
    outside Slurm (`slurmtorch mpirun`), the site's MPI's launch line (mpiflavour). With the
    launcher's name, and whether a pip wheel's beside the job's python may stand in for PATH's."""
    prefix, _ = container_args(spec, spec.container)
    rank = [*prefix, *bootstrap_argv(spec, _FROM["mpirun"], container=spec.container)]
    if spec.kind == "mpirun":  # outside Slurm: -n, the hosts, in the site's MPI's own spelling
        line = mpiexec_line(spec.mpi_launch, spec.ntasks, spec.hostfile,
                            [*(n for n, _ in spec.env), *(n for n, _, _ in spec.env_paths)])
        return Step("ranks", tuple(rank), (*line.args, *spec.mpirun_args), args=False,
                    launcher=f'"${line.program}"'), line
    wrapper = TERMINAL_WRAPPER if spec.interactive else _rank_log_wrapper(_redirect(spec))
    return (Step("ranks", ("bash", "-c", wrapper, "slurmtorch-rank", JOB_DIR, *rank),
                 ("-n", str(spec.ntasks), *mpirun_binding(spec)), launcher='"$mpirun"'),
            MpiexecLine("mpirun", True, (), "rank logs in the job folder"))


def role_steps(spec: JobSpec) -> tuple[Step, ...]:
    """A step per role (--mpi=none: the ranks take their world from SLURM_* and SLURMTORCH_ROLES),
    pinned by name to its nodes of the script's list: --relative=K only says where Slurm begins to
    look, and a step started while another still held node K's CPUs ran elsewhere (the master on
    node 3, away from its MASTER_ADDR on node 1: Slurm 24.11 on the testbed). A heterogeneous job's
    role runs in its component (--het-group=K), with its node type's variables (`env`)."""
    containers, het = dict(spec.role_containers), {c.role: c for c in spec.het_components}
    layout, wrapper = spec.role_layout, _role_log_wrapper(_redirect(spec))
    steps = []
    for role, count in spec.roles:
        prefix, pyxis = container_args(spec, containers.get(role))
        part, tasks = het.get(role), layout.tasks_of(role)
        options = [*([f"--het-group={part.group}"] if part else []), "--kill-on-bad-exit=1", "--mpi=none",
                   f"--nodes={count}", f"--ntasks={count * tasks}", f"--ntasks-per-node={tasks}", *_overlap(spec),
                   f"--cpus-per-task={part.cpus_per_task if part else spec.cpus_per_task}", *pyxis, *spec.srun_args]
        argv = ("bash", "-c", wrapper, "slurmtorch-rank", str(layout.offset(role)), JOB_DIR,
                *prefix, *bootstrap_argv(spec, "slurm", role, containers.get(role)))
        pinned = part is None or spec.max_restarts is not None  # a component's step has its own nodes
        steps.append(Step(f"role {role}", argv, tuple(options), (layout.node_offset(role), count) if pinned else None,
                          part.env_argv if part else (), JOB if role in TRAINING_ROLES else SERVICE))
    return tuple(steps)


def node_prologue(spec: JobSpec) -> tuple[Step, ...]:
    """The site's node prologue: once on every node, one task each, before the ranks; a failure
    ends the job. Each node's output in node-prologue-N.out, srun's own lines (which node failed)
    in node-prologue.err, not among the ranks' in batch.out. Not `spec.srun_args`: those are the
    ranks' (a --gpus-per-task there would not fit one task per node)."""
    if not spec.node_prologue or spec.kind != "sbatch":
        return ()
    every = ShellWord('--nodes="$SLURM_JOB_NUM_NODES"'), ShellWord('--ntasks="$SLURM_JOB_NUM_NODES"')
    options = (*every, "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--mpi=none",
               f"--output={job_logs(spec, 'node-prologue-%t.out')}", *_append(spec))
    return (Step("node prologue", ("bash", "-euc", "\n".join(spec.node_prologue)), options, end=CHECK, args=False,
                 stderr=NODE_PROLOGUE_ERR, logs="node-prologue-*.out"),)


def allocation_check_step(python: str, env: list[tuple[str, str]], srun_mpi: str, layout: Sequence[str],
                          checks: list[str]) -> Step:
    """`slurmtorch doctor --allocation`: one step over the allocation, as a job's ranks are launched
    (the site's environment, its --mpi, `--from slurm`) but with `--no-init` (the ranks test
    MASTER_ADDR before any collective), run from Python; `layout`: srun's nodes, tasks and CPUs
    (the doctor's step_layout); `checks`: the doctor's own arguments. `env` carries the site's
    variables into srun's environment; --export=ALL undoes --export=NONE."""
    options = (*layout, "--kill-on-bad-exit=1", *mpi_option(srun_mpi), "--export=ALL")
    return Step("allocation check", (python, "-m", "slurmtorch.bootstrap", *checks), options,
                env=("env", *(f"{k}={v}" for k, v in env)))


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
    if spec.roles:  # the failure report names each rank's role
        args += ["--roles", spec.role_layout.format()]
    return (*args, "--backend", spec.backend)


def rendezvous_flags(spec: JobSpec) -> tuple[bool, bool]:
    """Whether the batch script picks MASTER_PORT, and MASTER_ADDR, on the job's first node
    (where rank 0 runs): the one place that decides who does (pure).

    Nobody in the script when the site's environment fixes the value, or when the ranks
    find it themselves: MPI's rank 0 (mpirun, `--from mpi`), or the restart supervisor
    anew for each start (with the same templates/rendezvous.sh). The address only on the
    site's fabric (templates/rendezvous.sh: without a setting the ranks meet at the first
    node's host name); on real clusters the host name resolves to the management network.
    """
    fixed = {name for name, _ in spec.env}
    script = spec.kind == "sbatch" and spec.launcher in ("srun", "torchrun") and spec.max_restarts is None
    return script and "MASTER_PORT" not in fixed, script and "MASTER_ADDR" not in fixed


def trial_cases(spec: JobSpec) -> tuple[TrialCase, ...]:
    """Every trial of a sweep as its case in the batch script sets it up (pure)."""
    return tuple(TrialCase(trial=t, args=tuple(torchrun_literal(sweep_args(params), spec.launcher)),
                           exports=tuple((sweep_var(name), value) for name, value in params),
                           params=json.dumps(dict(params), separators=(",", ":"), ensure_ascii=False),
                           folder=trial_folder(t, params))
                 for t, params in spec.trials)


def het_headers(spec: JobSpec) -> tuple[tuple[str, ...], ...]:
    """Each later component's `#SBATCH` lines (after `#SBATCH hetjob`) of a heterogeneous job."""
    return tuple(tuple(sbatch_line(n, v) for n, v in c.directives) for c in spec.het_components[1:])


def edf(spec: JobSpec) -> str:
    """A cscs-ce container's EDF (TOML), which the batch script writes into the job folder; "" otherwise."""
    return edf_text(spec, spec.container) if spec.container is not None and spec.container.runtime == "cscs-ce" \
        else ""


def charliecloud_env(spec: JobSpec) -> tuple[str, ...]:
    """ch-run's --set-env file and the job's variables the batch script writes into it (templates/chenv.sh),
    each name checked; () without a charliecloud container."""
    runtimes = {c.runtime for c in (spec.container, *(c for _, c in spec.role_containers)) if c is not None}
    names = [shell.env_name(name) for name in job_env_names(spec)]
    return (CHARLIECLOUD_ENV, *names) if "charliecloud" in runtimes and spec.kind == "sbatch" and names else ()


def node_list(spec: JobSpec) -> str:
    """The script's hostlists of the job's nodes (`scontrol show hostnames` keeps their order): a
    heterogeneous job's SLURM_JOB_NODELIST is its first component's only."""
    if spec.max_restarts is not None:
        return ""
    groups = [f"$SLURM_JOB_NODELIST_HET_GROUP_{c.group}" for c in spec.het_components]
    return ShellWord(f'"{",".join(groups)}"' if groups else '"$SLURM_JOB_NODELIST"')


def plan(spec: JobSpec) -> Launch:
    """The launch of `spec`: its shape's planner, and what the script sets up around it (pure)."""
    pick_port, pick_addr = rendezvous_flags(spec)
    launcher = spec.launcher if spec.kind == "sbatch" else "mpirun"
    base = Launch((), "", pick_port=pick_port, pick_addr=pick_addr, supervisor=supervisor_args(spec),
                  started_check=spec.max_restarts is None and (bool(spec.roles) or launcher != "mpirun"))
    shape = _ray if spec.ray else _roles if spec.roles else _mpirun if launcher == "mpirun" else \
        _torchrun if launcher == "torchrun" else _ranks
    launch = shape(spec, base)
    steps = (*node_prologue(spec), *launch.steps)
    # Its nodes have the host's python when a step runs it (a role without an image, say); a
    # container job's need not, and its script then runs nothing of ours but bash.
    host = any(isinstance(word, Interpreter) for step in steps for word in step.argv)
    return replace(launch, steps=steps, python=spec.python if host else "")


def _ranks(spec: JobSpec, base: Launch) -> Launch:
    return replace(base, steps=(ranks_step(spec),), about="one srun step of every rank; rank logs in the job folder")


def _torchrun(spec: JobSpec, base: Launch) -> Launch:
    return replace(base, steps=(torchrun_step(spec),), node_list=node_list(spec),
                   about="torchrun's agent on every node, its rendezvous on this one; logs in the job folder")


def _mpirun(spec: JobSpec, base: Launch) -> Launch:
    step, line = mpirun_step(spec)
    return replace(base, steps=(step,), about=f"{spec.ntasks} rank{'s' * (spec.ntasks != 1)} under {line.program}; {line.forwards}",
                   mpirun=line.program, mpirun_beside_python=line.beside_python)


def _roles(spec: JobSpec, base: Launch) -> Launch:
    training = ", ".join(i for i in spec.role_layout.format().split(",") if i.split("=")[0] in TRAINING_ROLES)
    return replace(base, steps=role_steps(spec), roles=spec.role_layout.format(), node_list=node_list(spec),
                   about=f"a step per role, all at once; the torch world is the training roles ({training})")


def _ray(spec: JobSpec, base: Launch) -> Launch:
    return replace(base, steps=ray_steps(spec, outputs(spec, job_logs(spec, "rank-0")), _edf(spec)),
                   node_list=node_list(spec), ray=True,
                   about=f"a Ray cluster on the job's {spec.nodes} node(s), the script as its driver")
