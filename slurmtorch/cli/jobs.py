"""`slurmtorch status|logs|cancel|stacks`: follow jobs without an accounting DB."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from typing import List, Optional

import typer

from slurmtorch import protocol
from slurmtorch.cli._common import cluster_option, on_cluster
from slurmtorch.errors import SubmitError
from slurmtorch.submit import scheduler
from slurmtorch.submit.follow import stackrequest, waiting
from slurmtorch.submit.follow.jobstatus import JobStatus
from slurmtorch.submit.follow.tail import Tail, visible
from slurmtorch.submit.jobfolder import codecopy, flightdump, jobdir, localrun, snapshot
from slurmtorch.submit.jobfolder.report import exit_code, failure_lines, restart_lines
from slurmtorch.submit.jobfolder.stacks import detail_lines, native_notes, summary_lines

# `status` without ids: the jobs the controller still knows, then this many more from folders.
RECENT = 10


def status(
    ctx: typer.Context,
    job_ids: Optional[List[str]] = typer.Argument(None, metavar="[JOBID]...", show_default=False,
                                                  help="jobs to show (default: your slurmtorch jobs)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per job, in a list"),
    cluster: Optional[str] = cluster_option(),
) -> int:
    """Show jobs' states: the given ones, else your slurmtorch jobs as a table.

    One squeue call for all of them; an ended job's exit code comes from its folder.
    """
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    root = jobdir.jobs_root()
    if not job_ids:
        return _table(root, as_json)
    for j in job_ids:
        jobdir.check_job_id(j)
    unknown: dict = {}  # a job no one knows, or whose folder cannot be read: its error line, and exit 1
    singles = []
    for j in job_ids:
        try:
            if jobdir.read_trials(jobdir.job_dir(j, root)) is None:
                singles.append(j)
        except SubmitError as exc:
            unknown[j] = exc
    known = scheduler.statuses(singles, root, unknown=unknown)
    records = []
    for j in job_ids:
        folder = jobdir.job_dir(j, root)
        if j in unknown:
            print(unknown[j].render(), file=sys.stderr)
            continue
        if j not in known:  # an array job: one line per trial
            for t in scheduler.array_status(j, root):
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
    return 1 if unknown else 0


def _print_job(st: JobStatus, folder) -> None:
    code, rank, job = exit_code(folder, st) if st.done else (None, None, None)
    extra = (f"step_exit_code={job}",) if rank is not None and job != code else ()
    shown = st if code is None else replace(st, exit_code=code)
    print(f"{shown.line(extra)} {snapshot.summary(codecopy.read_record(folder))}")
    for line in restart_lines(folder):
        print(line)
    if st.done:
        for line in failure_lines(folder):
            print(line)


def _record(st: JobStatus, folder, **more) -> dict:
    """A job's status as JSON-ready data (`status --json`)."""
    code, rank, job = exit_code(folder, st) if st.done else (None, None, None)
    record = {"job_id": st.job_id, "state": st.state, "exit_code": code, "step_exit_code": job,
              "failed_rank": rank.rank if rank is not None else None, "reason": st.why, "nodes": st.nodes,
              "submitted": st.submitted, "started": st.started, "source": st.source, "folder": str(folder),
              "failures": failure_lines(folder) if st.done else [], "code": _code(folder)}
    record.update(more)
    return record


def _code(folder) -> dict | None:
    """What the job ran: its snapshot (tree, commit, dirty, counts; not the file list), None: in place."""
    record = codecopy.read_record(folder)
    return None if record is None else {k: v for k, v in record.items() if k != "manifest"}


def _table(root, as_json: bool) -> int:
    """This user's slurmtorch jobs (those with a folder here): the ones the controller knows,
    newest first, then the RECENT newest of the rest, from their folders."""
    folders = {p.name: p for p in root.glob("*") if p.name.isdigit()} if root.is_dir() else {}
    queued = {j: st for j, st in scheduler.my_jobs().items() if j.partition("_")[0] in folders}
    others = sorted((j for j in folders if not any(q.partition("_")[0] == j for q in queued)), key=int)[-RECENT:]
    rows = []
    for j in sorted(queued, key=lambda j: tuple(int(x) for x in j.split("_")), reverse=True):
        st, folder = queued[j], scheduler.job_folder(j, root)
        rows.append((replace(st, exit_code=jobdir.read_exit_code(folder)) if st.done else st, folder))
    for j in reversed(others):
        folder = folders[j]
        try:
            if jobdir.read_trials(_readable(folder)) is not None:
                continue  # an ended array: `status JOBID` lists its trials
            rows.append((scheduler.status_of(j, None, folder), folder))
        except SubmitError as exc:  # one broken folder must not hide the others
            print(f"note: skipped job {j}: {exc.message}", file=sys.stderr)
    if as_json:
        print(json.dumps([_record(st, folder) for st, folder in rows], indent=1))
        return 0
    if not rows:
        print(f"no slurmtorch jobs in {root}", file=sys.stderr)
        return 0
    print(f"{'JOBID':<12} {'STATE':<12} {'EXIT':>4}  {'NODES / REASON'}")
    for st, folder in rows:
        code = "" if not st.done or st.exit_code is None else str(exit_code(folder, st)[0])
        where = st.nodes if st.state == "RUNNING" or not st.why else f"({st.why})"
        print(visible(f"{st.job_id:<12} {st.state:<12} {code:>4}  {where}"))
    return 0


def _readable(folder):
    """`folder` if it is one; else SubmitError saying what it is instead."""
    if folder.is_dir():
        return folder
    raise SubmitError(f"{folder} is a link to nothing" if folder.is_symlink() and not folder.exists()
                      else f"{folder} is not a folder")


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
    cancel_on_interrupt: bool = typer.Option(False, "--cancel-on-interrupt",
                                             help="with --follow: Ctrl-C cancels the job (default: it runs on)"),
    cluster: Optional[str] = cluster_option(),
) -> int:
    """Print a rank's stdout (to stdout) and stderr (to stderr) from the job folder.

    torchrun writes one log per node (every rank on it), not per rank: --node N.
    """
    remote = on_cluster(ctx, cluster)
    if remote is not None:
        return remote
    folder = jobdir.job_dir(job_id)
    if not folder.is_dir():
        raise SubmitError(f"no job folder {folder}", tip="was the job submitted by slurmtorch with this SLURMTORCH_HOME?")
    record = jobdir.read_trials(folder)
    if record is not None:
        ids = sorted(int(t) for t in record["trials"])
        if trial is None:
            raise SubmitError(f"job {job_id} is an array of {len(ids)} trials: say which",
                              tip=f"slurmtorch logs {job_id} --trial {ids[0]} [--rank R]")
        if trial not in ids:
            raise SubmitError(f"job {job_id} has no trial {trial}", tip=f"trials: {', '.join(map(str, ids))}")
        folder = jobdir.trial_dir(job_id, trial)
        job_id = f"{job_id}_{trial}"
    elif trial is not None:
        raise SubmitError(f"job {job_id} is not an array job; --trial does not apply")
    if batch:
        paths = [(folder / jobdir.BATCH_OUT, sys.stdout)]
    else:
        out, err = jobdir.rank_log_paths(folder, rank, node)
        paths = [(out, sys.stdout), (err, sys.stderr)]
    if follow:
        st = waiting.follow(job_id, paths, cancel_on_interrupt=cancel_on_interrupt)
        return exit_code(folder, st)[0]
    if not any(p.exists() for p, _ in paths):
        raise SubmitError(
            f"no output yet for {'the batch step' if batch else paths[0][0].stem.replace('-', ' ')} "
            f"of job {job_id} in {folder}",
            tip=f"is it still pending? slurmtorch status {job_id}",
        )
    for p, stream in paths:
        Tail(p, stream).pump()
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
            before = scheduler.cancel(j)
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
    folder, ranks, send, resend = _stacks_target(job_id)
    got, silent = stackrequest.ask(folder, ranks, send, wait_s, native=native_wait_s > 0, resend=resend)
    for line in summary_lines(got, silent):
        print(visible(line), flush=True)  # before the native frames, which take seconds
    native, late = stackrequest.natives(folder, sorted(got), native_wait_s) if got and native_wait_s > 0 else ({}, [])
    details = detail_lines(got, all_threads, native)
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


def _stacks_target(job_id: str | None):
    """(the folder, its rank count, how to ask its ranks, how to ask again those the first
    signal missed) for a Slurm job or a local run."""
    if job_id is None or localrun.is_local_id(job_id):
        folder = localrun.only_live_run() if job_id is None else localrun.run_dir(job_id)
        job = jobdir.read_job(folder)
        if not job:
            raise SubmitError(f"no local run {job_id} (no {folder / protocol.JOB})",
                              tip="its id is the one slurmtorch mpirun printed; the newest "
                                  f"{localrun.KEEP} ended runs are kept")
        name = localrun.run_id(folder)
        if (folder / protocol.EXIT_CODE).exists():
            raise SubmitError(f"local run {name} has ended (exit {jobdir.read_exit_code(folder)}); no rank to ask")
        ranks = int(job["ntasks"])
        return folder, ranks, lambda: stackrequest.signal_here(folder, ranks, os.uname().nodename), None
    base, _, trial = job_id.partition("_")
    jobdir.check_job_id(base)
    folder = jobdir.trial_dir(base, int(trial)) if trial.isdigit() else jobdir.job_dir(job_id)
    job = jobdir.read_job(folder)
    if not folder.is_dir() or not job:
        raise SubmitError(f"no job folder with a job.json at {folder}",
                          tip="was the job submitted by slurmtorch (0.x or later) with this SLURMTORCH_HOME?")
    return (folder, int(job["ntasks"]), lambda: scheduler.signal_stacks(job_id, job.get("launcher") == "mpirun"),
            lambda pids: scheduler.signal_pids(job_id, pids))
