"""`slurmtorch mpirun`: the same rendering for hosts without Slurm; runs it here."""

# No `from __future__ import annotations`: typer would eval each string annotation per call.

import os
import sys
from typing import List, Optional

import typer

from slurmtorch.cli._common import options, program_args, provenance, with_options
from slurmtorch.errors import SpecError, SubmitError


# The `Options` fields this verb offers (flags, help and type live there); the others are its own.
@with_options("ntasks", "module", "hostfile", "preset", "backend", "timeout", "local_rank_arg", "env")
def mpirun(
    ctx: typer.Context,
    script_and_args: Optional[List[str]] = typer.Argument(None, metavar="SCRIPT [ARGS]...", show_default=False),
    site: Optional[str] = typer.Option(None, "--site", help="site name or path (default: local)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the script, run nothing"),
    **given,
) -> int:
    """Run SCRIPT (or -m MODULE) on N ranks with mpirun; exits with its code.

    Everything after SCRIPT (or -m MODULE) goes to it as typed, as with mpirun and torchrun.
    The run gets a folder and an id (local-N, said on stderr): `slurmtorch stacks local-N`
    shows where each of its ranks stands.
    """
    # lazy: `slurmtorch --help` builds this verb and must not import yaml or jinja2
    from slurmtorch.submit import render, spec
    from slurmtorch.submit.jobfolder import jobdir
    from slurmtorch.submit import sites

    typed = program_args(ctx, script_and_args)
    script, args = spec.split_script(typed, given["module"])
    hostfile = given["hostfile"]
    if hostfile is not None:
        if not os.path.isfile(hostfile):
            raise SpecError(f"hostfile {hostfile} does not exist")
        hostfile = os.path.abspath(hostfile)
    job = spec.build_spec(sites.load_site(site or "local"), options(
        ctx.params, ("script_and_args", "site", "dry_run"), kind="mpirun", script=script, script_args=args,
        hostfile=hostfile, launcher="mpirun", python=sys.executable, job_root=str(jobdir.jobs_root()),
        command=provenance(ctx, "mpirun", len(typed))))
    text = render.render_mpirun(job)
    if dry_run:
        sys.stdout.write(text)
        return 0
    from slurmtorch.submit import scheduler as submit  # lazy: the edge, only a real run starts processes
    from slurmtorch.submit.jobfolder import localrun

    try:
        folder = localrun.create(text, job.ntasks)
    except SubmitError as exc:  # the run still runs, as it did before runs had folders
        print(f"slurmtorch: note: this run has no folder, so slurmtorch stacks cannot ask it: {exc.message}",
              file=sys.stderr, flush=True)
        return submit.run_local(text)
    print(f"slurmtorch: run {localrun.run_id(folder)} ({job.ntasks} rank{'s' if job.ntasks > 1 else ''}; "
          f"where each stands: slurmtorch stacks {localrun.run_id(folder)})", file=sys.stderr, flush=True)
    try:
        return submit.run_in_folder(folder / jobdir.SCRIPT, folder / jobdir.EXIT_CODE, localrun.environment(folder))
    finally:
        localrun.ended(folder)
