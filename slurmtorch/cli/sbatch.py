"""`slurmtorch sbatch`: render the batch script, then print it or submit it."""

# No `from __future__ import annotations` here: typer would eval every option's string
# annotation on each call (~2% of a dry run's instructions, counted with callgrind).

import json
import os
import sys
from typing import List, Optional

import typer

from slurmtorch import errors
from slurmtorch.cli._common import cluster_option, options, program_args, provenance, with_options
from slurmtorch.errors import SpecError
from slurmtorch.options import split_script


# The `Options` fields this verb offers, in --help's order: flags, help and type live there.
SBATCH_OPTIONS = (
    "module", "nodes", "ntasks", "ntasks_per_node", "gpus_per_node", "cpus_per_task", "preset", "partition",
    "time", "account", "qos", "job_name", "constraint", "mem", "mem_per_cpu", "mem_per_gpu", "exclusive",
    "dependency", "begin", "gres", "reservation", "nodelist", "exclude", "mail_type", "mail_user", "comment",
    "backend", "launcher", "timeout", "local_rank_arg", "init_args", "no_init", "cluster_spec", "placement", "env", "requeue",
    "signal", "roles", "ray", "container_image", "container_runtime",
    "role_images", "array", "sweep", "max_restarts", "spare_nodes", "hang_timeout", "replace_straggler",
    "sbatch_args", "srun_args",
)


@with_options(*SBATCH_OPTIONS)
def sbatch(
    ctx: typer.Context,
    script_and_args: Optional[List[str]] = typer.Argument(None, metavar="SCRIPT [ARGS]...", show_default=False),
    site: Optional[str] = typer.Option(None, "--site", help="site name or path (default: $SLURMTORCH_SITE)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the script, submit nothing"),
    wait: bool = typer.Option(False, "--wait", help="block until the job (every array task) ends, streaming rank "
                                                    "0's output (every array task's, each line marked "
                                                    "[trial K]) and the job's state; exit with the failing "
                                                    "rank's exit code (non-zero if any trial failed)"),
    cancel_on_interrupt: bool = typer.Option(False, "--cancel-on-interrupt",
                                             help="with --wait: Ctrl-C cancels the job (default: it runs on)"),
    parsable: bool = typer.Option(False, "--parsable", help="print only the job id (as sbatch --parsable)"),
    as_json: bool = typer.Option(False, "--json", help="with --wait: the job's end as one JSON object on stdout, "
                                                      "its output not streamed (docs/json.md)"),
    snapshot: Optional[bool] = typer.Option(
        None, "--snapshot/--no-snapshot", show_default=False,
        help="run a copy of the code taken now (the script's git work tree: tracked and not-ignored files; "
             "else its folder; outside git, a folder too big to copy: its .py files and packages), so edits "
             "while the job waits or before a requeue change nothing; --no-snapshot runs it in place "
             "(default: on, unless SLURMTORCH_SNAPSHOT=off)"),
    cluster: Optional[str] = cluster_option(),
    **given,
) -> int:
    """Submit SCRIPT (or -m MODULE) as a multi-node job; prints the job id.

    Everything after SCRIPT (or -m MODULE) goes to it as typed, as with sbatch and torchrun;
    slurmtorch's options there get a warning (those that say what slurmtorch does, as
    --dry-run, are refused), unless a -- follows SCRIPT (MODULE).
    The ranks start in this folder (--sbatch-arg=--chdir=DIR for another), where relative
    paths (checkpoints, outputs/, wandb/) lead, and so do its restarts and requeues; each
    array task in trials/<its parameters>/ (trials/trial-K/) below it. Logs: the job folder.
    """
    typed = program_args(ctx, script_and_args)
    if as_json and not wait:
        raise SpecError("--json reports the end of --wait: add --wait",
                        tip=f"or {errors.typed('status JOBID --json')} for a job as it stands")
    if cluster:
        from slurmtorch.remote import forward  # lazy: only --cluster needs ssh's edge

        if forward.elsewhere(cluster):  # the code synced, the rest done there (no rendering here)
            return forward.submit(cluster, ctx.obj["argv"], typed, given["module"], snapshot)
    from slurmtorch.usecases import launch  # lazy: `slurmtorch --help` must not import yaml or jinja2

    script, args = split_script(typed, given["module"])
    where = launch.site_for("sbatch", site)
    job = launch.dry_run(where, options(
        ctx.params, VERB_ONLY, kind="sbatch", script=script, script_args=args, python=sys.executable,
        command=provenance(ctx, "sbatch", len(typed))),
        lambda: _tree(script, given["module"], snapshot))
    if dry_run:
        sys.stdout.write(job.text)
        return 0
    # The id is printed inside submit's shelter from TERM/HUP/INT: a job released is announced.
    sub = launch.submit(job, announce=_said if as_json else _quiet if parsable else _announce)
    if not wait:
        return 0
    ended = launch.follow(sub, job, cancel_on_interrupt, logs=not as_json)
    for line in ended.lines:
        print(line, file=sys.stderr)
    if as_json:
        from slurmtorch.usecases import records, status  # lazy: only --json

        data = (records.ended(ended.report) if ended.report is not None
                else records.array(sub.job_id, job.root, ended.code, status.trials(sub.job_id, job.root)))
        print(json.dumps(data, indent=1))
    return ended.code


# The verb's own parameters, not `Options` fields.
VERB_ONLY = ("script_and_args", "site", "dry_run", "wait", "cancel_on_interrupt", "parsable", "as_json", "snapshot",
             "cluster")


def _tree(script, module, flag):
    """The snapshot to take, or None (in place): of the code a laptop synced with this request
    (`--cluster` on its side), else of the script's tree here."""
    from slurmtorch import protocol
    from slurmtorch.submit.jobfolder import snapshot as snapshots

    if not snapshots.wanted(flag, os.environ):
        return None
    if os.environ.get(protocol.SYNCED):
        with open(os.environ[protocol.SYNCED], encoding="utf-8", errors="surrogateescape") as f:
            return snapshots.from_sync(json.load(f), script, os.getcwd())
    return snapshots.locate(script, module, os.getcwd())


def _announce(sub) -> None:
    print(sub.job_id, flush=True)
    print(f"submitted job {sub.job_id}; folder {sub.job_dir}", file=sys.stderr, flush=True)


def _said(sub) -> None:
    """--json: stdout holds the job's end alone; the id on stderr."""
    print(f"submitted job {sub.job_id}; folder {sub.job_dir}", file=sys.stderr, flush=True)


def _quiet(sub) -> None:
    print(sub.job_id, flush=True)
