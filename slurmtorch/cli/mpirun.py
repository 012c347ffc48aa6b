"""`slurmtorch mpirun`: the same rendering for hosts without Slurm; runs it here."""

# No `from __future__ import annotations`: typer would eval each string annotation per call.

import os
import sys
from typing import List, Optional

import typer

from slurmtorch.cli._common import options, program_args, provenance, with_options
from slurmtorch.errors import SpecError
from slurmtorch.options import split_script


# The `Options` fields this verb offers (flags, help and type live there); the others are its own.
@with_options("ntasks", "module", "hostfile", "preset", "backend", "timeout", "local_rank_arg", "init_args",
              "no_init", "cluster_spec", "placement", "env", "mpirun_args",
              helps={"ntasks": "number of ranks, on this host or over --hostfile's (default: the preset's ntasks; "
                               "one of the two is needed)"})
def mpirun(
    ctx: typer.Context,
    script_and_args: Optional[List[str]] = typer.Argument(None, metavar="SCRIPT [ARGS]...", show_default=False),
    site: Optional[str] = typer.Option(None, "--site", help="site name or path (default: local)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the script, run nothing"),
    **given,
) -> int:
    """Run SCRIPT (or -m MODULE) on N ranks with mpirun; exits with its code.

    Everything after SCRIPT (or -m MODULE) goes to it as typed, as with mpirun and torchrun;
    slurmtorch's options there get a warning (those that say what slurmtorch does, as
    --dry-run, are refused), unless a -- follows SCRIPT (MODULE).
    The run gets a folder and an id (local-N, said on stderr): `slurmtorch stacks local-N`
    shows where each of its ranks stands.
    """
    from slurmtorch.usecases import launch  # lazy: `slurmtorch --help` must not import yaml or jinja2

    typed = program_args(ctx, script_and_args)
    script, args = split_script(typed, given["module"])
    hostfile = given["hostfile"]
    if hostfile is not None:
        if not os.path.isfile(hostfile):
            raise SpecError(f"hostfile {hostfile} does not exist")
        hostfile = os.path.abspath(hostfile)
    job = launch.dry_run(launch.site_for("mpirun", site), options(
        ctx.params, ("script_and_args", "site", "dry_run"), kind="mpirun", script=script, script_args=args,
        hostfile=hostfile, launcher="mpirun", python=sys.executable,
        command=provenance(ctx, "mpirun", len(typed))))
    if dry_run:
        sys.stdout.write(job.text)
        return 0
    return launch.run_here(job, lambda line: print(line, file=sys.stderr, flush=True))
