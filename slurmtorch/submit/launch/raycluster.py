"""`--ray`: a Ray cluster inside the allocation, and the script as its driver (pure).

The batch script starts its steps (`ray_steps`) at once, each running
`bootstrap/raynode.py` with the job's python (in the job's container, as a rank would):
the head on the first node (this one), at MASTER_ADDR, which the script picked on the
site's fabric interface as for any srun job; a worker on every other node, one step over
them all, each on its own fabric address; and the driver on the first node, which waits
for the head and for every node to join (--hang-timeout, default JOIN_S), then runs the
script with RAY_ADDRESS set. One process: a Ray driver is no rank, and the torch
bootstrap (rank, world, process group) has nothing to do for it. The steps overlap
(`--overlap`): they share the nodes' CPUs, as Ray's own processes do.

With roles (`--ray --role master=1 --role worker=2:partition=fat`), the head runs on the
leader's node and each other role's nodes are a worker step of their own, with their node
type's CPUs, GPUs and variables (in a heterogeneous job, `--het-group=K`): every Ray node has
one of its role's resource (`role:worker`: raynode.role_resource), by which the driver places
work on a node type.

The driver's step ends the job with its code. A node's step that ends first (its raylet
or GCS died: its raynode named the node in batch.out) ends the job at once, the script
stopped: the head and workers are vital steps (templates/reap.sh). At the end one more step
on every node ends whatever of this job's Ray is left (a cleanup step), then the node steps
get TERM (each raynode ends its session's processes): no raylet or GCS outlives the job.

Ray is the job's, never the login node's: nothing here imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from slurmtorch.errors import BootstrapError, SpecError
from slurmtorch.roles import RoleItem, parse_role_item
from slurmtorch.submit.launch.containers import container_args
from slurmtorch.submit.launch.hetjob import HetComponent
from slurmtorch.options import Options
from slurmtorch.submit.launch.scripttext import InCode, Interpreter, ShellWord
from slurmtorch.submit.launch.steps import CLEANUP, VITAL, Step

RAY_NODE = "slurmtorch.bootstrap.raynode"
JOIN_S = 300  # without --hang-timeout: how long the cluster may take to form before the job fails


def ray_options(o: Options) -> Options:
    """`o` as a --ray job takes it: one Slurm task per node (a Ray node holds the node's CPUs
    and GPUs), started by srun; what cannot be, refused in one line."""
    if not o.ray:
        return o
    if o.kind != "sbatch" or o.interactive:
        raise SpecError("--ray starts a Ray cluster in a batch job", tip="use slurmtorch sbatch --ray")
    if any(item.tasks is not None for item in _role_items(o)):
        raise SpecError("--ray runs one Ray node per Slurm node: a role's tasks= cannot apply",
                        tip="leave tasks= out; a Ray node holds the node's CPUs and GPUs")
    if o.role_images:
        raise SpecError("--ray runs every Ray node in the job's image: --role-image cannot apply",
                        tip="use --container-image")
    if o.launcher not in (None, "srun"):
        raise SpecError(f"--ray starts Ray's nodes with srun; --launcher {o.launcher} cannot",
                        tip="leave --launcher out")
    if o.max_restarts is not None:
        raise SpecError("--ray does not restart: --max-restarts restarts a step of ranks",
                        tip="leave --max-restarts out; Ray retries tasks and actors itself")
    if o.ntasks is not None or o.ntasks_per_node not in (None, 1):
        raise SpecError("--ray runs one Ray node per Slurm node, which takes all of the node's CPUs and GPUs",
                        tip="leave -n/--ntasks-per-node out; ask for CPUs with -c and GPUs with --gpus-per-node")
    return replace(o, launcher="srun", ntasks_per_node=1)


def _role_items(o: Options) -> list[RoleItem]:
    try:
        return [parse_role_item(item) for item in o.roles]
    except BootstrapError as exc:
        raise SpecError(exc.message, tip=exc.tip) from None


# The head's address, which the script sets before the steps (from MASTER_ADDR and MASTER_PORT, picked
# on this node as for any srun job, then unset: the port is Ray's GCS now, not a torch store's).
RAY_HEAD = ShellWord('"$ray_head"')


def ray_steps(spec, outputs: list[str], edf: list) -> tuple[Step, ...]:
    """The steps of a --ray spec: the head's and the driver's on the first node, the workers' (one
    step, or one a role) and the stop's (one step, or one a component); `outputs`: srun's options
    that send the driver's output where rank 0's goes (rank-0.out/err in the job folder), `edf`:
    a cscs-ce container's --environment. The head and workers are vital: Ray's node gone (its
    raylet or GCS died, its node was lost), the job ends at once; the driver's code is the job's."""
    prefix, pyxis = container_args(spec, spec.container)
    python = spec.container.interpreter if spec.container is not None else Interpreter(spec.python)
    deadline = spec.hang_timeout if spec.hang_timeout is not None else JOIN_S
    leader = spec.het_components[0] if spec.het_components else None
    one = ("--overlap", *_group(leader), "--nodes=1", "--ntasks=1", "--mpi=none", f"--cpus-per-task={spec.cpus_per_task}")
    node = (*prefix, python, "-m", RAY_NODE)
    parts = _parts(spec)

    def step(name: str, part: _Part, offset: int, count: int, end: str, *srun: str) -> Step:
        what = "stop" if end == CLEANUP else "worker"
        options = (*srun[:1], *_group(part.het), f"--nodes={count}", f"--ntasks={count}", "--ntasks-per-node=1",
                   *srun[1:], *edf)
        args = () if end == CLEANUP else _node_args(spec, part, deadline)
        return Step(name, (*node, what, RAY_HEAD, *args), options, (offset, count), part.env_argv, end, args=False)

    workers = tuple(step(f"Ray workers ({p.role})" if p.role else "Ray workers", p, p.offset + (i == 0), p.count - (i == 0), VITAL,
                         "--overlap", "--kill-on-bad-exit=1", "--mpi=none", f"--cpus-per-task={p.cpus}", *pyxis,
                         *spec.srun_args)
                    for i, p in enumerate(parts) if p.count - (i == 0) > 0)  # the first node is the head's
    stops = tuple(step("Ray stop", p, p.offset, p.count, CLEANUP, "--overlap", "--mpi=none", "--quiet", *pyxis)
                  for p in (parts if spec.het_components else [_Part(None, 0, spec.nodes, spec.cpus_per_task, 0)]))
    head = Step("Ray head", (*node, "head", RAY_HEAD, *_node_args(spec, parts[0], deadline)),
                (*one, *pyxis, *spec.srun_args, *edf), (0, 1), end=VITAL, args=False)
    driver = Step("Ray driver", (*node, "driver", RAY_HEAD, "--nodes", str(spec.nodes), "--deadline", str(deadline),
                                 *program(spec)), (*one, *outputs, *pyxis, *spec.srun_args, *edf), (0, 1))
    return head, *workers, driver, *stops


@dataclass(frozen=True)
class _Part:
    """The nodes of one role (or of the whole job), in role order, and what their Ray has."""

    role: str | None
    offset: int
    count: int
    cpus: int
    gpus: int
    het: HetComponent | None = None  # its component in a heterogeneous job

    @property
    def env_argv(self) -> tuple[str, ...]:
        return self.het.env_argv if self.het is not None else ()


def _parts(spec) -> list[_Part]:
    """The job's nodes as one part, or a part a role (its node type's CPUs and GPUs)."""
    if not spec.roles:
        return [_Part(None, 0, spec.nodes, spec.cpus_per_task, spec.gpus_per_node)]
    layout, het = spec.role_layout, {c.role: c for c in spec.het_components}
    out = []
    for role, count in spec.roles:
        c = het.get(role)
        out.append(_Part(role, layout.node_offset(role), count, c.cpus_per_task if c else spec.cpus_per_task,
                         c.gpus_per_node if c else spec.gpus_per_node, c))
    return out


def _group(component: HetComponent | None) -> tuple[str, ...]:
    return (f"--het-group={component.group}",) if component is not None else ()


def _node_args(spec, part: _Part, deadline: int) -> tuple[str, ...]:
    role = ("--role", part.role) if part.role is not None else ()
    return ("--cpus", str(part.cpus), "--gpus", str(part.gpus), "--backend", spec.backend,
            "--deadline", str(deadline), *role)


def program(spec) -> list[str]:
    """SCRIPT ARGS or -m MODULE ARGS, from the job's copy of the code where it has one."""
    snap = spec.snapshot
    if spec.module:
        # `python -m` imports from the working folder, the live tree: the job's copy instead.
        where = ["--import-from", InCode(snap.cwd)] if snap is not None and snap.cwd is not None else []
        return [*where, "-m", spec.module, *spec.script_args]
    script = InCode(snap.script) if snap is not None and snap.script is not None else spec.script
    return [script, *spec.script_args]
