"""The edge: the only module that runs `sbatch`, `squeue`, `scontrol`, `scancel`, `bash`.

Submitting: the job folder (`jobdir`) is made under a temporary name, the job is
submitted *held* so that it cannot start before its folder exists, then the folder is
renamed to the job id and the job released. Any failure on the way removes the folder
(and cancels the held job): nothing half-written is left behind.

Following a job without an accounting DB: squeue while it is queued or running, then
scontrol, then its folder's exit-code once the scheduler has forgotten it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from slurmtorch.errors import SubmitError
from slurmtorch.submit import jobdir
from slurmtorch.submit.interrupts import Forwarding, Interrupted, deferred, on_lasting_thread
from slurmtorch.submit.report import failure_lines
from slurmtorch.submit.tail import Tail, drain

Runner = Callable[..., subprocess.CompletedProcess]

TERMINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
    "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED",
})
_JOB_ID_RE = re.compile(r"^(?P<id>[0-9]+)(?:;(?P<cluster>\S+))?$")
POLL_S = 0.25
MAX_POLL_S = 2.0
GUARD = Path(__file__).with_name("guard.py")
GUARD_BOUND_S = 20.0  # guard.py's GRACE_S + KILL_WAIT_S, and some


def run(argv: Sequence[str], *, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    """Run one scheduler command; failures become a SubmitError carrying argv and output."""
    argv = [str(a) for a in argv]
    try:
        # A session of its own: a TERM/HUP/Ctrl-C meant for us (our process group) must
        # not kill sbatch mid-call, after the job exists but before we know its id.
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, start_new_session=True)
    except FileNotFoundError:
        raise SubmitError(
            f"{argv[0]} not found on PATH",
            tip="run this on a Slurm login node, or use --dry-run to only print the script",
            argv=argv,
        ) from None
    except OSError as e:  # e.g. not executable
        raise SubmitError(f"cannot run {argv[0]}: {e.strerror or e}", argv=argv) from None
    except subprocess.TimeoutExpired as e:
        raise SubmitError(
            f"{argv[0]} did not answer within {timeout:g} s", tip="is slurmctld reachable? (scontrol ping)",
            argv=argv, stdout=_text(e.stdout), stderr=_text(e.stderr),
        ) from None
    if check and proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise SubmitError(
            f"{argv[0]} failed (exit {proc.returncode}): {detail[-1] if detail else 'no output'}",
            argv=argv, returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
        )
    return proc


def _text(data) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


# --------------------------------------------------------------------------- submitting


def parse_job_id(stdout: str, argv: Sequence[str] = ()) -> str:
    """`sbatch --parsable` prints `jobid` or `jobid;cluster`."""
    lines = [ln.strip() for ln in stdout.strip().splitlines() if ln.strip()]
    m = _JOB_ID_RE.match(lines[-1]) if lines else None
    if not m:
        raise SubmitError(
            f"could not read a job id from sbatch's output {stdout.strip()!r}",
            argv=argv, returncode=0, stdout=stdout,
        )
    return m.group("id")


def sbatch_env_overrides(environ) -> list[str]:
    """The SBATCH_* input variables set in `environ` (pure): sbatch lets each override the
    script's matching #SBATCH line, so the job would differ from the dry run."""
    return sorted(k for k in environ if k.startswith("SBATCH_"))


def sbatch_env_warning(names: Sequence[str]) -> str | None:
    if not names:
        return None
    return (f"warning: {', '.join(names)} set in the environment override{'s' if len(names) == 1 else ''} "
            "the script's #SBATCH lines (the job may differ from --dry-run); unset "
            f"{'it' if len(names) == 1 else 'them'} to run exactly the script")


@dataclass(frozen=True)
class Submission:
    job_id: str
    job_dir: Path


def submit(script: str, root: Path | None = None, *, runner: Runner = run, trials: dict | None = None,
           announce: Callable[[Submission], None] | None = None) -> Submission:
    """Write the job folder, submit held, rename the folder to the job id, release.

    `trials` (spec.trials_record) makes it an array job's folder: trials.json and trial-K/.
    Nothing in it is world-writable, whatever the umask. A file system error becomes a
    SubmitError naming the path; any failure removes what was made and cancels the job.
    All or nothing under signals too: a TERM/HUP/INT on the way is held until a safe point,
    then the job is cancelled, the folder removed and `Interrupted` raised. `announce`
    (the CLI prints the id) runs once the job is released, still inside that shelter.
    """
    root = root or jobdir.jobs_root()
    with deferred("submission undone: no job left queued, no folder left") as pending:
        tmp = jobdir.make_temp(root, script, trials)
        job_id: str | None = None
        final: Path | None = None
        try:
            pending.check()
            warning = sbatch_env_warning(sbatch_env_overrides(os.environ))
            if warning:
                print(warning, file=sys.stderr, flush=True)
            # Held, so that the job cannot start (and open batch.out) before its folder exists.
            argv = ["sbatch", "--parsable", "--hold", str(tmp / jobdir.SCRIPT)]
            job_id = parse_job_id(runner(argv).stdout, argv)
            pending.check()
            # Only once renamed is the folder at the job id ours: before, it may be an older job's.
            final = jobdir.settle(tmp, root, job_id)
            runner(["scontrol", "release", job_id])
            pending.check()
        except BaseException:
            _undo(tmp, final, job_id, runner)
            raise
        submission = Submission(job_id=job_id, job_dir=final)
        if announce is not None:
            announce(submission)
    return submission


def _undo(tmp: Path, final: Path | None, job_id: str | None, runner: Runner) -> None:
    """Remove the folder and cancel the job, each bounded (scancel waits 10 s at most)."""
    for folder in (tmp, final):
        if folder is not None and folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
    if job_id is not None:
        try:
            runner(["scancel", job_id], check=False, timeout=10)
        except Exception:  # noqa: BLE001 - the original error matters more
            pass


def run_local(script: str, path: Path | None = None) -> int:
    """Run a rendered mpirun script here, output straight to the terminal.

    The script goes to bash as a file, not as `bash -c TEXT`: one argument is limited
    to 128 KiB (E2BIG), and bash reading it from stdin would share stdin with mpirun.
    `path` keeps it (e.g. in a Distributor's folder); else a temporary file is used.
    """
    if path is not None:
        return _run_bash(script, path)
    with tempfile.TemporaryDirectory(prefix="slurmtorch-mpirun-") as folder:
        return _run_bash(script, Path(folder) / "mpirun.sh")


def _run_bash(script: str, path: Path) -> int:
    try:
        jobdir.write_new(path, script)
    except OSError as exc:
        raise SubmitError(f"cannot write the mpirun script {path}: {exc.strerror or exc}",
                          tip="check that its folder (or TMPDIR) is writable") from None
    return _run_guarded(["bash", str(path)])


def guarded(argv: Sequence[str], exit_code_file: Path | None = None) -> list[str]:
    """`argv` under guard.py, which ends it with everything it started when this process
    dies or sends it TERM/HUP/INT, and writes its exit code to `exit_code_file`."""
    return [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), str(exit_code_file or "-"), "--", *argv]


def _run_guarded(argv: Sequence[str]) -> int:
    """Run in our process group (a terminal's Ctrl-C and stdin reach mpirun as before); a
    TERM/HUP/INT sent to us alone goes to the guard, and we wait for it a bounded time.
    The CLI's main thread forks the guard (see start_guarded on why that matters)."""
    with Forwarding("stopped mpirun and its ranks") as forwarding:
        proc = subprocess.Popen(guarded(argv))
        try:
            forwarding.attach(proc.pid)
            return proc.wait()
        except Interrupted:
            try:
                proc.wait(timeout=GUARD_BOUND_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise


def start_guarded(argv: Sequence[str], log: Path, exit_code_file: Path) -> subprocess.Popen:
    """Start `argv` under guard.py in a session of its own, output to `log`, stdin empty:
    a Distributor's local run. The guard ends it when this process dies (its parent-death
    signal), with no signal handler of ours left in the user's process.

    The parent-death signal fires when the *thread* that forked the guard exits, not the
    process: the fork happens on the main thread or on one lasting thread, which lives as
    long as the process, never on a caller's short-lived thread.
    """
    def start() -> subprocess.Popen:
        with open(log, "wb") as out:
            return subprocess.Popen(guarded(argv, exit_code_file), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    return start() if threading.current_thread() is threading.main_thread() else on_lasting_thread(start)


# --------------------------------------------------------------------------- status


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: str
    exit_code: int | None = None
    reason: str = ""
    nodes: str = ""
    source: str = ""

    @property
    def done(self) -> bool:
        """Ended: a terminal Slurm state, or known only from its folder (the scheduler has
        forgotten it, so it cannot run any more, exit-code file or not). Every wait
        stops on this."""
        if self.source == "job folder":
            return True
        return self.state.split()[0] in TERMINAL_STATES if self.state else False

    def line(self) -> str:
        parts = [f"job={self.job_id}", f"state={self.state}"]
        if self.exit_code is not None:
            parts.append(f"exit_code={self.exit_code}")
        if self.nodes:
            parts.append(f"nodes={self.nodes}")
        if self.reason and self.reason not in ("None", "(null)"):
            parts.append(f"reason={self.reason}")
        parts.append(f"source={self.source}")
        return " ".join(parts)


def _squeue_state(job_id: str, runner: Runner) -> tuple[str, str, str] | None:
    proc = runner(["squeue", "-h", "-j", job_id, "-o", "%T|%r|%N"], check=False, timeout=30)
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:
            return None
        raise SubmitError(
            f"squeue failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}",
            argv=["squeue", "-j", job_id], returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
        )
    line = proc.stdout.strip().splitlines()
    if not line:
        return None
    state, _, rest = line[0].partition("|")
    reason, _, nodes = rest.partition("|")
    return state, reason, nodes


def _scontrol_job(job_id: str, runner: Runner) -> dict[str, str] | None:
    proc = runner(["scontrol", "-o", "show", "job", job_id], check=False, timeout=30)
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    fields = {}
    for token in proc.stdout.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def _scontrol_exit(fields: dict[str, str], state: str) -> int:
    code, _, sig = fields.get("ExitCode", "0:0").partition(":")
    code_i, sig_i = int(code or 0), int(sig or 0)
    if code_i:
        return code_i
    if sig_i:
        return 128 + sig_i
    return 0 if state == "COMPLETED" else 1


def job_status(job_id: str, root: Path | None = None, *, runner: Runner = run) -> JobStatus:
    """State of a job without an accounting DB: squeue, then scontrol, then the job folder."""
    jobdir.check_job_id(job_id)
    return _status(job_id, jobdir.job_dir(job_id, root), runner)


def _status(job_id: str, folder: Path, runner: Runner) -> JobStatus:
    """`job_id` may be an array task (`123_4`), whose folder is the trial's."""
    return _status_after_squeue(job_id, folder, runner, _squeue_state(job_id, runner))


def _status_after_squeue(job_id: str, folder: Path, runner: Runner, sq: tuple[str, str, str] | None) -> JobStatus:
    """The status given squeue's (state, reason, nodes) or None: scontrol and the folder
    are asked only once squeue no longer shows the job running or waiting."""
    if sq is not None:
        state, reason, nodes = sq
        if state not in TERMINAL_STATES:
            return JobStatus(job_id, state, None, reason, nodes, "squeue")
    fields = _scontrol_job(job_id, runner)
    if fields is not None:
        state = fields.get("JobState", "UNKNOWN")
        exit_code = None
        if state in TERMINAL_STATES:
            exit_code = jobdir.read_exit_code(folder)
            if exit_code is None:
                exit_code = _scontrol_exit(fields, state)
        return JobStatus(job_id, state, exit_code, fields.get("Reason", ""), fields.get("NodeList", ""), "scontrol")
    exit_code = jobdir.read_exit_code(folder)
    if exit_code is not None:
        return JobStatus(job_id, "COMPLETED" if exit_code == 0 else "FAILED", exit_code, source="job folder")
    if folder.is_dir():
        # The scheduler forgot the job and the script never wrote its exit code:
        # cancelled, timed out or killed with its node.
        return JobStatus(job_id, "ENDED", None, "no exit-code file (cancelled or killed?)", source="job folder")
    raise SubmitError(
        f"job {job_id} is unknown to squeue and scontrol, and {folder} does not exist",
        tip="check the job id and SLURMTORCH_HOME",
    )


# --------------------------------------------------------------------------- arrays


def task_status(job_id: str, root: Path | None = None, *, runner: Runner = run) -> JobStatus:
    """job_status of `JOBID` or of one array task `JOBID_K` (its folder is trial-K)."""
    base, sep, task = str(job_id).partition("_")
    if not sep:
        return job_status(job_id, root, runner=runner)
    jobdir.check_job_id(base)
    jobdir.check_job_id(task)
    return _status(job_id, jobdir.trial_dir(base, int(task), root), runner)


@dataclass(frozen=True)
class TrialStatus:
    trial: int
    params: dict
    status: JobStatus

    def line(self) -> str:
        s = self.status
        parts = [f"trial={self.trial}", f"job={s.job_id}", f"state={s.state}"]
        if s.exit_code is not None:
            parts.append(f"exit_code={s.exit_code}")
        if s.nodes:
            parts.append(f"nodes={s.nodes}")
        if s.reason and s.reason not in ("None", "(null)"):
            parts.append(f"reason={s.reason}")
        if self.params:
            parts.append("params=" + ",".join(f"{k}={v}" for k, v in self.params.items()))
        parts.append(f"source={s.source}")
        return " ".join(parts)


def parse_squeue_tasks(stdout: str, job_id: str) -> dict[int, tuple[str, str, str]]:
    """`squeue -h -r -j JOB -o %i|%T|%r|%N` -> {task: (state, reason, nodes)} (pure).

    `-r` puts every array task on its own line as `JOB_TASK`, pending ones included;
    anything else (a heterogeneous job, another job's line) is ignored.
    """
    tasks: dict[int, tuple[str, str, str]] = {}
    for line in stdout.splitlines():
        ident, sep, rest = line.strip().partition("|")
        base, _, task = ident.partition("_")
        if not sep or base != job_id or not task.isdigit():
            continue
        state, _, rest = rest.partition("|")
        reason, _, nodes = rest.partition("|")
        tasks[int(task)] = (state, reason, nodes)
    return tasks


def _squeue_tasks(job_id: str, runner: Runner) -> dict[int, tuple[str, str, str]]:
    """Every queued task of an array job in one squeue call."""
    argv = ["squeue", "-h", "-r", "-j", job_id, "-o", "%i|%T|%r|%N"]
    proc = runner(argv, check=False, timeout=30)
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:
            return {}  # the whole array has left the queue
        raise SubmitError(
            f"squeue failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}",
            argv=argv, returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
        )
    return parse_squeue_tasks(proc.stdout, job_id)


def array_status(job_id: str, root: Path | None = None, *, runner: Runner = run,
                 known: dict[int, JobStatus] | None = None) -> list[TrialStatus]:
    """Every trial (array task) of an array job submitted by slurmtorch.

    One squeue for all tasks; scontrol (then the trial's folder) only for a task that
    has left the queue. Trials in `known` (ended ones a waiter has already reported)
    are taken as they are, without asking the scheduler again.
    """
    folder = jobdir.job_dir(job_id, root)
    record = jobdir.read_trials(folder)
    if record is None:
        raise SubmitError(f"job {job_id} is not an array job (no {folder / jobdir.TRIALS})")
    known = known or {}
    trials = sorted(((int(t), params) for t, params in record["trials"].items()), key=lambda kv: kv[0])
    queued = _squeue_tasks(job_id, runner) if any(t not in known for t, _ in trials) else {}
    out = []
    for t, params in trials:
        status = known.get(t) or _status_after_squeue(f"{job_id}_{t}", jobdir.trial_dir(job_id, t, root),
                                                      runner, queued.get(t))
        out.append(TrialStatus(t, params, status))
    return out


def wait_array(job_id: str, root: Path | None = None, *, runner: Runner = run, poll_s: float = POLL_S,
               err: IO[str] | None = None) -> int:
    """Block until every trial has ended, reporting each; 0 only if all succeeded.

    Polls back off from `poll_s` to MAX_POLL_S while nothing ends (an array can run for
    hours; the controller serves every user's squeue), and ended trials are not asked
    about again.
    """
    err = err or sys.stderr
    reported: dict[int, JobStatus] = {}
    delay = poll_s
    while True:
        trials = array_status(job_id, root, runner=runner, known=reported)
        ended = False
        for t in trials:
            if t.trial not in reported and t.status.done:
                reported[t.trial] = t.status
                ended = True
                print(f"trial {t.trial} {t.status.state} (exit {exit_code_of(t.status)})", file=err, flush=True)
                if exit_code_of(t.status) != 0:
                    for line in failure_lines(jobdir.trial_dir(job_id, t.trial, root)):
                        print(f"slurmtorch: trial {t.trial}: {line}", file=err)
        if len(reported) == len(trials):
            break
        if ended:
            delay = poll_s  # others may be about to end too
        time.sleep(delay)
        delay = min(delay * 2, MAX_POLL_S)
    failed = [t.trial for t in trials if exit_code_of(t.status) != 0]
    print(f"job {job_id}: {len(trials) - len(failed)} of {len(trials)} trials succeeded"
          + (f"; failed: {', '.join(map(str, failed))}" if failed else ""), file=err, flush=True)
    return 1 if failed else 0


# --------------------------------------------------------------------------- following


def follow(job_id: str, paths: Sequence[tuple[Path, IO[str]]], root: Path | None = None, *,
           runner: Runner = run, poll_s: float = POLL_S) -> JobStatus:
    """Stream files while the job runs (polling squeue); return its final status."""
    tails = [Tail(p, out) for p, out in paths]
    while True:
        for t in tails:
            t.pump()
        status = task_status(job_id, root, runner=runner)
        if status.done:
            break
        time.sleep(poll_s)
    drain(tails)
    return status


def wait(job_id: str, root: Path | None = None, *, runner: Runner = run, poll_s: float = POLL_S,
         out: IO[str] | None = None, err: IO[str] | None = None) -> JobStatus:
    """Block until the job ends, streaming rank 0's output (node 0's under torchrun);
    return the final status."""
    folder = jobdir.job_dir(job_id, root)
    o, e = jobdir.rank_log_paths(folder)
    return follow(job_id, [(o, out or sys.stdout), (e, err or sys.stderr)], root, runner=runner, poll_s=poll_s)


def exit_code_of(status: JobStatus) -> int:
    if status.exit_code is not None:
        return status.exit_code
    return 0 if status.state == "COMPLETED" else 1


def cancel(job_id: str, *, runner: Runner = run) -> None:
    runner(["scancel", jobdir.check_job_id(job_id)])
