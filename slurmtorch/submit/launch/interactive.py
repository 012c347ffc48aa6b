"""`slurmtorch alloc`: an interactive allocation as values (pure), the salloc command and its
shell's set-up; and what `slurmtorch run` in that shell reads back.

salloc obtains the allocation and runs the command it is given where salloc itself runs: on
Slurm 22.05 that is the login host, even with `LaunchParameters=use_interactive_step`, which
"does not affect salloc called with a command as an argument. These jobs will continue to be
executed as the calling user on the calling host" (slurm.conf(5) of 22.05.8, Debian's
slurm-client; salloc(1): "when the user specified command is complete, salloc relinquishes
the job allocation"). So the shell
is never on a node: every rank, and the one task that picks MASTER_PORT/ADDR on the first
node, starts with srun from there (the script's on_first_node), driven by the SLURM_JOB_ID,
SLURM_JOB_NODELIST, ... that salloc exports. When the shell exits, salloc relinquishes the
allocation and Slurm ends its steps. A later `ssh -t LOGIN slurmtorch alloc ...` (issue 27's
remote clusters) runs this unchanged on the login host.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from slurmtorch import protocol, shell
from slurmtorch.errors import SpecError, typed
from slurmtorch.submit.launch import render
from slurmtorch.submit.launch.spec import JobSpec

# The one command the shell offers, shown in its first lines and in the docs.
RUN_HINT = "slurmtorch run SCRIPT [ARGS]"
SETUP_PLACEHOLDER = "SETUP"  # the set-up file's name in a dry run (a private temporary file when run)

# `#SBATCH` lines of a batch job that salloc has no option for (salloc(1)): where the batch
# step's output goes, and requeueing, which only a batch job can do.
_BATCH_ONLY = frozenset({"output", "error", "open-mode", "requeue", "no-requeue"})


def check(spec: JobSpec) -> None:
    """Refuse what an interactive allocation cannot run yet, in one line with the fix."""
    if spec.container is not None:
        raise SpecError(f"site {spec.site!r} runs the ranks in a container, which slurmtorch alloc does not do yet",
                        tip=f"use {typed('sbatch')}, or a site (or preset) without a container")


def shell_argv(setup_file: str) -> list[str]:
    """The interactive bash salloc runs: the set-up file in place of ~/.bashrc (which it sources)."""
    return ["bash", "--rcfile", setup_file, "-i"]


def salloc_argv(spec: JobSpec, setup_file: str) -> list[str]:
    """`salloc` with the batch job's own header as options (the same `--nodes`, `--partition`,
    `--ntasks-per-node`, `--cpus-per-task`, `--time`, ... a batch job of these options asks
    for, each checked once by spec.sbatch_line), less what only a batch job has, then the shell."""
    argv = ["salloc"]
    for name, value in spec.directives:
        if name not in _BATCH_ONLY:
            argv.append(f"--{name}" if value is True else f"--{name}={value}")
    return [*argv, *shell_argv(setup_file)]


def stored(site_ref: str, params: Mapping[str, Any]) -> str:
    """The allocation's site and options (the CLI's parsed values, none left out) as
    `slurmtorch run` reads them back from the shell: JSON in protocol.ALLOC."""
    given = {name: value for name, value in params.items() if value is not None and value != [] and value != ()}
    return json.dumps({"site": site_ref, "options": given}, sort_keys=True, separators=(",", ":"))


def read_stored(environ: Mapping[str, str]) -> tuple[str, str, dict[str, Any]]:
    """(job id, site, options) of the allocation whose shell this is, or a SpecError that says
    where `slurmtorch run` works."""
    text, job_id = environ.get(protocol.ALLOC), environ.get("SLURM_JOB_ID")
    if not text or not job_id:
        raise SpecError("slurmtorch run starts ranks in the shell of slurmtorch alloc, and this is not one",
                        tip=f"{typed('alloc --site SITE --nodes N')}, then slurmtorch run SCRIPT [ARGS] in its shell; "
                            f"or {typed('sbatch')} for a batch job")
    try:
        record = json.loads(text)
        site, options = record["site"], record["options"]
        if not isinstance(site, str) or not isinstance(options, dict):
            raise TypeError
    except (ValueError, TypeError, KeyError):
        raise SpecError(f"{protocol.ALLOC} is not what slurmtorch alloc wrote",
                        tip=f"leave the shell (exit) and start a new one with {typed('alloc')}") from None
    return job_id, site, options


def site_for_later(ref: str) -> str:
    """A site given as a path, made absolute: `slurmtorch run` may be typed in another folder."""
    return os.path.abspath(ref) if os.sep in ref or ref.endswith((".yaml", ".yml")) else ref


def render_setup(spec: JobSpec, stored_options: str, cli: list[str]) -> str:
    """The shell's set-up file: ~/.bashrc, the site's modules and environment (the batch
    script's own lines), the allocation's options, `slurmtorch` as `cli`, the first lines."""
    return render.render_template("alloc-shell.sh.j2", spec, stored=stored_options, cli=cli,
                                  alloc_var=protocol.ALLOC, run_hint=RUN_HINT)


def dry_run_text(spec: JobSpec, setup: str) -> str:
    """What `slurmtorch alloc --dry-run` prints: the salloc command, then the set-up file."""
    return (f"# slurmtorch alloc --dry-run: nothing obtained. The command, then the shell's set-up ({SETUP_PLACEHOLDER}, "
            "a private temporary file):\n"
            f"{shell.join(salloc_argv(spec, SETUP_PLACEHOLDER))}\n"
            f"# {SETUP_PLACEHOLDER}:\n{setup}")
