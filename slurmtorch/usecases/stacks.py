"""`stacks`: where every rank of a running job (or a local run) stands, asked of the ranks.

Whose stacks (`target`: a Slurm job's or a local run's folder, checked before anything is
read, written or signalled, and how to signal its ranks), then `report`: the ranks asked,
grouped by stack (the odd ones out first), each group's native frames where py-spy gave them,
torch's NCCL flight recorder where it dumped. The front end's `say` prints each line as it
comes (the summary before the native frames, which take seconds).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurmtorch import protocol
from slurmtorch.errors import SubmitError
from slurmtorch.submit.edge import scancel, srun
from slurmtorch.submit.follow import stackrequest
from slurmtorch.submit.jobfolder.terminaltext import visible
from slurmtorch.submit.jobfolder import flightdump, jobdir, localrun
from slurmtorch.submit.jobfolder.stacks import detail_lines, native_notes, summary_lines
from slurmtorch.usecases import records

WAIT_S = stackrequest.WAIT_S  # how long a live rank gets to answer
NATIVE_WAIT_S = stackrequest.NATIVE_WAIT_S  # how long py-spy gets for the native frames


def record(target: StacksTarget, all_threads: bool, wait_s: float, native_wait_s: float) -> tuple[int, dict]:
    """`stacks --json`: the same asking and the same lines as `report`, as one JSON-ready object
    (docs/json.md), and the exit code."""
    folder, ranks = target.folder, target.ranks
    got, silent = stackrequest.ask(folder, ranks, target.send, wait_s, native=native_wait_s > 0, resend=target.resend)
    native, late = stackrequest.natives(folder, sorted(got), native_wait_s) if got and native_wait_s > 0 else ({}, [])
    flight = flightdump.summary_lines(flightdump.load_folder(folder), ranks)
    notes = native_notes(native, late, native_wait_s)
    return (0 if got else 1, records.stacks(folder, ranks, got, silent, summary_lines(got, silent),
                                            detail_lines(got, all_threads, native), flight, notes))


def report(target: StacksTarget, all_threads: bool, wait_s: float, native_wait_s: float,
           say: Callable[[str, bool], None]) -> int:
    """The ranks asked and their stacks said (`say(line, on_stderr)`), each line made
    `visible` (the ranks' own words); exit 0 where any rank answered, else 1."""
    folder, ranks = target.folder, target.ranks
    got, silent = stackrequest.ask(folder, ranks, target.send, wait_s, native=native_wait_s > 0, resend=target.resend)
    for line in summary_lines(got, silent):
        say(visible(line), False)
    native, late = stackrequest.natives(folder, sorted(got), native_wait_s) if got and native_wait_s > 0 else ({}, [])
    details = detail_lines(got, all_threads, native)
    flight = flightdump.summary_lines(flightdump.load_folder(folder), ranks)
    for block in (details, flight):
        if block:
            say("", False)
            for line in block:
                say(visible(line), False)
    for line in native_notes(native, late, native_wait_s):
        say(visible(line), True)
    say(f"(the ranks' own files: {folder / protocol.STACKS})", True)
    return 0 if got else 1


@dataclass(frozen=True)
class StacksTarget:
    """Whose stacks: the folder the ranks answer in, their count, how to ask them, and how
    to ask again by pid those the first signal missed (None: a local run's signal reaches all)."""

    folder: Path
    ranks: int
    send: Callable[[], None]
    resend: Callable[[dict[str, list[int]]], None] | None


def target(job_id: str | None) -> StacksTarget:
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
