"""`status`: how jobs stand, from one squeue call and their folders, as lines or records.

Jobs given by id: each job's line (its code's snapshot, restarts, an ended one's failure and
run), an array's one line per trial, a part of a chain the whole chain once; without ids this
user's jobs as a table, newest first. The front end prints what comes back (`Said`: stdout's
lines, stderr's lines, the records `--json` prints, the exit code).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from slurmtorch import readback
from slurmtorch.errors import SubmitError
from slurmtorch.submit.launch import chain as core
from slurmtorch.submit.edge import queries
from slurmtorch.submit.jobfolder.jobstatus import JobStatus, TrialStatus, clock
from slurmtorch.submit.jobfolder.terminaltext import visible
from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.submit.jobfolder.report import exit_code, failure_lines
from slurmtorch.usecases import records, story

# `status` without ids: the jobs the controller still knows, then this many more from folders.
RECENT = 10


@dataclass
class Said:
    """What `status` says: lines for stdout and for stderr, the records `--json` prints, the exit code."""

    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    code: int = 0


def show(job_ids: list[str], as_json: bool) -> Said:
    """The given jobs: a job no one knows, or whose folder cannot be read, is its error line
    and exit 1; a part of a chain shows the chain (once however many of its parts are asked)."""
    root = jobdir.checked(jobdir.jobs_root())
    known, unknown = statuses(job_ids, root)
    said = Said(code=1 if unknown else 0)
    shown: set[str] = set()  # the chains shown so far, by their first part's job id
    for j in job_ids:
        folder = jobdir.job_dir(j, root)
        if j in unknown:
            said.err.append(unknown[j].render())
            continue
        try:
            if j in known and _show_chain(folder, shown, said, as_json, known[j]):
                continue
        except SubmitError as exc:  # a chain record that cannot be read: its line, and the job alone
            said.err.append(exc.render())
            said.code = 1
        if j not in known:  # an array job: one line per trial
            for t in trials(j, root):
                trial = jobdir.trial_dir(j, t.trial, root)
                if as_json:
                    said.records.append(record(t.status, trial, trial=t.trial, params=t.params))
                    continue
                said.out.append(t.line())
                if t.status.done:
                    said.out += [f"  {line}" for line in failure_lines(trial)]
        elif as_json:
            said.records.append(record(known[j], folder))
        else:
            said.out += job_lines(known[j], folder)
    return said


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


def trials(job_id: str, root: Path) -> list[TrialStatus]:
    """Every trial (array task) of an array job, with one squeue call."""
    return queries.array_status(job_id, root)


def _show_chain(folder: Path, shown: set[str], said: Said, as_json: bool, st: JobStatus) -> bool:
    """A part of a chain: the chain shown as one, or (--json) the part's record with the
    chain's in it. False for a job that is no part of a chain; SubmitError for a chain
    record that cannot be read."""
    if not (folder / core.RECORD).exists():
        return False
    from slurmtorch.usecases import chain as chains  # lazy: rendering's modules, for a chain's part only

    chain = chains.chain_of(jobdir.checked(folder))
    if chain is None:
        return False
    if not as_json and chain.job_ids[0] in shown:
        return True
    shown.add(chain.job_ids[0])
    standing = chains.standing(chain)
    if not as_json:
        said.out += [visible(line) for line in standing.lines]
        return True
    parts = [{"name": e.name, "job_id": e.job_id, "after": p.after, "state": now.state,
              "exit_code": e.code if e.done else None, "started": e.started}
             for e, p, now in zip(standing.ends, chain.parts, standing.statuses)]
    said.records.append(record(st, folder, chain={"parts": parts, "failed": standing.failed}))
    return True


def job_lines(st: JobStatus, folder: Path) -> list[str]:
    """One job as `status JOBID` tells it, from its record (`story.report`): its line and
    code, its starts, requeues and restarts, and once ended its failure and its run's end line."""
    return [visible(line) for line in story.report(st.job_id, folder, st).status_lines()]


def record(st: JobStatus, folder: Path, **more) -> dict:
    """A job's status as JSON-ready data (`status --json`, docs/json.md)."""
    return records.status(story.report(st.job_id, folder, st), _name(st, folder), **more)


def table(states: list[str], name: str | None, as_json: bool) -> Said:
    """This user's slurmtorch jobs (those with a folder here), newest first: name, state,
    how long it ran (every start), how often it started again, its nodes, and for an ended
    one its exit code (and failing rank)."""
    root = jobdir.checked(jobdir.jobs_root())
    said = Said()
    rows = recent_jobs(root, said.err.append)
    wanted = {s.upper() for s in states}
    rows = [(st, folder) for st, folder in rows
            if (not wanted or st.state.split()[0] in wanted) and (name is None or name in _name(st, folder))]
    if as_json:
        said.records += [record(st, folder) for st, folder in rows]
        return said
    if not rows:
        said.err.append(f"no slurmtorch jobs{' like that' if wanted or name else ''} in {root}")
        return said
    said.out.append(f"{'JOBID':<12} {'NAME':<16} {'STATE':<12} {'ELAPSED':>10} {'EXIT':>4} {'RESTARTS':>8}  "
                    "NODES / REASON / FAILED RANK")
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
        said.out.append(visible(f"{st.job_id:<12} {_name(st, folder)[:16] or '-':<16} {st.state:<12} "
                                f"{clock(ran) if ran is not None else '-':>10} {code:>4} {restarts:>8}  {where}"))
    return said


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


def _readable(folder: Path) -> Path:
    """`folder` if it is one; else SubmitError saying what it is instead."""
    if folder.is_dir():
        return folder
    raise SubmitError(f"{folder} is a link to nothing" if folder.is_symlink() and not folder.exists()
                      else f"{folder} is not a folder")


def _name(st: JobStatus, folder: Path) -> str:
    return st.name or jobdir.read_job_name(folder) or story.of(folder).name
