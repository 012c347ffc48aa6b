"""`slurmtorch mpirun`: the same rendering for hosts without Slurm; runs it here."""

# No `from __future__ import annotations`: typer would eval each string annotation per call.

import os
import sys
from typing import List, Optional

import typer

from slurmtorch.cli._common import option, options, provenance
from slurmtorch.errors import SpecError


# Each `option(...)` parameter is the `Options` field of its name; the others are the verb's own.
def mpirun(
    ctx: typer.Context,
    script_and_args: Optional[List[str]] = typer.Argument(None, metavar="SCRIPT [-- SCRIPT_ARGS...]", show_default=False),
    ntasks: Optional[int] = option("ntasks"),
    module: Optional[str] = option("module"),
    hostfile: Optional[str] = option("hostfile"),
    site: Optional[str] = typer.Option(None, "--site", help="site name or path (default: local)"),
    preset: Optional[str] = option("preset"),
    backend: Optional[str] = option("backend"),
    timeout: Optional[int] = option("timeout"),
    env: Optional[List[str]] = option("env"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the script, run nothing"),
) -> int:
    """Run SCRIPT (or -m MODULE) on N ranks with mpirun; exits with its code."""
    # lazy: `slurmtorch --help` builds this verb and must not import yaml or jinja2
    from slurmtorch.submit import jobdir, render, sites, spec

    script, args = spec.split_script(script_and_args, module)
    if hostfile is not None:
        if not os.path.isfile(hostfile):
            raise SpecError(f"hostfile {hostfile} does not exist")
        hostfile = os.path.abspath(hostfile)
    job = spec.build_spec(sites.load_site(site or "local"), options(
        ctx.params, ("script_and_args", "site", "dry_run"), kind="mpirun", script=script, script_args=args,
        hostfile=hostfile, launcher="mpirun", python=sys.executable, job_root=str(jobdir.jobs_root()),
        command=provenance(ctx, "mpirun")))
    text = render.render_mpirun(job)
    if dry_run:
        sys.stdout.write(text)
        return 0
    from slurmtorch.submit import scheduler as submit  # lazy: the edge, only a real run starts processes

    return submit.run_local(text)
