"""Render a job, then submit it, run it here or in an allocation, and follow it to its end.

One pipeline for every front end: site -> spec -> rendered script (`dry_run`, pure apart
from reading the site file: what `--dry-run` prints), then `submit` (sbatch, all or
nothing), `run_here` (a local mpirun run in its folder) or `run_in_allocation`; `follow`
waits for a submitted job and gives its final report as lines. The front end parses what
the user typed into `Options` and prints what comes back.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from slurmtorch.errors import SpecError, SubmitError, typed
from slurmtorch.submit import sites
from slurmtorch.submit.launch import interactive, jobrecord, render, spec
from slurmtorch.submit.launch.environment import composed, expanded
from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.submit.jobfolder.snapshot import Snapshot
from slurmtorch.submit.launch.mpiflavour import ROOT_NOTE, launcher_missing, launcher_places, mpiexec_line, root_allowance
from slurmtorch.options import Options
from slurmtorch.submit.sites.model import SELF_PLACING_FLAVOURS, Site
from slurmtorch.submit.launch.spec import JobSpec


@dataclass(frozen=True)
class RenderedJob:
    """A job rendered and not yet started: the script a dry run prints, and all that starting
    it needs (the spec for its folder's records, the jobs folder, the snapshot to take)."""

    spec: JobSpec
    text: str
    root: Path
    files: tuple[tuple[str, str], ...] = ()  # the shell files its script sources (render.shell_files)


@dataclass(frozen=True)
class RenderedAllocation:
    """An interactive allocation not yet asked for: its spec (salloc's options), the shell's
    set-up, and what a dry run prints (both)."""

    spec: JobSpec
    setup: str
    text: str


@dataclass(frozen=True)
class Ended:
    """A followed job's end: its exit code, the report's lines (said on stderr) and the report
    itself (`story.Report`, for `--json`; None for an array, whose trials have their own)."""

    code: int
    lines: tuple[str, ...]
    report: Any = None


def site_for(kind: str, ref: str | None) -> Site:
    """The site a job of `kind` runs on: `ref`, else $SLURMTORCH_SITE for a Slurm job and
    `local` for an mpirun run here."""
    return sites.load_site(ref or "local" if kind == "mpirun" else sites.site_ref(ref, None))


def rendered(job: JobSpec) -> RenderedJob:
    """A spec as its script: the batch script, or the mpirun script for a run here."""
    text = render.render_mpirun(job) if job.kind == "mpirun" else render.render_sbatch(job)
    return RenderedJob(job, text, Path(job.job_root), render.shell_files(job))


def dry_run(site: Site, options: Options, snapshot: Callable[[], Snapshot | None] | None = None) -> RenderedJob:
    """What `--dry-run` prints, as a value: the options checked against the site, rendered.
    `snapshot` says which copy of the code the job runs, asked once the options passed."""
    job = spec.build_spec(site, _in_jobs_root(options))
    return rendered(replace(job, snapshot=snapshot()) if snapshot is not None else job)


def submit(job: RenderedJob, announce: Callable | None = None, record: dict | None = None, release: bool = True):
    """sbatch, all or nothing (`edge.sbatch.submit`): the job folder with its records and its
    snapshot, the job held until the folder is in place; `announce` (the id printed) runs
    inside its shelter from signals; `record`: what the front end adds to job.json (the
    Distributor's run folder, which `Job.attach` finds by id); `release` False: left held (a
    chain's part, released with the rest). The `Submission` (job id, folder)."""
    from slurmtorch.submit.edge import sbatch  # lazy: the edge, only a real submission starts processes
    from slurmtorch.submit.jobfolder import snapshot as snapshots

    refuse_missing_module(job.spec, "submitted")
    # Where its ranks start and write (`slurmtorch pull` reads it): the folder it is submitted
    # from, or the --chdir given to sbatch.
    written = {**jobrecord.job_record(job.spec), "workdir": working_folder(job.spec.directives, os.getcwd()),
               **(record or {})}
    return sbatch.submit(job.text, job.root, trials=jobrecord.trials_record(job.spec), job=written,
                         announce=announce, snapshot=job.spec.snapshot,
                         snapshot_limit=snapshots.limit_bytes(os.environ) if job.spec.snapshot else 0,
                         release=release, files=job.files)


def module_lookup(job: JobSpec, cwd: str, environ: Mapping[str, str]) -> tuple[str, str, str, dict[str, str]] | None:
    """(python, module, folder, env): how to ask here whether the job's python finds its -m MODULE
    where its ranks import from, submitted from `cwd`; None where this host cannot stand for the
    job's: a container's python, a site's modules (another python, another PYTHONPATH), a python
    not found here, a sweep's trials (each in a folder of its own, made when it runs)."""
    if job.module is None or job.container is not None or any(c is not None for _, c in job.role_containers):
        return None
    if job.modules or job.module_purge or job.module_use:
        return None
    python = job.python if os.path.isabs(job.python) else shutil.which(job.python, path=environ.get("PATH"))
    if not python or not os.access(python, os.X_OK):
        return None
    if job.snapshot is not None and job.snapshot.cwd is not None:
        folder = cwd  # the ranks import from their copy of it (render: --import-from)
    elif job.array:
        return None
    else:
        folder = working_folder(job.directives, cwd)
    env = {k: v for k, v in [*expanded(job.env, environ), *composed(job.env_paths, environ)] if k.startswith("PYTHON")}
    return python, job.module, folder, env


def refuse_missing_module(job: JobSpec, nothing: str) -> None:
    """A SpecError, before anything starts, when the job's python does not find its -m MODULE
    (`nothing`: what was not done); silent where it cannot be asked (`module_lookup`)."""
    asked = module_lookup(job, os.getcwd(), os.environ)
    if asked is None:
        return
    from slurmtorch.submit.edge import modulefind  # lazy: the edge, only a real start runs the job's python

    name = modulefind.missing(*asked)
    if name is not None:
        package = " (a package runs with -m through its __main__.py)" if name.endswith(".__main__") else ""
        raise SpecError(f"-m {job.module}: the job's python ({asked[0]}) finds no module {name} from {asked[2]}: "
                        f"nothing {nothing}",
                        tip=f"check its name{package}: a module of yours goes in that folder, an installed one in "
                            "that python's environment")


def working_folder(directives, cwd: str) -> str:
    """The folder a job runs in: its #SBATCH --chdir (relative to `cwd`), else `cwd` (pure)."""
    folder = dict(directives).get("chdir")
    return os.path.normpath(os.path.join(cwd, folder)) if isinstance(folder, str) and folder else cwd


def follow(submission, job: RenderedJob, cancel_on_interrupt: bool = False, logs: bool = True) -> Ended:
    """Wait for a submitted job (every trial of an array), rank 0's output streamed (`logs`),
    and its final report: the end line, the restarts, and for a failure where it failed."""
    from slurmtorch.submit.follow import waiting  # lazy: only --wait follows the job
    from slurmtorch.submit.follow.watch import WATCH

    if job.spec.array:
        return Ended(waiting.wait_array(submission.job_id, job.root, cancel_on_interrupt=cancel_on_interrupt,
                                        logs=logs), ())
    WATCH.submitted(submission.job_id, job.root)
    status = waiting.wait(submission.job_id, job.root, cancel_on_interrupt=cancel_on_interrupt, logs=logs)
    return ended(submission.job_id, submission.job_dir, status)


def ended(job_id: str, folder: Path, status) -> Ended:
    """How a followed job (or trial) ends on every front end that follows one (`--wait`,
    `logs --follow`): the headline, the restarts, for a failure the report
    (`report.failure_lines`), and the end line over every start (`story.report`)."""
    from slurmtorch.usecases import story  # lazy: as in `follow`

    rep = story.report(job_id, folder, status)
    return Ended(rep.code if rep.code is not None else 1, rep.end_lines(), rep)


def run_here(job: RenderedJob, say: Callable[[str], None]) -> int:
    """A local mpirun run in its folder (`local-N`, which `slurmtorch stacks` asks), output to
    the terminal; its exit code. Without a folder it still runs, as before runs had one."""
    from slurmtorch.submit.edge import local  # lazy: the edge, only a real run starts processes
    from slurmtorch.submit.jobfolder import localrun

    check_launcher(job.spec, os.environ)
    refuse_missing_module(job.spec, "run")
    ntasks = job.spec.ntasks
    try:
        folder = localrun.create(job.text, ntasks)
    except SubmitError as exc:
        say(f"slurmtorch: note: this run has no folder, so slurmtorch stacks cannot ask it: {exc.message}")
        return local.run_local(job.text, env=local_environment(job, dict(os.environ), say))
    say(f"slurmtorch: run {localrun.run_id(folder)} ({ntasks} rank{'s' if ntasks > 1 else ''}; "
        f"where each stands: {typed(f'stacks {localrun.run_id(folder)}')})")
    try:
        return local.run_in_folder(folder / jobdir.SCRIPT, folder / jobdir.EXIT_CODE,
                                   local_environment(job, localrun.environment(folder), say))
    finally:
        localrun.ended(folder)


def check_launcher(job: JobSpec, environ) -> None:
    """Before a run here starts anything: its MPI's launcher, looked for where its script looks
    (`mpiflavour.launcher_places`), else one line saying which and how to get one. Where the
    site changes PATH itself (its modules and the lines after them, a prologue, PATH in its environment) or the ranks run
    in a container, the script may find one that is not on PATH yet: left to the script."""
    if job.mpi_launch.flavour in SELF_PLACING_FLAVOURS and not environ.get("SLURM_JOB_ID"):
        raise SubmitError(f"{job.mpi_launch.flavour} starts ranks inside a Slurm job, and this shell is in none",
                          tip="run it in an idev session or your own job script (or use slurmtorch sbatch)")
    if (job.modules or job.module_use or job.module_purge or job.after_modules or job.prologue or job.container is not None
            or any(edit[0] == "PATH" for edit in (*job.env, *job.env_paths))):
        return
    line = mpiexec_line(job.mpi_launch, job.ntasks, job.hostfile, [])
    places = launcher_places(line.program, line.beside_python, job.python, environ.get("PATH", os.defpath))
    if not any(os.path.isfile(place) and os.access(place, os.X_OK) for place in places):
        raise launcher_missing(line.program, job.mpi_launch.flavour, line.beside_python, job.python)


def local_environment(job: RenderedJob, env: dict[str, str], say: Callable[[str], None]) -> dict[str, str]:
    """`env` for a run here (`slurmtorch mpirun`, a local Distributor), with Open MPI's
    permission to start as root where root runs it and no one decided otherwise, said in one
    note: README's set-up runs as root, and Open MPI's refusal names no way on."""
    allowed = root_allowance(job.spec.mpi_launch.flavour, os.geteuid(), env, (name for name, _ in job.spec.env))
    if allowed:
        say(f"slurmtorch: {ROOT_NOTE}")
    return {**env, **allowed}


def allocation_dry_run(site: str | None, options: Options, params: dict) -> RenderedAllocation:
    """`slurmtorch alloc`'s salloc command and shell set-up on `site` (else $SLURMTORCH_SITE):
    the options checked as a batch job's (less what only a batch job has), `params` kept for
    `slurmtorch run` in the shell, with the site as a path that works from any folder."""
    ref = interactive.site_for_later(sites.site_ref(site, None))
    job = spec.build_spec(sites.load_site(ref), _in_jobs_root(options))
    interactive.check(job)
    setup = interactive.render_setup(job, interactive.stored(ref, params), [sys.executable, "-m", "slurmtorch"])
    return RenderedAllocation(job, setup, interactive.dry_run_text(job, setup))


def allocate(alloc: RenderedAllocation) -> int:
    """salloc and the shell in the foreground; the shell's exit code."""
    from slurmtorch.submit.edge import salloc  # lazy: the edge, only a real allocation starts processes

    return salloc.allocate(alloc.setup, lambda path: interactive.salloc_argv(alloc.spec, path))


def in_allocation() -> tuple[str, Site, dict]:
    """The allocation whose shell `slurmtorch run` is typed in (`alloc` stored it there): its
    job id, its site and the options it was asked with; else a SpecError saying where `run` works."""
    job_id, ref, stored = interactive.read_stored(os.environ)
    return job_id, sites.load_site(ref), stored


def _in_jobs_root(options: Options) -> Options:
    """The options with the jobs folder this process uses ($SLURMTORCH_HOME/jobs) where they
    name none of their own."""
    return options if options.job_root != Options.job_root else replace(options, job_root=str(jobdir.jobs_root()))


def run_in_allocation(job: RenderedJob, job_id: str) -> int:
    """`slurmtorch run` in an allocation's shell: the launch script in the allocation's folder,
    run under the guard; its exit code."""
    from slurmtorch.submit.edge import local  # lazy: the edge

    refuse_missing_module(job.spec, "run")
    folder = jobdir.allocation_run(job.root, job_id, job.text, jobrecord.job_record(job.spec), job.files)
    return local.run_in_allocation(job.text, folder)
