"""`slurmtorch mpirun`: the same rendering for hosts without Slurm; runs it here."""

# No `from __future__ import annotations`: typer would eval each string annotation per call.

import sys
from typing import List, Optional

import typer

from slurmtorch.cli._common import provenance


def mpirun(
    ctx: typer.Context,
    script_and_args: Optional[List[str]] = typer.Argument(None, metavar="SCRIPT [-- SCRIPT_ARGS...]", show_default=False),
    ntasks: Optional[int] = typer.Option(None, "-n", "--np", help="number of ranks"),
    module: Optional[str] = typer.Option(None, "-m", "--module", help="run a module instead of SCRIPT"),
    hostfile: Optional[str] = typer.Option(None, "--hostfile"),
    site: Optional[str] = typer.Option(None, "--site", help="site name or path (default: local)"),
    preset: Optional[str] = typer.Option(None, "--preset"),
    backend: Optional[str] = typer.Option(None, "--backend", help="auto|nccl|gloo|mpi"),
    timeout: Optional[int] = typer.Option(None, "--timeout", help="process-group timeout in seconds"),
    env: Optional[List[str]] = typer.Option(None, "--env", help="K=V, repeatable"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the script, run nothing"),
) -> int:
    """Run SCRIPT (or -m MODULE) on N ranks with mpirun; exits with its code."""
    import os

    from slurmtorch.submit import render
    from slurmtorch.submit import sites
    from slurmtorch.submit import spec
    from slurmtorch.submit import scheduler as submit
    from slurmtorch.errors import SpecError

    script, args = spec.split_script(script_and_args, module)
    if hostfile is not None:
        if not os.path.isfile(hostfile):
            raise SpecError(f"hostfile {hostfile} does not exist")
        hostfile = os.path.abspath(hostfile)
    options = spec.Options(
        kind="mpirun", script=script, module=module, script_args=tuple(args), preset=preset,
        ntasks=ntasks, hostfile=hostfile, backend=backend, launcher="mpirun", timeout=timeout,
        env=tuple(env or ()), python=sys.executable, job_root=str(submit.jobs_root()),
        command=provenance(ctx, "mpirun"),
    )
    job = spec.build_spec(sites.load_site(site or "local"), options)
    text = render.render_mpirun(job)
    if dry_run:
        sys.stdout.write(text)
        return 0
    return submit.run_local(text)
