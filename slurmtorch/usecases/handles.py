"""Where a `Distributor` job runs: a Slurm job, or the rendered mpirun script run here.

A handle answers the same questions for both (status, cancel, log paths, the logs a
failing rank may have written to), so `Job` reads a run the same way wherever it is.
A local run is a session (process group) of its own under guard.py, which ends it when
this process dies; whether it is still alive is read from /proc (zombies do not count).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

from slurmtorch import readback
from slurmtorch.bootstrap.runfn import META
from slurmtorch.errors import SlurmtorchError, SpecError, SubmitError, typed
from slurmtorch.submit.edge import local, queries, scancel
from slurmtorch.submit.jobfolder.jobstatus import JobStatus
from slurmtorch.submit.follow.watch import WATCH
from slurmtorch.submit.jobfolder import jobdir, localrun
from slurmtorch.submit.follow.statusline import StatusLine
from slurmtorch.submit.follow.storytail import StoryTail
from slurmtorch.submit.follow.tail import Tail, drain
from slurmtorch.submit.follow.waiting import TICK_S
from slurmtorch.submit.jobfolder.failures import RankFailure, rank_reports
from slurmtorch.submit.jobfolder.report import failure_lines, failure_report, log_command
from slurmtorch.usecases import runfolder, story
from slurmtorch.usecases.story import Report

CANCEL_GRACE_S = 10.0
LAUNCHER_LOG = "launcher.out"  # a local run's: mpirun's own output, and the ranks' until runfn redirects it
_RANK_LOG_RE = re.compile(r"rank-(\d+)\.err")


class Handle(ABC):
    """What `Job` asks of the place a job runs."""

    job_id: str

    @abstractmethod
    def status(self) -> JobStatus: ...

    @abstractmethod
    def cancel(self) -> None: ...

    def done_waiting(self) -> None:
        """A wait has seen the job end: the next question about it is asked afresh (a job
        can be requeued after it ended, and a caller may then wait for it again)."""

    @abstractmethod
    def log_paths(self, rank: int | None, node: int | None) -> tuple[Path, Path]: ...

    @abstractmethod
    def failure_logs(self) -> list[tuple[Path, int | None]]:
        """The logs a failing rank may have written its report to, each with the rank whose
        log it is (None: a log several ranks share, a torchrun node's or mpirun's own)."""

    @abstractmethod
    def failures(self) -> list[RankFailure]:
        """Which ranks failed and how, as `status` and `--wait` read a job folder."""

    @abstractmethod
    def log_command(self, failure: RankFailure) -> str:
        """What shows the failed rank's whole log (the report's last line)."""

    @abstractmethod
    def report(self) -> list[str]:
        """The lines `--wait` and `status` end the failed job with (report.failure_lines)."""

    @abstractmethod
    def end_report(self, status: JobStatus) -> Report:
        """How the ended job is told (`story.report`): as `--wait` ends it, the same lines."""

    def record_folder(self) -> Path | None:
        """Where the job's record is (its story: a requeue, a restart), None where it has none."""
        return None

    @abstractmethod
    def headline(self) -> str: ...

    @abstractmethod
    def log_tip(self) -> str: ...


class SlurmHandle(Handle):
    """`torchrun`: (nodes, ranks per node) when torchrun launches the ranks (one log per node).
    `runner`: submit's, for the scheduler commands (tests pass a fake)."""

    def __init__(self, job_id: str, job_dir: Path, root: Path, torchrun: tuple[int, int] | None = None,
                 runner: Callable | None = None):
        self.job_id, self.job_dir, self.root, self.torchrun = job_id, job_dir, root, torchrun
        self.runner = runner

    def _runner(self) -> dict:
        return {} if self.runner is None else {"runner": self.runner}

    def status(self) -> JobStatus:
        """Through the shared watch: however often it is asked, the scheduler is asked at
        polling's rate, and one call answers every job this process waits for."""
        return WATCH.status(self.job_id, self.root, **self._runner())

    def done_waiting(self) -> None:
        WATCH.forget(self.job_id, self.root)

    def cancel(self) -> None:
        try:
            scancel.cancel(self.job_id, **self._runner())
        except SubmitError:
            # It may have ended since the watch's last look: then there is nothing to cancel.
            if not queries.job_status(self.job_id, self.root, **self._runner()).done:
                raise

    def log_paths(self, rank: int | None, node: int | None) -> tuple[Path, Path]:
        out, err = jobdir.log_names(self.torchrun, rank, node)
        return self.job_dir / out, self.job_dir / err

    def failure_logs(self) -> list[tuple[Path, int | None]]:
        return [(p, _log_rank(p)) for p in sorted(self.job_dir.glob("*.err"))]

    def failures(self) -> list[RankFailure]:
        return failure_report(self.job_dir)

    def log_command(self, failure: RankFailure) -> str:
        return log_command(self.job_id, failure, self.torchrun is not None)

    def report(self) -> list[str]:
        return failure_lines(self.job_dir, log=self.log_command)

    def end_report(self, status: JobStatus) -> Report:
        return story.report(self.job_id, self.job_dir, status, log=self.log_command)

    def record_folder(self) -> Path | None:
        return self.job_dir

    def headline(self) -> str:
        return _headline(self.job_dir / "batch.out")

    def log_tip(self) -> str:
        return f"see: slurmtorch logs {self.job_id} --rank 0 (or --batch); folder {self.job_dir}"


class LocalHandle(Handle):
    """The rendered mpirun script, run here in its own process group (so cancel reaches all of it)."""

    def __init__(self, job_id: str, workdir: Path, pgid: int, process=None):
        self.job_id, self.workdir, self.pgid = job_id, workdir, pgid
        self.process = process  # the guard's Popen, kept so that it is reaped

    @classmethod
    def start(cls, script: str, workdir: Path, run_id: str, ntasks: int = 0,
              env: dict[str, str] | None = None) -> LocalHandle:
        # The script is a file (one argument is limited to 128 KiB); guard.py runs it in
        # a session of its own, records its exit code (tmp + rename) and ends it with us:
        # a SIGTERM or SIGKILL to this (the user's) process leaves no rank behind. With
        # `ntasks`, the run folder is a local run's for `slurmtorch stacks local-<run id>`
        # (localrun): its job.json, and the ranks answer in it. `env`: the run's environment
        # (default: ours, with the run folder's variable where it is a local run's).
        try:
            jobdir.write_new(workdir / "mpirun.sh", script)
            if ntasks:
                localrun.write_record(workdir, ntasks)
            process = local.start_guarded(["bash", str(workdir / "mpirun.sh")], workdir / LAUNCHER_LOG,
                                        workdir / "exit-code",
                                        env if env is not None else localrun.environment(workdir) if ntasks else None)
            jobdir.write_new(workdir / "launcher.pid", f"{process.pid}\n")
        except OSError as exc:
            raise runfolder.run_folder_error(exc, workdir) from None
        return cls(f"local-{run_id}", workdir, process.pid, process)

    def _exit_code(self) -> int | None:
        return jobdir.read_exit_code(self.workdir)

    def status(self) -> JobStatus:
        if self.process is not None:
            self.process.poll()  # reap the guard once it has ended
        code = self._exit_code()
        if (self.workdir / "cancelled").exists():
            return JobStatus(self.job_id, "CANCELLED", code, source="local")
        if code is None and group_alive(self.pgid):
            return JobStatus(self.job_id, "RUNNING", None, nodes="localhost", source="local")
        code = self._exit_code()  # it may have ended between the two looks
        if code is None:
            return JobStatus(self.job_id, "FAILED", None, "mpirun ended without an exit code", source="local")
        return JobStatus(self.job_id, "COMPLETED" if code == 0 else "FAILED", code, source="local")

    def cancel(self) -> None:
        (self.workdir / "cancelled").touch()
        # mpirun forwards SIGTERM to its ranks; whatever is left after the grace gets SIGKILL.
        for sig, grace in ((signal.SIGTERM, CANCEL_GRACE_S), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                if not group_alive(self.pgid):
                    return
                time.sleep(0.05)

    def log_paths(self, rank: int | None, node: int | None) -> tuple[Path, Path]:
        if not self.workdir.is_dir():
            raise SlurmtorchError(f"the logs of job {self.job_id} were pruned: only the {runfolder.KEEP_RUNS} "
                                  f"newest runs' folders are kept (it was {self.workdir})")
        out, err = jobdir.log_names(None, rank, node)  # mpirun here: `runfn` writes rank-R.out|err
        return self.workdir / out, self.workdir / err

    def failure_logs(self) -> list[tuple[Path, int | None]]:
        # Until `runfn` redirects a rank's output, it goes to mpirun's own log.
        return [*((p, _log_rank(p)) for p in sorted(self.workdir.glob("rank-*.err"))),
                (self.workdir / LAUNCHER_LOG, None)]

    def failures(self) -> list[RankFailure]:
        return failure_report(self.workdir, LAUNCHER_LOG)  # mpirun's own lines, where srun's are in batch.out

    def log_command(self, failure: RankFailure) -> str:
        return str(self.workdir / jobdir.log_names(None, failure.rank)[1])  # `slurmtorch logs` reads Slurm jobs only

    def report(self) -> list[str]:
        return failure_lines(self.workdir, launcher_log=LAUNCHER_LOG, log=self.log_command)

    def end_report(self, status: JobStatus) -> Report:
        return story.report(self.job_id, self.workdir, status, launcher_log=LAUNCHER_LOG, log=self.log_command)

    def headline(self) -> str:
        return _headline(self.workdir / LAUNCHER_LOG)

    def log_tip(self) -> str:
        return f"see {self.workdir / LAUNCHER_LOG} and rank-*.out|err there"


def _log_rank(path: Path) -> int | None:
    m = _RANK_LOG_RE.fullmatch(path.name)
    return int(m[1]) if m else None


def _headline(path: Path) -> str:
    """The line of a launcher's log worth one line of an error: the first naming an error,
    else the first that is not decoration (Open MPI frames its messages in dashes)."""
    text = readback.text_or_empty(path, readback.LOG_TAIL, cut="head")
    lines = [ln.strip() for ln in text.splitlines() if re.search(r"[A-Za-z0-9]", ln)]
    for line in lines:
        if "error" in line.lower():
            return line
    return lines[0] if lines else ""


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies do not count: PID 1 may reap late)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    leader = _proc_stat(proc / str(pgid))
    if leader is not None and leader[1] == pgid and leader[0] != "Z":
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        stat = _proc_stat(entry)
        if stat is not None and stat[1] == pgid and stat[0] not in ("Z", "X"):
            return True
    return False


def _proc_stat(entry: Path) -> tuple[str, int] | None:
    """(state, process group) from /proc/PID/stat; the command name may hold spaces and ')'."""
    try:
        text = (entry / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return (fields[0], int(fields[2])) if len(fields) > 2 else None


def wait(handle: Handle, timeout: float | None, stream: bool, say: Callable[[str], None]) -> JobStatus:
    """Until the job ends (TimeoutError after `timeout` s): its state from the handle (a Slurm
    job's through the shared watch.WATCH, at polling's rate however often it is asked); with
    `stream`, rank 0's output, the job's story as it happens (a requeue, a restart) and a
    state line while it waits, and its end `said` as `--wait` ends it."""
    deadline = None if timeout is None else time.monotonic() + timeout
    line = StatusLine(sys.stderr, handle.job_id, prefix="slurmtorch: ") if stream else None
    tails, told = [], None
    if line is not None:
        out, err = handle.log_paths(None, None)  # rank 0's (node 0's under torchrun)
        tails = [Tail(out, sys.stdout, line), Tail(err, sys.stderr, line)]
        folder = handle.record_folder()
        told = StoryTail(folder, line.saying(say)) if folder else None
    while True:
        for t in tails:
            t.pump()
        if told is not None:
            told.pump()
        status = handle.status()
        if status.done:
            break
        if line is not None:
            line.show(status)
        if deadline is not None and time.monotonic() >= deadline:
            if line is not None:
                line.close()
            raise TimeoutError(f"job {handle.job_id} is still {status.state} after {timeout:g} s")
        time.sleep(TICK_S)
    handle.done_waiting()
    drain(tails)
    if line is not None:
        line.close()
        if told is not None:
            told.pump()
        ended = handle.end_report(status)  # as --wait ends: the failure's report comes with the error
        for text in (ended.headline, *ended.restarts, *([ended.run] if ended.run else [])):
            say(text)
    return status


def logged_failure(handle: Handle, rank: int | None = None) -> tuple[int, str, str, str] | None:
    """A rank that failed before `runfn` ran (e.g. in the bootstrap) says so on its stderr:
    the earliest log's report (of `rank`, if given), as `failures` reads it."""
    found = []
    for path, log_rank in handle.failure_logs():
        for r in rank_reports(jobdir.read_log(path), log_rank):
            if rank is None or r.rank == rank:
                found.append((path.stat().st_mtime, r.rank, r.host, r.text, r.exc_type))
    if not found:
        return None
    return min(found)[1:]


def attach(job_id: str) -> tuple[SlurmHandle, Path, dict, dict]:
    """A Distributor's job submitted earlier, by id: its handle, its run folder, that folder's
    meta (what was called) and its job.json; the job folder and the run folder checked as
    every verb checks one."""
    root = jobdir.jobs_root()
    folder = jobdir.job_dir(job_id, root)
    if not folder.is_dir():
        raise SpecError(f"no job {job_id} in {root}",
                        tip="the id submit() gave (job.job_id), with SLURMTORCH_HOME as it was then")
    record = jobdir.read_job(jobdir.checked(folder)) or {}
    run = record.get(runfolder.RUN_FOLDER)
    if not run:
        raise SpecError(f"job {job_id} was not submitted by a Distributor: it has no answer to attach to",
                        tip=f"follow it with {typed(f'status {job_id}')} or {typed(f'logs {job_id} --follow')}")
    workdir = Path(str(run))
    try:
        meta = jobdir.read_record(jobdir.checked(workdir) / META)
        if meta is None:
            raise SubmitError("no meta")
    except SubmitError:
        raise SubmitError(f"job {job_id}'s run folder {workdir} is gone or unreadable",
                          tip=f"only the newest {runfolder.KEEP_RUNS} answered runs' folders are kept") from None
    return SlurmHandle(job_id, folder, root, jobdir.torchrun_layout(record)), workdir, meta, record
