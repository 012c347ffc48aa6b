"""Jobs already started: which are there and how they stand, whose logs to show, cancelling
them, and asking a running job's (or a local run's) ranks where they stand.

The CLI's `status`, `logs`, `cancel`, `stacks` and `top` call these and print what comes back.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from slurmtorch import protocol, readback
from slurmtorch.errors import SubmitError, typed
from slurmtorch.submit.edge import queries, scancel, srun
from slurmtorch.rankfiles import LiveSample
from slurmtorch.submit.follow import live, stackrequest
from slurmtorch.submit.follow.jobstatus import JobStatus, TrialStatus
from slurmtorch.submit.jobfolder import jobdir, localrun
from slurmtorch.submit.jobfolder.story import Story, cleaned_line
from slurmtorch.usecases import story

# `status` without ids: the jobs the controller still knows, then this many more from folders.
RECENT = 10


def statuses(job_ids: list[str], root: Path) -> tuple[dict[str, JobStatus], dict[str, SubmitError]]:
    """Each single job's status, with one squeue call; a job no one knows, or whose folder
    cannot be read, is left out with its error. An array job is in neither: see `trials`."""
    for j in job_ids:
        jobdir.check_job_id(j)
    unknown: dict = {}
    singles = []
    for j in job_ids:
        try:
            if jobdir.read_trials(jobdir.checked(jobdir.job_dir(j, root))) is None:
                singles.append(j)
        except SubmitError as exc:
            unknown[j] = exc
    return queries.statuses(singles, root, unknown=unknown), unknown


def job_status(job_id: str) -> JobStatus:
    """A job's (or trial's, `JOBID_K`) status: one squeue call, else its folder and record."""
    return queries.job_status(job_id, jobdir.jobs_root())


def trials(job_id: str, root: Path) -> list[TrialStatus]:
    """Every trial (array task) of an array job, with one squeue call."""
    return queries.array_status(job_id, root)


def recent_jobs(root: Path, note: Callable[[str], None]) -> list[tuple[JobStatus, Path]]:
    """This user's slurmtorch jobs (those with a folder here): the ones the controller knows,
    newest first, then the RECENT newest of the rest, from their folders; each one skipped
    (a folder that fails its checks) is a `note`."""
    folders = {p.name: p for p in root.glob("*") if readback.numbered(p.name, "") is not None} if root.is_dir() else {}
    queued = {j: st for j, st in queries.my_jobs().items() if j.partition("_")[0] in folders}
    others = sorted((j for j in folders if not any(q.partition("_")[0] == j for q in queued)), key=int)[-RECENT:]
    rows = []
    for j in sorted(queued, key=lambda j: tuple(int(x) for x in j.split("_")), reverse=True):
        st, folder = queued[j], queries.job_folder(j, root)
        try:
            jobdir.checked(folder)
        except SubmitError as exc:
            note(f"note: skipped job {j}: {exc.message}")
            continue
        if st.done:
            st = replace(st, exit_code=jobdir.read_exit_code(folder))
            queries.settle(folder, st)
        rows.append((st, folder))
    for j in reversed(others):
        folder = folders[j]
        try:
            if jobdir.read_trials(_readable(jobdir.checked(folder))) is not None:
                continue  # an ended array: `status JOBID` lists its trials
            rows.append((queries.status_of(j, None, folder), folder))
        except SubmitError as exc:  # one broken folder must not hide the others
            note(f"note: skipped job {j}: {exc.message}")
    return rows


def not_cleaned(job_id: str, folder: Path) -> None:
    """SubmitError, in one line, where `slurmtorch clean` left only the job's record."""
    told = story.of(folder)
    if told.cleaned is not None:
        raise SubmitError(f"job {job_id}: {cleaned_line(told.cleaned)}", tip=f"{typed(f'status {job_id}')} tells "
                                                                              "how it ran, from its record")


def _readable(folder: Path) -> Path:
    """`folder` if it is one; else SubmitError saying what it is instead."""
    if folder.is_dir():
        return folder
    raise SubmitError(f"{folder} is a link to nothing" if folder.is_symlink() and not folder.exists()
                      else f"{folder} is not a folder")


def logs_target(job_id: str, rank: int | None, node: int | None, trial: int | None,
                batch: bool) -> tuple[str, Path, list[tuple[Path, str]]]:
    """Whose logs: (the job's or trial's id, its folder, each log with "out" or "err"): the
    batch script's batch.out, else the rank's (torchrun: the node's) stdout and stderr. An
    array job needs its trial, which must be one of its own."""
    folder = jobdir.checked(jobdir.job_dir(job_id))
    if not folder.is_dir():
        raise SubmitError(f"no job folder {folder}", tip="was the job submitted by slurmtorch with this SLURMTORCH_HOME?")
    not_cleaned(job_id, folder)
    record = jobdir.read_trials(folder)
    if record is not None:
        ids = sorted(int(t) for t in record["trials"])
        if trial is None:
            raise SubmitError(f"job {job_id} is an array of {len(ids)} trials: say which",
                              tip=typed(f"logs {job_id} --trial {ids[0]} [--rank R]"))
        if trial not in ids:
            raise SubmitError(f"job {job_id} has no trial {trial}", tip=f"trials: {', '.join(map(str, ids))}")
        folder = jobdir.checked(jobdir.trial_dir(job_id, trial))
        job_id = f"{job_id}_{trial}"
    elif trial is not None:
        raise SubmitError(f"job {job_id} is not an array job; --trial does not apply")
    if batch:
        return job_id, folder, [(folder / jobdir.BATCH_OUT, "out")]
    out, err = jobdir.rank_log_paths(folder, rank, node)
    return job_id, folder, [(out, "out"), (err, "err")]


@dataclass(frozen=True)
class LiveView:
    """A job's (or trial's) ranks as they last sampled themselves, and how the job stands;
    `notes`: the samples skipped, and why (live.read_samples)."""

    job_id: str
    folder: Path
    samples: dict[int, LiveSample]
    status: JobStatus
    notes: tuple[str, ...] = ()
    starts: tuple[dict[int, LiveSample], ...] = ()  # every start's samples (a requeue or restart: a new one)
    story: Story = Story()


def live_view(job_id: str) -> LiveView:
    """JOBID or JOBID_K (a trial): its folder checked as at submission (jobdir.checked), its
    ranks' latest samples (bootstrap.live) and its status (one squeue call)."""
    base, _, trial = job_id.partition("_")
    jobdir.check_job_id(base)
    if trial and not trial.isdigit():
        raise SubmitError(f"invalid trial in {job_id!r}", tip="JOBID_K, e.g. 1234_0")
    folder = jobdir.checked(jobdir.trial_dir(base, int(trial)) if trial else jobdir.job_dir(base))
    if not folder.is_dir():
        raise SubmitError(f"no job folder {folder}", tip="was the job submitted by slurmtorch with this SLURMTORCH_HOME?")
    not_cleaned(job_id, folder)
    if not trial and jobdir.read_trials(folder) is not None:
        raise SubmitError(f"job {job_id} is an array job: say which trial", tip=typed(f"top {job_id}_0"))
    status = queries.job_status(job_id, jobdir.jobs_root())
    notes: list[str] = []
    starts = live.read_starts(folder, notes.append)
    return LiveView(job_id, folder, starts[-1] if starts else {}, status, tuple(notes), tuple(starts), story.of(folder))


def all_rank_logs(folder: Path) -> list[tuple[str, Path, Path]]:
    """Every rank's (torchrun: every node's) stdout and stderr in a job or trial folder, in
    rank order, each with the mark its lines get (`[rank 3] `, `[node 1] `)."""
    job = jobdir.read_job(folder) or {}
    layout = jobdir.torchrun_layout(job)
    if layout is not None:
        return [(f"[node {n}] ", *jobdir.rank_log_paths(folder, None, n)) for n in range(layout[0])]
    found = {r for p in folder.glob("rank-*.out") if (r := readback.numbered(p.name, "rank-", ".out")) is not None}
    ranks = sorted(found | set(range(jobdir.job_number(job, "ntasks") or 0)))
    return [(f"[rank {r}] ", *jobdir.rank_log_paths(folder, r)) for r in ranks or [0]]


def cancel(job_id: str) -> JobStatus:
    """scancel a job of this user's that is still queued or running; its status before.
    An unknown job, someone else's, or one that has already ended is a SubmitError."""
    return scancel.cancel(job_id)


@dataclass(frozen=True)
class StacksTarget:
    """Whose stacks: the folder the ranks answer in, their count, how to ask them, and how
    to ask again by pid those the first signal missed (None: a local run's signal reaches all)."""

    folder: Path
    ranks: int
    send: Callable[[], None]
    resend: Callable[[dict[str, list[int]]], None] | None


def stacks_target(job_id: str | None) -> StacksTarget:
    """A Slurm job (JOBID, JOBID_K) or a local run (local-N; None: the one running): the folder
    and its stacks/ checked as at submission (jobdir.checked) before anything is read, written
    or signalled, and a Slurm job running now (squeue) before `stackrequest.ask` clears the
    earlier answers: a folder of no such job is refused with nothing touched."""
    if job_id is not None and not localrun.is_local_id(job_id):
        jobdir.check_job_id(job_id.partition("_")[0])  # a bad id is its own line, whatever the home
    jobdir.checked(jobdir.jobs_root().parent)  # before local/ and distributor/ are listed
    if job_id is None or localrun.is_local_id(job_id):
        folder = localrun.only_live_run() if job_id is None else localrun.run_dir(job_id)
        jobdir.checked(folder / protocol.STACKS)  # the request removes and makes files there
        job = jobdir.read_job(folder)
        if not job:
            raise SubmitError(f"no local run {job_id} (no {folder / protocol.JOB})",
                              tip="its id is the one slurmtorch mpirun printed; the newest "
                                  f"{localrun.KEEP} ended runs are kept")
        name = localrun.run_id(folder)
        if (folder / protocol.EXIT_CODE).exists():
            raise SubmitError(f"local run {name} has ended (exit {jobdir.read_exit_code(folder)}); no rank to ask")
        ranks = _ranks(job, folder)
        return StacksTarget(folder, ranks, lambda: stackrequest.signal_here(folder, ranks, os.uname().nodename), None)
    base, _, trial = job_id.partition("_")
    jobdir.check_job_id(base)
    folder = jobdir.trial_dir(base, int(trial)) if trial.isdigit() else jobdir.job_dir(job_id)
    jobdir.checked(folder / protocol.STACKS)
    job = jobdir.read_job(folder)
    if not folder.is_dir() or not job:
        raise SubmitError(f"no job folder with a job.json at {folder}",
                          tip="was the job submitted by slurmtorch (0.x or later) with this SLURMTORCH_HOME?")
    scancel.running_job(job_id)
    return StacksTarget(folder, _ranks(job, folder),
                        lambda: scancel.send_stacks_signal(job_id, job.get("launcher") == "mpirun"),
                        lambda pids: srun.signal_pids(job_id, pids))


def _ranks(job: dict, folder: Path) -> int:
    """How many ranks a job.json says the job has; SubmitError where it says no count."""
    ranks = jobdir.job_number(job, "ntasks")
    if not ranks:
        raise SubmitError(f"{folder / protocol.JOB} gives no number of ranks (ntasks)", tip="was it edited by hand?")
    return ranks
