"""`--ray`: a Ray cluster inside the allocation, and the script as its driver (pure).

The batch script (templates/sbatch.sh.j2) starts three srun steps at once, each running
`bootstrap/raynode.py` with the job's python (in the job's container, as a rank would):
the head on the first node (this one), at MASTER_ADDR, which the script picked on the
site's fabric interface as for any srun job; a worker on every other node, one step over
them all, each on its own fabric address; and the driver on the first node, which waits
for the head and for every node to join (--hang-timeout, default JOIN_S), then runs the
script with RAY_ADDRESS set. One process: a Ray driver is no rank, and the torch
bootstrap (rank, world, process group) has nothing to do for it. The steps overlap
(`--overlap`): they share the nodes' CPUs, as Ray's own processes do.

The driver's step ends the job with its code. A node's step that ends first (its raylet
or GCS died: its raynode named the node in batch.out) ends the job at once, the script
stopped (REAP). At the end Ray is stopped on every node: TERM to the steps (each raynode
ends its session's processes), then one more step on every node that ends whatever of
this job's Ray is left, so that no raylet or GCS outlives the job.

Ray is the job's, never the login node's: nothing here imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from slurmtorch.errors import SpecError
from slurmtorch.submit.containers import container_args
from slurmtorch.submit.options import Options
from slurmtorch.submit.scripttext import InCode

RAY_NODE = "slurmtorch.bootstrap.raynode"
JOIN_S = 300  # without --hang-timeout: how long the cluster may take to form before the job fails


def ray_options(o: Options) -> Options:
    """`o` as a --ray job takes it: one Slurm task per node (a Ray node holds the node's CPUs
    and GPUs), started by srun; what cannot be, refused in one line."""
    if not o.ray:
        return o
    if o.kind != "sbatch" or o.interactive:
        raise SpecError("--ray starts a Ray cluster in a batch job", tip="use slurmtorch sbatch --ray")
    if o.roles:
        raise SpecError("--ray and --role are two ways to lay out a job: give one",
                        tip="a Ray job places its work itself (Ray's resources and placement groups)")
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


# After the three steps started in the background (ray_head_step, ray_worker_step (empty on one
# node), ray_driver_step: srun's pids), wait for them; then $rc is the job's code.
REAP = """\
# The driver's step decides the job's code. A Ray node's step that ends before it (its raylet
# or GCS died, or its node was lost: the line above names the node) ends the job at once: the
# script would otherwise wait for that node's work until its own timeouts, if it has any.
rc=
while [ -z "$rc" ]; do
    wait -n
    if ! kill -0 "$ray_driver_step" 2>/dev/null; then
        wait "$ray_driver_step"
        rc=$?
    elif ! kill -0 "$ray_head_step" 2>/dev/null \\
        || { [ -n "$ray_worker_step" ] && ! kill -0 "$ray_worker_step" 2>/dev/null; }; then
        echo "slurmtorch: error: a Ray node's step ended before the script did (the line above names the node);" \\
            "ending the job" >&2
        rc=1
        kill "$ray_driver_step" 2>/dev/null
    fi
done"""

# After the stop step: the nodes' steps, told to stop by it, end by themselves; srun is
# killed after a grace time, and the job's end takes a step that is still there down.
AWAIT_STEPS = """\
ray_steps=("$ray_driver_step" "$ray_head_step" $ray_worker_step)
grace=150
while [ "$grace" -gt 0 ] && kill -0 "${ray_steps[@]}" 2>/dev/null; do
    sleep 0.2
    grace=$((grace - 1))
done
kill -KILL "${ray_steps[@]}" 2>/dev/null
wait"""


@dataclass(frozen=True)
class RayPlan:
    """The Ray steps of a --ray batch script, unquoted: srun's options (the template adds
    --nodelist) and raynode's words after its subcommand and the head's address."""

    head_srun: tuple[str, ...]
    worker_srun: tuple[str, ...]
    driver_srun: tuple[str, ...]
    stop_srun: tuple[str, ...]
    node_argv: tuple[str, ...]  # [container prefix] python -m slurmtorch.bootstrap.raynode
    node_args: tuple[str, ...]  # head's and workers': --cpus --gpus --backend --deadline
    driver_args: tuple[str, ...]  # --nodes --deadline [--import-from] (SCRIPT | -m MODULE) ARGS
    deadline: int
    reap: str = REAP
    await_steps: str = AWAIT_STEPS


def ray_plan(spec, outputs: list[str]) -> RayPlan | None:
    """The plan for a --ray spec (None for any other); `outputs`: srun's options that send the
    driver's output where rank 0's goes (rank-0.out/err in the job folder)."""
    if not spec.ray:
        return None
    prefix, pyxis = container_args(spec, spec.container)
    python = spec.container.interpreter if spec.container is not None else spec.python
    deadline = spec.hang_timeout if spec.hang_timeout is not None else JOIN_S
    cpus = f"--cpus-per-task={spec.cpus_per_task}"
    one = ("--overlap", "--nodes=1", "--ntasks=1", "--mpi=none", cpus)
    workers = spec.nodes - 1
    return RayPlan(
        head_srun=(*one, *pyxis, *spec.srun_args),
        worker_srun=("--overlap", f"--nodes={workers}", f"--ntasks={workers}", "--ntasks-per-node=1",
                     "--kill-on-bad-exit=1", "--mpi=none", cpus, *pyxis, *spec.srun_args),
        driver_srun=(*one, *outputs, *pyxis, *spec.srun_args),
        stop_srun=("--overlap", f"--nodes={spec.nodes}", f"--ntasks={spec.nodes}", "--ntasks-per-node=1",
                   "--mpi=none", "--quiet", *pyxis),
        node_argv=(*prefix, python, "-m", RAY_NODE),
        node_args=("--cpus", str(spec.cpus_per_task), "--gpus", str(spec.gpus_per_node), "--backend", spec.backend,
                   "--deadline", str(deadline)),
        driver_args=("--nodes", str(spec.nodes), "--deadline", str(deadline), *program(spec)),
        deadline=deadline,
    )


def program(spec) -> list[str]:
    """SCRIPT ARGS or -m MODULE ARGS, from the job's copy of the code where it has one."""
    snap = spec.snapshot
    if spec.module:
        # `python -m` imports from the working folder, the live tree: the job's copy instead.
        where = ["--import-from", InCode(snap.cwd)] if snap is not None and snap.cwd is not None else []
        return [*where, "-m", spec.module, *spec.script_args]
    script = InCode(snap.script) if snap is not None and snap.script is not None else spec.script
    return [script, *spec.script_args]
