"""`slurmtorch status|logs|cancel|stacks|top`: follow jobs without an accounting DB."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import IO, List, Optional, cast

import typer

from slurmtorch import protocol
from slurmtorch.cli._common import cluster_option, on_cluster
from slurmtorch.errors import SubmitError, typed
from slurmtorch.submit.follow import live, stackrequest, waiting
from slurmtorch.submit.follow.jobstatus import JobStatus, clock
from slurmtorch.submit.follow.tail import Prefixed, Tail, last_lines_offset
from slurmtorch.submit.follow.terminaltext import visible
from slurmtorch.submit.jobfolder import flightdump, jobdir
from slurmtorch.usecases import control
from slurmtorch.submit.jobfolder.report import exit_code, failure_lines
from slurmtorch.usecases import records, story
from slurmtorch.submit.jobfolder.stacks import detail_lines, native_notes, summary_lines


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
    root = jobdir.checked(jobdir.jobs_root())
    if not job_ids:
        return _table(root, as_json, states, name)
    # a job no one knows, or whose folder cannot be read: its error line, and exit 1
    known, unknown = control.statuses(job_ids, root)
    records: list[dict] = []
    shown: set[str] = set()  # the chains shown so far, by their first part's job id
    broken = 0
    for j in job_ids:
        folder = jobdir.job_dir(j, root)
        if j in unknown:
            print(unknown[j].render(), file=sys.stderr)
            continue
        try:
            if j in known and _show_chain(folder, shown, records if as_json else None, known[j]):
                continue
        except SubmitError as exc:  # a chain record that cannot be read: its line, and the job alone
            print(exc.render(), file=sys.stderr)
            broken += 1
        if j not in known:  # an array job: one line per trial
            for t in control.trials(j, root):
                trial = jobdir.trial_dir(j, t.trial, root)
                if as_json:
                    records.append(_record(t.status, trial, trial=t.trial, params=t.params))
                    continue
                print(t.line())
                if t.status.done:
                    for line in failure_lines(trial):
                        print(f"  {line}")
        elif as_json:
            records.append(_record(known[j], folder))
        else:
            _print_job(known[j], folder)
    if as_json:
        print(json.dumps(records, indent=1))
    return 1 if unknown or broken else 0


def _show_chain(folder: Path, shown: set[str], records: list | None, st: JobStatus) -> bool:
    """A part of a chain: the chain shown as one (once however many of its parts are asked
    for), or with `records` (--json) the part's record with the chain's in it. False for a
    job that is no part of a chain; SubmitError for a chain record that cannot be read."""
    from slurmtorch.submit import chain as core  # lazy: a plain job's status never reads a chain

    if not (folder / core.RECORD).exists():
        return False
    from slurmtorch.usecases import chain as chains  # lazy: rendering's modules, for a chain's part only

    chain = chains.chain_of(jobdir.checked(folder))
    if chain is None:
        return False
    if records is None and chain.job_ids[0] in shown:
        return True
    shown.add(chain.job_ids[0])
    standing = chains.standing(chain)
    if records is None:
        for line in standing.lines:
            print(visible(line))
        return True
    parts = [{"name": e.name, "job_id": e.job_id, "after": p.after, "state": now.state,
              "exit_code": e.code if e.done else None, "started": e.started}
             for e, p, now in zip(standing.ends, chain.parts, standing.statuses)]
    records.append(_record(st, folder, chain={"parts": parts, "failed": standing.failed}))
    return True


def _print_job(st: JobStatus, folder) -> None:
    for line in story.report(st.job_id, folder, st).status_lines():
        print(visible(line))


def _record(st: JobStatus, folder, **more) -> dict:
    """A job's status as JSON-ready data (`status --json`, docs/json.md)."""
    return records.status(story.report(st.job_id, folder, st), _name(st, folder), **more)


def _table(root, as_json: bool, states: list[str], name: str | None) -> int:
    """This user's slurmtorch jobs (those with a folder here), newest first: name, state,
    how long it ran (every start), how often it started again, its nodes, and for an ended
    one its exit code (and failing rank)."""
    rows = control.recent_jobs(root, lambda line: print(line, file=sys.stderr))
    wanted = {s.upper() for s in states}
    rows = [(st, folder) for st, folder in rows
            if (not wanted or st.state.split()[0] in wanted) and (name is None or name in _name(st, folder))]
    if as_json:
        print(json.dumps([_record(st, folder) for st, folder in rows], indent=1))
        return 0
    if not rows:
        print(f"no slurmtorch jobs{' like that' if wanted or name else ''} in {root}", file=sys.stderr)
        return 0
    print(f"{'JOBID':<12} {'NAME':<16} {'STATE':<12} {'ELAPSED':>10} {'EXIT':>4} {'RESTARTS':>8}  "
          f"{'NODES / REASON / FAILED RANK'}")
    now = time.time()
    for st, folder in rows:
        ran, nodes, restarts, cleaned = story.row(st, folder, now)
        code, where = "", nodes if st.state == "RUNNING" or not st.why else f"({st.why})"
        if st.done and st.exit_code is not None:
            exit_at, rank, _ = exit_code(folder, st)
            code = str(exit_at)
            if rank is not None:  # what failed says more than Slurm's reason (NonZeroExitCode)
                where = f"rank {rank.rank} on {rank.host}"
        where = cleaned or where
        print(visible(f"{st.job_id:<12} {_name(st, folder)[:16] or '-':<16} {st.state:<12} "
                      f"{clock(ran) if ran is not None else '-':>10} {code:>4} {restarts:>8}  {where}"))
    return 0


def _name(st: JobStatus, folder) -> str:
    return st.name or jobdir.read_job_name(folder) or story.of(folder).name


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
            view = control.live_view(job_id)
            lines = [f"job {view.job_id} {view.status.describe()}", *_live_lines(view)]
            if as_json:
                rep = story.report(view.job_id, view.folder, view.status)
                print(json.dumps(records.top(view.job_id, view.status, view.samples, lines, rep), indent=1))
                return 0
            if clear:
                print("\033[H\033[J", end="")
            print(visible("\n".join(lines)), flush=True)  # host names are the ranks' own words
            for note in view.notes:
                print(visible(note), file=sys.stderr)
            if once or view.status.done:
                return 0
            time.sleep(every)
            if not clear:
                print()
    except KeyboardInterrupt:
        return 0


def _live_lines(view: control.LiveView) -> list[str]:
    if view.status.done:
        return story.ended_live_lines(list(view.starts), view.story.spans(time.time()), time.time())
    if not view.samples:
        return ["no rank has sampled itself yet" if view.status.state == "RUNNING" else "no rank running yet"]
    return live.top_lines(view.samples, time.time())


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
    job_id, folder, logs = control.logs_target(job_id, rank, node, trial, batch)
    paths: list[tuple[Path, IO[str]]] = [(path, sys.stdout if kind == "out" else sys.stderr) for path, kind in logs]
    if all_ranks:
        paths = [(path, cast(IO[str], Prefixed(stream, mark)))  # write/flush/isatty, as a stream
                 for mark, out, err in control.all_rank_logs(folder) for path, stream in ((out, sys.stdout),
                                                                                         (err, sys.stderr))]
    if follow:  # ends as --wait does: the end line, and for a failure the report
        from slurmtorch.usecases import launch  # lazy: its render and sites would cost every other verb here

        end = launch.ended(job_id, folder, waiting.follow(job_id, [] if as_json else paths,
                                                          cancel_on_interrupt=cancel_on_interrupt, last=last))
        for line in end.lines:
            print(line, file=sys.stderr)
        if as_json:
            print(json.dumps(records.logs(end.report, logs), indent=1))
        return end.code
    if as_json:
        st = control.job_status(job_id)
        print(json.dumps(records.logs(story.report(job_id, folder, st), logs), indent=1))
        return 0
    if not any(p.exists() for p, _ in paths):
        raise SubmitError(
            f"no output yet for {'the batch step' if batch else paths[0][0].stem.replace('-', ' ')} "
            f"of job {job_id} in {folder}",
            tip=f"is it still pending? {typed(f'status {job_id}')}",
        )
    for p, stream in paths:
        tail = Tail(p, stream)
        tail.live = False  # the whole log at once: each line in its final state
        if last is not None:
            tail.offset = last_lines_offset(p, last)
        tail.pump()
        tail.finish()
    for line in failure_lines(folder):
        print(f"slurmtorch: {line}", file=sys.stderr)
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
    failed = 0
    for j in job_ids:
        try:
            before = control.cancel(j)
        except SubmitError as exc:
            print(exc.render(), file=sys.stderr)
            failed += 1
            continue
        print(f"job {j} cancelled (it was {before.state.lower()})", file=sys.stderr)
    return 1 if failed else 0


def stacks(
    ctx: typer.Context,
    job_id: Optional[str] = typer.Argument(None, metavar="[JOBID]", show_default=False,
                                           help="a running job (JOBID_K: a trial), or a local run (local-N); "
                                                "default: the one local run running"),
    all_threads: bool = typer.Option(False, "--all-threads", help="every thread's stack, not only the main one's"),
    wait_s: float = typer.Option(stackrequest.WAIT_S, "--wait-s", help="how long a live rank gets to answer"),
    native_wait_s: float = typer.Option(stackrequest.NATIVE_WAIT_S, "--native-wait-s",
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
    target = control.stacks_target(job_id)
    folder, ranks = target.folder, target.ranks
    got, silent = stackrequest.ask(folder, ranks, target.send, wait_s, native=native_wait_s > 0, resend=target.resend)
    summary = summary_lines(got, silent)
    for line in summary if not as_json else ():
        print(visible(line), flush=True)  # before the native frames, which take seconds
    native, late = stackrequest.natives(folder, sorted(got), native_wait_s) if got and native_wait_s > 0 else ({}, [])
    details = detail_lines(got, all_threads, native)
    if as_json:
        flight = flightdump.summary_lines(flightdump.load_folder(folder), ranks)
        notes = native_notes(native, late, native_wait_s)
        print(json.dumps(records.stacks(folder, ranks, got, silent, summary, details, flight, notes), indent=1))
        return 0 if got else 1
    if details:
        print()
        for line in details:
            print(visible(line))
    flight = flightdump.summary_lines(flightdump.load_folder(folder), ranks)
    if flight:
        print()
        for line in flight:
            print(visible(line))
    for line in native_notes(native, late, native_wait_s):
        print(visible(line), file=sys.stderr)
    print(f"(the ranks' own files: {folder / protocol.STACKS})", file=sys.stderr)
    return 0 if got else 1
