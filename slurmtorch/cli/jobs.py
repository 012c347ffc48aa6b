"""`slurmtorch status|logs|cancel|stacks|top`: follow jobs without an accounting DB."""

from __future__ import annotations

import json
import sys
import time
from typing import List, Optional

import typer

from slurmtorch.cli._common import cluster_option, on_cluster
from slurmtorch.errors import SubmitError
from slurmtorch.submit.jobfolder.terminaltext import visible
from slurmtorch.usecases import cancel as cancelling
from slurmtorch.usecases import logs as logging
from slurmtorch.usecases import stacks as asking
from slurmtorch.usecases import status as statuses
from slurmtorch.usecases import top as watching


def status(
    ctx: typer.Context,
    job_ids: Optional[List[str]] = typer.Argument(None, metavar="[JOBID]...", show_default=False,
                                                  help="jobs to show (default: your slurmtorch jobs)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per job, in a list (docs/json.md)"),
    states: List[str] = typer.Option([], "--state", "-t", help="without JOBIDs: only jobs in this state "
                                     "(RUNNING, PENDING, FAILED, COMPLETED, ...; repeatable)"),
    name: Optional[str] = typer.Option(None, "--name", "-n", help="without JOBIDs: only jobs whose name holds this"),
    cluster: Optional[str] = cluster_option(),
) -> int:
    """Show jobs' states: the given ones, else your slurmtorch jobs as a table.

    One squeue call for all of them; an ended job's exit code comes from its folder. A part
    of a chain (`slurmtorch chain`) shows the whole chain: each part's state, where it
    failed and the parts that failure cancelled.
    """
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    said = statuses.show(job_ids, as_json) if job_ids else statuses.table(states, name, as_json)
    for line in said.err:
        print(line, file=sys.stderr)
    for line in said.out:
        print(line)
    if as_json:
        print(json.dumps(said.records, indent=1))
    return said.code


def top(
    ctx: typer.Context,
    job_id: str = typer.Argument(..., metavar="JOBID", show_default=False, help="the job (JOBID_K: a trial)"),
    once: bool = typer.Option(False, "--once", help="print the table once and exit"),
    as_json: bool = typer.Option(False, "--json", help="the ranks and the table once, as one JSON object "
                                                      "(docs/json.md)"),
    every: float = typer.Option(5.0, "--every", min=0.5, help="seconds between tables"),
    cluster: Optional[str] = cluster_option(),
) -> int:
    """Show each rank of a job as it runs, the slowest first: step time, time outside
    backward (OWN: what a slow rank makes its peers wait for), CPU, memory, and where NVML
    is, the GPU's use, memory, power, clock and throttling.

    The ranks sample themselves every SLURMTORCH_LIVE_S seconds (10 by default; set it
    before submitting, 0 for none); nothing in the script changes. Ends with the job, with
    its end line (mean step, slowest rank, node-hours); Ctrl-C stops watching.
    """
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    clear = sys.stdout.isatty() and not once and not as_json
    try:
        while True:
            view = watching.live_view(job_id)
            if as_json:
                print(json.dumps(view.record(), indent=1))
                return 0
            if clear:
                print("\033[H\033[J", end="")
            print(visible("\n".join(view.lines())), flush=True)  # host names are the ranks' own words
            for note in view.notes:
                print(visible(note), file=sys.stderr)
            if once or view.status.done:
                return 0
            time.sleep(every)
            if not clear:
                print()
    except KeyboardInterrupt:
        return 0


def logs(
    ctx: typer.Context,
    job_id: str = typer.Argument(..., metavar="JOBID", show_default=False, help="the job"),
    rank: Optional[int] = typer.Option(None, "--rank", "-r", help="which rank's output (default 0)"),
    node: Optional[int] = typer.Option(None, "--node", help="torchrun jobs: which node's output (one file per "
                                                            "node, all its ranks; default 0)"),
    trial: Optional[int] = typer.Option(None, "--trial", "-k", help="which trial (array task) of an array job"),
    batch: bool = typer.Option(False, "--batch", help="the batch script's own output instead"),
    follow: bool = typer.Option(False, "--follow", "-f", help="keep printing until the job ends, then exit "
                                                              "with its exit code"),
    last: Optional[int] = typer.Option(None, "--tail", "-n", min=0, help="only each log's last N lines (with "
                                                                          "--follow: then what follows)"),
    all_ranks: bool = typer.Option(False, "--all-ranks", "-a", help="every rank's output (torchrun: every node's), "
                                                                    "each line marked [rank R]"),
    cancel_on_interrupt: bool = typer.Option(False, "--cancel-on-interrupt",
                                             help="with --follow: Ctrl-C cancels the job (default: it runs on)"),
    as_json: bool = typer.Option(False, "--json", help="the logs' paths and the job's report as one JSON object, "
                                                      "not the logs' text (with --follow: at its end; docs/json.md)"),
    cluster: Optional[str] = cluster_option(),
) -> int:
    """Print a rank's stdout (to stdout) and stderr (to stderr) from the job folder.

    torchrun writes one log per node (every rank on it), not per rank: --node N.
    """
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    if all_ranks and (rank is not None or node is not None or batch):
        raise SubmitError("--all-ranks shows every rank's output: leave out --rank, --node and --batch")
    job_id, folder, logs = logging.target(job_id, rank, node, trial, batch)
    paths = logging.streams(folder, logs, all_ranks, sys.stdout, sys.stderr)
    if follow:  # ends as --wait does: the end line, and for a failure the report
        end = logging.follow(job_id, folder, [] if as_json else paths, cancel_on_interrupt, last)
        for line in end.lines:
            print(line, file=sys.stderr)
        if as_json:
            print(json.dumps(logging.record(job_id, folder, logs, end.report), indent=1))
        return end.code
    if as_json:
        print(json.dumps(logging.record(job_id, folder, logs), indent=1))
        return 0
    for line in logging.show(job_id, folder, paths, batch, last):
        print(line, file=sys.stderr)
    return 0


def cancel(ctx: typer.Context,
           job_ids: List[str] = typer.Argument(..., metavar="JOBID...", show_default=False, help="jobs to cancel"),
           cluster: Optional[str] = cluster_option()) -> int:
    """Cancel jobs of yours that are queued or running (scancel).

    An unknown job, someone else's, or one that has already ended is an error.
    """
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    lines, code = cancelling.cancel(job_ids)
    for line in lines:
        print(line, file=sys.stderr)
    return code


def stacks(
    ctx: typer.Context,
    job_id: Optional[str] = typer.Argument(None, metavar="[JOBID]", show_default=False,
                                           help="a running job (JOBID_K: a trial), or a local run (local-N); "
                                                "default: the one local run running"),
    all_threads: bool = typer.Option(False, "--all-threads", help="every thread's stack, not only the main one's"),
    wait_s: float = typer.Option(asking.WAIT_S, "--wait-s", help="how long a live rank gets to answer"),
    native_wait_s: float = typer.Option(asking.NATIVE_WAIT_S, "--native-wait-s",
                                        help="how long py-spy gets for the native frames (0: none)"),
    as_json: bool = typer.Option(False, "--json", help="the same as one JSON object (docs/json.md)"),
    cluster: Optional[str] = cluster_option(),
) -> int:
    """Print where every rank of a running job stands: ranks on the same stack together, the
    odd ones out first, then each group's stack (and torch's NCCL flight recorder, if it dumped).

    Each rank writes its threads' Python stacks to the job folder's stacks/ on a signal
    (scancel --signal=28, SIGWINCH), without a debugger; a rank whose process is gone is named
    dead. Where py-spy is installed beside the ranks' python, each group's stack shows its
    native frames too (the C++ a collective waits in, e.g. c10d::Work::wait). A local run
    (slurmtorch mpirun) is local-N, as it said when it started; no id: the one running.
    """
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    if as_json:
        code, data = asking.record(asking.target(job_id), all_threads, wait_s, native_wait_s)
        print(json.dumps(data, indent=1))
        return code
    return asking.report(asking.target(job_id), all_threads, wait_s, native_wait_s, _say)


def _say(line: str, on_stderr: bool) -> None:
    print(line, file=sys.stderr if on_stderr else sys.stdout, flush=True)
