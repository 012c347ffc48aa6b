"""A chain of jobs for every front end: read it, render every part (the dry run), submit it
all or nothing, follow it as one, ask how it stands, cancel it; and find it again by any
part's id (its record in every part's folder, written before any part is released).

The parts' dependencies are `submit.chain`'s (pure); each part is rendered and submitted
on `launch`'s path, so a part is exactly the job `slurmtorch sbatch` would make of the same
options. The chain's job ids are known only as it is submitted, so a dry run shows each
part after a placeholder job 0 for the part before it (`PLACEHOLDER`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from slurmtorch import readback
from slurmtorch.errors import SlurmtorchError, SpecError, SubmitError, typed
from slurmtorch.submit.launch import chain as core
from slurmtorch.submit.launch.chain import Part, PartEnd, RecordedPart
from slurmtorch.submit.jobfolder.jobstatus import JobStatus
from slurmtorch.submit.follow.waiting import StoppedWaiting
from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.options import Options, split_script
from slurmtorch.usecases import launch

# The job id a dry run gives the part before (no Slurm job has id 0).
PLACEHOLDER = "0"


@dataclass(frozen=True)
class RenderedPart:
    """A part rendered: the part, its site, the options it is rendered from and its job."""

    part: Part
    site: Any  # sites.model.Site
    options: Options
    job: launch.RenderedJob


@dataclass(frozen=True)
class SubmittedChain:
    """A chain in the queue: each part, its job id, folder and rendered job, in order. One
    found again by id (`attach`) has its parts as its record keeps them (name and `after`)
    and no rendered jobs."""

    parts: tuple[Part, ...]
    job_ids: tuple[str, ...]
    folders: tuple[Path, ...]
    jobs: tuple[launch.RenderedJob, ...] = ()


@dataclass(frozen=True)
class ChainEnded:
    """How a followed chain ended: its exit code, the first failed part (None: none), the report."""

    code: int
    failed: str | None
    lines: tuple[str, ...]
    ends: tuple[PartEnd, ...] = ()
    reports: tuple = ()  # each part's story.Report (None: an array's), for --json


@dataclass(frozen=True)
class ChainStanding:
    """How a chain stands now: each part's end or state and its status, in order, the first
    failed part (None: none so far), and the lines `slurmtorch status` prints."""

    ends: tuple[PartEnd, ...]
    statuses: tuple[JobStatus, ...]
    failed: str | None
    lines: tuple[str, ...]
    reports: tuple = ()  # each part's story.Report, for --json


def read_chain(path: str | os.PathLike) -> tuple[Part, ...]:
    """A chain file's parts, checked; a script's path is read from the file's folder."""
    from slurmtorch.submit.sites import safe_yaml  # lazy: PyYAML, only where a chain is read

    file = Path(path)
    document = safe_yaml.read_document(file, safe_yaml.Kind("chain file", SpecError))
    parts = core.parts_from(document, str(file), lambda m, key: safe_yaml.where(m, key, file))
    folder = file.resolve().parent
    return tuple(replace(p, script=str(folder / p.script)) if p.script else p for p in parts)


def parts_given(parts: Sequence[Part | Mapping[str, Any]], site: str | None = None) -> tuple[Part, ...]:
    """Parts from Python (a `Part`, or a mapping with a chain file's keys; a script's path
    read from the working folder), checked as a file's; `site`: theirs unless they name one."""
    given = [p if isinstance(p, Part) else core.part_from(p, k, site, lambda m, key: "chain")
             for k, p in enumerate(parts)]
    return core.check_chain([replace(p, site=p.site or site) for p in given], "chain")


def dry_run(parts: Sequence[Part], command: tuple[str, ...] = ()) -> list[RenderedPart]:
    """Every part rendered after a placeholder for the job before it; the first problem of
    any part raises, naming the part, before anything is submitted."""
    return [render_part(p, PLACEHOLDER if k else None, command) for k, p in enumerate(parts)]


def render_part(part: Part, previous: str | None, command: tuple[str, ...] = (), snapshot: bool = False
                ) -> RenderedPart:
    """One part rendered to follow the job `previous`; `snapshot`: its copy of the code located."""
    try:
        if part.site is None and not os.environ.get("SLURMTORCH_SITE"):
            raise SpecError("no site given", tip="give the chain a site: (or the part its own), or set SLURMTORCH_SITE")
        where = launch.site_for("sbatch", part.site)
        script, args = split_script([part.script, *part.args] if part.script else list(part.args),
                                         part.module)
        options = Options.given(core.chained_options(part, previous), kind="sbatch", module=part.module,
                                script=script, script_args=tuple(args), python=sys.executable,
                                job_root=str(jobdir.jobs_root()), command=command)
        job = launch.dry_run(where, options, (lambda: _snapshot(part, script)) if snapshot else None)
    except SlurmtorchError as exc:  # which part it is, before what is wrong with it
        exc.message = f"part {part.name!r}: {exc.message}"
        raise
    return RenderedPart(part, where, options, job)


def _snapshot(part: Part, script: str | None):
    from slurmtorch.submit.jobfolder import snapshot as snapshots  # lazy: as in cli/sbatch.py

    if not snapshots.wanted(part.snapshot, os.environ):
        return None
    return snapshots.locate(script, part.module, os.getcwd())


def dry_run_text(rendered: Sequence[RenderedPart]) -> str:
    """What `slurmtorch chain --dry-run` prints: each part's script under a line naming it."""
    out = []
    for k, r in enumerate(rendered):
        follows = "" if k == 0 else (f", after part {rendered[k - 1].part.name!r} ({r.part.after}; job "
                                     f"{PLACEHOLDER} stands for its job id, known once it is submitted)")
        out.append(f"# ---- part {k + 1} of {len(rendered)}: {r.part.name!r} on site {r.site.name}{follows}\n")
        out.append(r.job.text)
    return "".join(out)


def submit(parts: Sequence[Part], command: tuple[str, ...] = (),
           announce: Callable[[SubmittedChain], None] | None = None) -> SubmittedChain:
    """Every part submitted held, each after the one before, then all released at once:
    all or nothing. A part refused (or a stop signal on the way) cancels the parts already
    in and removes their folders, said in one line; none of them ever started."""
    from slurmtorch.submit.edge import sbatch  # lazy: the edge, only a real submission runs sbatch
    from slurmtorch.submit.interrupts import Interrupted, deferred

    refuse_held_namesakes(dry_run(parts, command))  # every part checked before anything is submitted
    done: list = []
    jobs: list[launch.RenderedJob] = []
    recorded = False
    with deferred("chain submission undone: no part left queued") as pending:
        try:
            for part in parts:
                rendered = render_part(part, done[-1].job_id if done else None, command, snapshot=True)
                done.append(launch.submit(rendered.job, release=False))
                jobs.append(rendered.job)
                pending.check()
            write_records(parts, done)  # while every part is held: none ends before its record is there
            recorded = True
            sbatch.release_jobs([s.job_id for s in done])
            chain = SubmittedChain(tuple(parts), tuple(s.job_id for s in done), tuple(s.job_dir for s in done),
                                 tuple(jobs))
            if announce is not None:
                announce(chain)
        except BaseException as exc:
            sbatch.withdraw(done)
            if isinstance(exc, Interrupted):  # a part's own submission may have said it: say the chain's
                raise Interrupted(exc.signum, pending.what) from None
            if not isinstance(exc, SlurmtorchError) or recorded:
                raise  # once recorded, the release failed
            raise _not_submitted(exc, parts, done) from None
    return chain


def refuse_held_namesakes(rendered: Sequence[RenderedPart]) -> None:
    """A chain whose `after: singleton` part a held job of its name would keep waiting for
    good is refused, naming that job (`core.held_namesake`): one squeue call, only for a
    chain with such a part. Refused rather than warned: the chain would otherwise sit queued
    with nothing saying why, and a killed submission (the usual such job) left it."""
    singletons = {r.job.spec.job_name: r.part.name for r in rendered if r.part.after == "singleton"}
    if not singletons:
        return
    from slurmtorch.submit.edge import queries  # lazy: the edge

    rows = queries.squeue(["-u", queries.me()]).values()
    error = core.held_namesake(singletons, [(r.job_id, r.name) for r in rows
                                            if r.state == "PENDING" and r.reason.startswith("JobHeld")])
    if error is not None:
        raise error


def _not_submitted(exc: SlurmtorchError, parts: Sequence[Part], done: Sequence) -> SubmitError:
    """A chain undone before any part was released, in one line: the part refused (or the
    record that could not be written) and the parts already in, cancelled before starting."""
    undone = (f"; part{'s' if len(done) > 1 else ''} {', '.join(repr(p.name) for p in parts[:len(done)])} "
              f"(job{'s' if len(done) > 1 else ''} {', '.join(s.job_id for s in done)}) cancelled "
              "before starting" if done else "")
    message = exc.message
    if len(done) < len(parts):
        name = parts[len(done)].name
        message = message if message.startswith(f"part {name!r}") else f"part {name!r}: {message}"
    return SubmitError(f"chain not submitted: {message}{undone}", tip=exc.tip)


def write_records(parts: Sequence[Part], submissions: Sequence) -> None:
    """The chain's record (`core.RECORD`) in every part's folder, each replaced whole and
    private as the folder's other files; a file system error is one SubmitError line."""
    text = core.record_text([RecordedPart(p.name, s.job_id, str(s.job_dir), p.after)
                             for p, s in zip(parts, submissions)])
    for sub in submissions:
        path = Path(sub.job_dir) / core.RECORD
        try:
            jobdir.replace_private(path, text)
        except OSError as exc:
            raise SubmitError(f"cannot write the chain record {path}: {exc.strerror or exc}",
                              tip="the parts' job folders must be writable (SLURMTORCH_HOME)") from None


def follow(chain: SubmittedChain, say: Callable[[str], None], cancel_on_interrupt: bool = False,
           logs: bool = True) -> ChainEnded:
    """Follow every part in turn as `sbatch --wait` follows one job (rank 0's output, unless
    not `logs`; its state), saying each part's end; then the report: every part's final state,
    and the first failed part's own (`launch.ended`)."""
    ends: list[PartEnd] = []
    reports: dict[str, tuple[str, ...]] = {}
    told = []
    for k, (part, job_id, folder) in enumerate(zip(chain.parts, chain.job_ids, chain.folders)):
        say(f"slurmtorch: chain: following part {part.name!r} (job {job_id})")
        try:
            ended = (launch.follow(_Sub(job_id, folder), chain.jobs[k], cancel_on_interrupt, logs) if chain.jobs
                     else _follow_attached(job_id, folder, cancel_on_interrupt, logs))
        except StoppedWaiting as stop:  # the parts after it wait on: say how to stop them too
            later = chain.job_ids[chain.job_ids.index(job_id) + 1:]
            if later:
                stop.message += (f"; the chain's later parts (job{'s' if len(later) > 1 else ''} {', '.join(later)}) "
                                 f"wait on it: {typed('cancel ' + ' '.join(later))} stops them")
            raise
        started = _started(folder)
        status = _final_status(job_id, folder)
        ends.append(PartEnd(part.name, job_id, status.state if status else ("COMPLETED" if ended.code == 0
                                                                           else "FAILED"),
                            ended.code, started))
        reports[part.name] = ended.lines
        told.append(ended.report)
        say(f"slurmtorch: chain: part {part.name!r} (job {job_id}) {ends[-1].state} (exit {ended.code})")
    code, failed, lines = core.end_lines(ends, chain.parts)
    said = [f"slurmtorch: chain: {line}" for line in lines]
    if failed is not None:
        failed_id = chain.job_ids[[p.name for p in chain.parts].index(failed)]
        said += [f"slurmtorch: {core.failure_head(failed, failed_id)}",
                 *(f"  {line}" for line in reports[failed])]
    else:
        said.append(f"slurmtorch: chain: all {len(ends)} parts completed")
    return ChainEnded(code, failed, tuple(said), tuple(ends), tuple(told))


@dataclass(frozen=True)
class _Sub:
    """A part's submission as `launch.follow` reads it."""

    job_id: str
    job_dir: Path


def _follow_attached(job_id: str, folder: Path, cancel_on_interrupt: bool, logs: bool = True) -> launch.Ended:
    """`launch.follow` for a part of a chain found again by id (no rendered job): an array
    told by its folder, and no `WATCH.submitted` (this process did not just release it)."""
    from slurmtorch.submit.follow import waiting  # lazy: as in launch.follow

    if jobdir.read_trials(folder) is not None:
        return launch.Ended(waiting.wait_array(job_id, folder.parent, cancel_on_interrupt=cancel_on_interrupt,
                                               logs=logs), ())
    return launch.ended(job_id, folder, waiting.wait(job_id, folder.parent, cancel_on_interrupt=cancel_on_interrupt,
                                                     logs=logs))


def _started(folder: Path) -> bool:
    """Whether the part's batch script ever ran (it opens batch.out first)."""
    return (folder / jobdir.BATCH_OUT).exists()


def _final_status(job_id: str, folder: Path) -> JobStatus | None:
    """The part's final state as the scheduler says it (CANCELLED, FAILED, ...); None for an
    array, whose trials `launch.follow` reported."""
    from slurmtorch.submit.edge import queries  # lazy: the edge

    if jobdir.read_trials(folder) is not None:
        return None
    return queries.job_status(job_id, folder.parent)


def statuses(chain: SubmittedChain) -> list[tuple[str, JobStatus]]:
    """Every part's status (one squeue call), by part name."""
    from slurmtorch.submit.edge import queries  # lazy: the edge

    root = chain.folders[0].parent
    found = queries.statuses(list(chain.job_ids), root)
    return [(p.name, found[j]) for p, j in zip(chain.parts, chain.job_ids)]


def cancel(chain: SubmittedChain) -> list[str]:
    """scancel every part still queued or running; the names of those cancelled."""
    from slurmtorch.submit.edge import scancel  # lazy: the edge

    cancelled = []
    for part, job_id in zip(chain.parts, chain.job_ids):
        try:
            scancel.cancel(job_id)
            cancelled.append(part.name)
        except SubmitError:  # it has ended (or was forgotten): nothing to cancel
            continue
    return cancelled


def attach(job_id: str) -> SubmittedChain:
    """The chain that job `job_id` is a part of (any part's id), submitted earlier from any
    process, from the record in its folder; a bad id, no such job or a job that is not part
    of a chain is one clear line."""
    root = jobdir.jobs_root()
    folder = jobdir.job_dir(str(job_id), root)
    if not folder.is_dir():
        raise SpecError(f"no job {job_id} in {root}",
                        tip="a part's id, as the chain printed it, with SLURMTORCH_HOME as it was then")
    chain = chain_of(jobdir.checked(folder))
    if chain is None:
        raise SpecError(f"job {job_id} is not part of a chain (its folder has no {core.RECORD})",
                        tip=f"follow it with {typed(f'status {job_id}')}")
    return chain


def chain_of(folder: Path) -> SubmittedChain | None:
    """The chain a job folder's record names (None: the job is no part of one), each part's
    folder beside this one, checked as every verb checks a job folder."""
    path = folder / core.RECORD
    try:
        text = readback.read_text(path, readback.RECORD)
    except readback.NotRead as why:
        raise SubmitError(f"cannot read the chain record {path}: {why}") from None
    if text is None:
        return None
    recorded = core.parse_record(text, str(path))
    if folder.name not in [p.job_id for p in recorded]:
        raise SubmitError(f"{path} does not name job {folder.name} among its parts",
                          tip="was the folder moved, or the record copied from another job?")
    return SubmittedChain(tuple(Part(p.name, after=p.after) for p in recorded), tuple(p.job_id for p in recorded),
                          tuple(jobdir.checked(jobdir.job_dir(p.job_id, folder.parent)) for p in recorded))


def standing(chain: SubmittedChain) -> ChainStanding:
    """How the chain stands now (`slurmtorch status` on any part): every part's state (one
    squeue call), an ended one's end as `follow` says it, and the first failed part's own
    report, as `status` tells a job's (its end line, restarts and failure lines)."""
    from slurmtorch.usecases import story  # lazy: status only

    found = [status for _, status in statuses(chain)]
    reports = [story.report(status.job_id, folder, status) for status, folder in zip(found, chain.folders)]
    ends = []
    for part, status, folder, rep in zip(chain.parts, found, chain.folders, reports):
        if not status.done:
            ends.append(PartEnd(part.name, status.job_id, status.describe(), 0, _started(folder), done=False))
            continue
        ends.append(PartEnd(part.name, status.job_id, status.state, rep.code or 0, _started(folder)))
    _, failed, _ = core.end_lines(ends, chain.parts)
    report: list[str] = []
    if failed is not None:
        rep = reports[[p.name for p in chain.parts].index(failed)]
        report = [rep.headline, *rep.story.lines(), *rep.restarts, *rep.failures]
    return ChainStanding(tuple(ends), tuple(found), failed, tuple(core.status_lines(ends, chain.parts, report)),
                         tuple(reports))
