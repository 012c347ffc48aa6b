"""`slurmtorch alloc`: an interactive allocation (salloc) and a shell in it; `slurmtorch run`
in that shell starts the ranks on it, as the batch script would."""

# No `from __future__ import annotations`: typer would eval each string annotation per call.

import sys
from typing import List, Optional

import typer

from slurmtorch.cli._common import cluster_option, options, program_args, provenance, with_options
from slurmtorch.cli.sbatch import SBATCH_OPTIONS
from slurmtorch.options import INTERACTIVE_JOB_NAME, split_script

# sbatch's options less those only a batch job has (requeueing, arrays and sweeps, the
# restart supervisor, roles' separate steps, containers) and the program (`slurmtorch run`'s).
BATCH_ONLY = ("module", "requeue", "signal", "roles", "ray", "container_image", "container_runtime", "role_images",
              "array", "sweep", "max_restarts", "spare_nodes", "hang_timeout", "replace_straggler")
ALLOC_OPTIONS = tuple(name for name in SBATCH_OPTIONS if name not in BATCH_ONLY)


@with_options(*ALLOC_OPTIONS, helps={"job_name": f"job name (default: {INTERACTIVE_JOB_NAME})"})
def alloc(
    ctx: typer.Context,
    site: Optional[str] = typer.Option(None, "--site", help="site name or path (default: $SLURMTORCH_SITE)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the salloc command and the shell's set-up; "
                                                          "obtain nothing"),
    cluster: Optional[str] = cluster_option(),
    **given,
) -> int:
    """Obtain an allocation with salloc and open a shell in it; exits with the shell's code.

    The options are sbatch's. In the shell, `slurmtorch run SCRIPT [ARGS]` starts the ranks
    on the allocation (again after each edit); `exit` gives the allocation back. With
    --cluster: this folder's git work tree is synced there first and the shell opens in its
    copy, over `ssh -t`.
    """
    if cluster:
        from slurmtorch.remote import forward  # lazy: only --cluster needs ssh's edge

        if forward.elsewhere(cluster):
            return forward.submit(cluster, ctx.obj["argv"], [], None, None, tty=True)
    from slurmtorch.usecases import launch  # lazy: `slurmtorch --help` must not import yaml or jinja2

    own = ("site", "dry_run", "cluster")
    asked = launch.allocation_dry_run(site, options(
        ctx.params, own, kind="sbatch", interactive=True, python=sys.executable,
        job_name=given["job_name"] or INTERACTIVE_JOB_NAME,
        command=provenance(ctx, "alloc")), {k: v for k, v in ctx.params.items() if k not in own})
    if dry_run:
        sys.stdout.write(asked.text)
        return 0
    return launch.allocate(asked)


@with_options("module")
def run(
    ctx: typer.Context,
    script_and_args: Optional[List[str]] = typer.Argument(None, metavar="SCRIPT [ARGS]...", show_default=False),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the launch script, run nothing"),
    **given,
) -> int:
    """In `slurmtorch alloc`'s shell: start SCRIPT (or -m MODULE) on the allocation's ranks.

    The launch line is the batch script's (srun, torchrun or mpirun, as the site says), with
    the allocation's options; the ranks' output comes here. Ctrl-C ends this run, not the
    allocation. Everything after SCRIPT (or -m MODULE) goes to it as typed;
    slurmtorch's options there get a warning (those that say what slurmtorch does, as
    --dry-run, are refused), unless a -- follows SCRIPT (MODULE).
    """
    from slurmtorch.usecases import launch  # lazy: `slurmtorch --help` must not import yaml or jinja2

    typed = program_args(ctx, script_and_args)  # what was typed first: it is refused wherever it is typed
    job_id, where, stored = launch.in_allocation()
    script, args = split_script(typed, given["module"])
    job = launch.dry_run(where, options(
        {**stored, "module": given["module"]}, (), kind="sbatch", interactive=True, script=script,
        script_args=args, python=sys.executable, command=provenance(ctx, "run", len(typed))))
    if dry_run:
        sys.stdout.write(job.text)
        return 0
    return launch.run_in_allocation(job, job_id)
