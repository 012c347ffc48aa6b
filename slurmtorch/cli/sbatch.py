"""`slurmtorch sbatch`: render the batch script, then print it or submit it."""

# No `from __future__ import annotations` here: typer would eval every option's string
# annotation on each call (~2% of a dry run's instructions, counted with callgrind).

import sys
from typing import List, Optional

import typer

from slurmtorch.cli._common import provenance


def sbatch(
    ctx: typer.Context,
    script_and_args: Optional[List[str]] = typer.Argument(None, metavar="SCRIPT [-- SCRIPT_ARGS...]", show_default=False),
    module: Optional[str] = typer.Option(None, "-m", "--module", help="run a module instead of SCRIPT"),
    nodes: Optional[int] = typer.Option(None, "--nodes", "-N"),
    ntasks_per_node: Optional[int] = typer.Option(None, "--ntasks-per-node", help="ranks per node (default: GPUs per node, or 1)"),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node"),
    cpus_per_task: Optional[int] = typer.Option(None, "--cpus-per-task"),
    site: Optional[str] = typer.Option(None, "--site", help="site name or path (default: $SLURMTORCH_SITE)"),
    preset: Optional[str] = typer.Option(None, "--preset"),
    partition: Optional[str] = typer.Option(None, "--partition", "-p"),
    time: Optional[str] = typer.Option(None, "--time", "-t", help="Slurm time limit, e.g. 1-00:00:00"),
    account: Optional[str] = typer.Option(None, "--account", "-A"),
    qos: Optional[str] = typer.Option(None, "--qos"),
    job_name: Optional[str] = typer.Option(None, "--job-name", "-J"),
    backend: Optional[str] = typer.Option(None, "--backend", help="auto|nccl|gloo|mpi"),
    launcher: Optional[str] = typer.Option(None, "--launcher", help="srun|mpirun|torchrun"),
    timeout: Optional[int] = typer.Option(None, "--timeout", help="process-group timeout in seconds"),
    env: Optional[List[str]] = typer.Option(None, "--env", help="K=V, repeatable"),
    requeue: Optional[bool] = typer.Option(None, "--requeue/--no-requeue",
                                           help="let the job be requeued (default: on with --signal)"),
    signal: Optional[str] = typer.Option(None, "--signal",
                                         help="preemption signal to the ranks, [R:]SIG[@SECONDS], e.g. USR1@60"),
    role: Optional[List[str]] = typer.Option(
        None, "--role", metavar="ROLE=NODES",
        help="a role job: master|chief=1, worker=N, ps=N, evaluator=N (counts in NODES, one task each; "
             "repeatable). Each rank gets CLUSTER_SPEC/TF_CONFIG with every role's host:port list; the torch "
             "world is master/chief + workers; ps/evaluator get MASTER_ADDR/PORT but no process group. "
             "--role chief=1 names the leader chief in CLUSTER_SPEC too"),
    container_image: Optional[str] = typer.Option(None, "--container-image", metavar="IMAGE",
                                                  help="run every rank in IMAGE (default: the site's container)"),
    container_runtime: Optional[str] = typer.Option(None, "--container-runtime", help="pyxis|apptainer (default: the site's, else pyxis)"),
    role_image: Optional[List[str]] = typer.Option(None, "--role-image", metavar="ROLE=IMAGE",
                                                   help="image for one role of a --role job (repeatable)"),
    array: Optional[str] = typer.Option(
        None, "--array", metavar="INDICES[%MAX]",
        help="a Slurm job array of multi-node jobs, e.g. 0-19%4; with --sweep the indices are trial ids and "
             "a bare %MAX limits how many run at once"),
    sweep: Optional[List[str]] = typer.Option(
        None, "--sweep", metavar="NAME=V1,V2",
        help="a grid sweep (the product of every --sweep), one array task per trial; trial K gets "
             "SLURMTORCH_TRIAL=K, SLURMTORCH_SWEEP_<NAME>=V, SLURMTORCH_PARAMS (JSON) and --NAME V appended "
             "to the script arguments"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the script, submit nothing"),
    wait: bool = typer.Option(False, "--wait", help="block until the job (every array task) ends; exit with its "
                                                    "code (non-zero if any trial failed)"),
) -> int:
    """Submit SCRIPT (or -m MODULE) as a multi-node job; prints the job id."""
    from slurmtorch.submit import jobdirs
    from slurmtorch.submit import render
    from slurmtorch.submit import sites
    from slurmtorch.submit import spec

    script, args = spec.split_script(script_and_args, module)
    root = jobdirs.jobs_root()
    options = spec.Options(
        kind="sbatch", script=script, module=module, script_args=tuple(args), preset=preset,
        partition=partition, nodes=nodes, ntasks_per_node=ntasks_per_node, gpus_per_node=gpus_per_node,
        cpus_per_task=cpus_per_task, time=time, account=account, qos=qos, job_name=job_name,
        backend=backend, launcher=launcher, timeout=timeout, env=tuple(env or ()),
        requeue=requeue, signal=signal, python=sys.executable, job_root=str(root), command=provenance(ctx, "sbatch"),
        roles=tuple(role or ()), container_image=container_image, container_runtime=container_runtime,
        role_images=tuple(role_image or ()), array=array, sweep=tuple(sweep or ()),
    )
    job = spec.build_spec(sites.load_site(sites.site_ref(site, None)), options)
    text = render.render_sbatch(job)
    if dry_run:
        sys.stdout.write(text)
        return 0
    from slurmtorch.submit import scheduler as submit  # the edge: only a real submission starts processes

    sub = submit.submit(text, root, trials=spec.trials_record(job))
    print(sub.job_id, flush=True)
    print(f"submitted job {sub.job_id}; folder {sub.job_dir}", file=sys.stderr, flush=True)
    if not wait:
        return 0
    if job.array:
        return submit.wait_array(sub.job_id, root)
    status = submit.wait(sub.job_id, root)
    code = submit.exit_code_of(status)
    print(f"job {sub.job_id} {status.state} (exit {code})", file=sys.stderr)
    if code != 0:
        for line in submit.failure_lines(sub.job_dir):
            print(f"slurmtorch: {line}", file=sys.stderr)
    return code
