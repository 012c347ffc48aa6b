"""The edge: the only module that runs `sbatch`, `salloc`, `squeue`, `scontrol`, `scancel`, `bash`, `git`.

Submitting: the job folder (`jobdir`) is made under a temporary name, the job is
submitted *held* so that it cannot start before its folder exists, then the folder is
renamed to the job id and the job released. Any failure on the way removes the folder
(and cancels the held job): nothing half-written is left behind.

Following a job without an accounting DB: squeue (`-t all`: ended jobs too, while the
controller remembers them), the job folder's exit-code, and scontrol only for the exit
code of an ended job that wrote none. How often to ask is `polling`'s and `watch`'s.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from slurmtorch import protocol
from slurmtorch.errors import SubmitError
from slurmtorch.submit.jobfolder import codecopy, jobdir
from slurmtorch.submit.jobfolder.snapshot import Snapshot
from slurmtorch.submit.interrupts import Forwarding, Interrupted, deferred, on_lasting_thread
from slurmtorch.submit.follow.jobstatus import (SQUEUE_FORMAT, TERMINAL_STATES, JobStatus, SqueueRow, TrialStatus,
                                         parse_squeue, scontrol_exit, scontrol_fields)

Runner = Callable[..., subprocess.CompletedProcess]

_JOB_ID_RE = re.compile(r"^(?P<id>[0-9]+)(?:;(?P<cluster>\S+))?$")
GUARD = Path(__file__).resolve().parent.parent / "guard.py"  # run by path (-I -S): see guard.py
GUARD_BOUND_S = 20.0  # guard.py's INT_SETTLE_S + GRACE_S + KILL_WAIT_S, and some


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


def git(folder: str, *args: str, timeout: float = 120) -> tuple[int, bytes, str]:
    """`git -C folder ARGS` for a snapshot (codecopy): its exit code, stdout as bytes (file
    names need not be UTF-8) and the last line of stderr (git's refusal, which the caller says).
    No terminal prompt.
    GIT_OPTIONAL_LOCKS=0: `git status` would otherwise take the index lock to refresh it, and a
    `git commit` the user runs meanwhile would fail on index.lock (git's git.txt, --no-optional-locks;
    git commit 27344d6 "git: add --no-optional-locks option")."""
    argv = ["git", "-C", folder, *args]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, start_new_session=True,
                              env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"})
    except FileNotFoundError:
        raise SubmitError("git not found on PATH, and the script is in a git work tree",
                          tip="put git on PATH, or --no-snapshot to run the code in place", argv=argv) from None
    except subprocess.TimeoutExpired:
        raise SubmitError(f"git did not answer within {timeout:g} s in {folder}", tip="--no-snapshot runs in place",
                          argv=argv) from None
    said = proc.stderr.decode(errors="replace").strip().splitlines()
    return proc.returncode, proc.stdout, said[-1] if said else ""


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
           job: dict | None = None, announce: Callable[[Submission], None] | None = None,
           snapshot: Snapshot | None = None, snapshot_limit: int = 0) -> Submission:
    """Write the job folder, submit held, rename the folder to the job id, release.

    `job` (spec.job_record) is written as job.json; `trials` (spec.trials_record) makes it
    an array job's folder: trials.json and trial-K/. `snapshot`: the code is copied into
    the folder (code/, snapshot.json) before sbatch, at most `snapshot_limit` bytes.
    Nothing in it is world-writable, whatever the umask. A file system error becomes a
    SubmitError naming the path; any failure removes what was made and cancels the job.
    All or nothing under signals too: a TERM/HUP/INT on the way is held until a safe point,
    then the job is cancelled, the folder removed and `Interrupted` raised. `announce`
    (the CLI prints the id) runs once the job is released, still inside that shelter.
    """
    root = root or jobdir.jobs_root()
    with deferred("submission undone: no job left queued, no folder left") as pending:
        tmp = jobdir.make_temp(root, script, trials, job)
        job_id: str | None = None
        final: Path | None = None
        try:
            if snapshot is not None:
                codecopy.take(snapshot, tmp, git, snapshot_limit)
            pending.check()
            warning = sbatch_env_warning(sbatch_env_overrides(os.environ))
            if warning:
                print(warning, file=sys.stderr, flush=True)
            # Held, so that the job cannot start (and open batch.out) before its folder exists.
            argv = ["sbatch", "--parsable", "--hold", str(tmp / jobdir.SCRIPT)]
            job_id = parse_job_id(runner(argv).stdout, argv)
            pending.check()
            # Only once renamed is the folder at the job id ours: before, it may be an older job's.
            final = jobdir.move_into_place(tmp, root, job_id)
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


def run_in_folder(script: Path, exit_code_file: Path, env: dict[str, str]) -> int:
    """Run a local run's script (written in its folder, `localrun`) here, output straight to
    the terminal, with `env`; its exit code is left in `exit_code_file`."""
    return _run_guarded(["bash", str(script)], exit_code_file, env)


def _run_bash(script: str, path: Path) -> int:
    try:
        jobdir.write_new(path, script)
    except OSError as exc:
        raise SubmitError(f"cannot write the mpirun script {path}: {exc.strerror or exc}",
                          tip="check that its folder (or TMPDIR) is writable") from None
    return _run_guarded(["bash", str(path)])


def run_in_allocation(script: str, folder: Path) -> int:
    """Run a launch script from `slurmtorch alloc`'s shell (its script.sh in `folder`), output
    to the terminal; under the guard, as a local mpirun run: Ctrl-C (or our end) ends the run's
    srun and its ranks, never the allocation, which the shell's salloc holds."""
    return _run_guarded(["bash", str(folder / jobdir.SCRIPT)],
                        what="stopped this run's srun and its ranks; the allocation stays")


def allocate(setup: str, argv_for: Callable[[str], list[str]]) -> int:
    """`salloc ... bash --rcfile SETUP -i` in the foreground (`argv_for(SETUP)`, SETUP a private
    temporary file holding `setup`); the shell's exit code, which salloc returns.

    salloc owns the terminal: it makes itself, then the shell, the foreground process group,
    so no Ctrl-C reaches us. One while the request waits is salloc's alone: it withdraws the
    request ("Job aborted due to signal") and exits 1 (tested on the testbed). A
    TERM/HUP to us goes to salloc, which ends the shell and gives the allocation back. When
    the shell exits, salloc relinquishes the allocation (salloc(1)), and Slurm ends every
    step still running in it.
    """
    with tempfile.TemporaryDirectory(prefix="slurmtorch-alloc-") as folder:
        path = Path(folder) / "setup.sh"
        jobdir.write_new(path, setup)
        argv = argv_for(str(path))
        with Forwarding("salloc withdrew the request, or ended the shell and gave the allocation back") as forwarding:
            try:
                proc = subprocess.Popen(argv)
            except FileNotFoundError:
                raise SubmitError(f"{argv[0]} not found on PATH",
                                  tip="run slurmtorch alloc on a Slurm login node; --dry-run prints the command",
                                  argv=argv) from None
            try:
                forwarding.attach(proc.pid)
                return proc.wait()
            except Interrupted:
                proc.wait()  # salloc ends what it started before it exits
                raise


def guarded(argv: Sequence[str], exit_code_file: Path | None = None) -> list[str]:
    """`argv` under guard.py, which ends it with everything it started when this process
    dies or sends it TERM/HUP/INT, and writes its exit code to `exit_code_file`."""
    return [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), str(exit_code_file or "-"), "--", *argv]


def _run_guarded(argv: Sequence[str], exit_code_file: Path | None = None, env: dict[str, str] | None = None,
                 what: str = "stopped mpirun and its ranks") -> int:
    """Run in our process group (a terminal's Ctrl-C and stdin reach mpirun as before); a
    TERM/HUP/INT sent to us alone goes to the guard, and we wait for it a bounded time.
    The CLI's main thread forks the guard (see start_guarded on why that matters)."""
    with Forwarding(what) as forwarding:
        proc = subprocess.Popen(guarded(argv, exit_code_file), env=env)
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


def start_guarded(argv: Sequence[str], log: Path, exit_code_file: Path, env: dict[str, str] | None = None
                  ) -> subprocess.Popen:
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
                                    stderr=subprocess.STDOUT, start_new_session=True, env=env)

    return start() if threading.current_thread() is threading.main_thread() else on_lasting_thread(start)


# --------------------------------------------------------------------------- status


def squeue(selection: Sequence[str], runner: Runner = run) -> dict[str, SqueueRow]:
    """One squeue call: every job the controller still knows (`-t all`: ended ones too, for
    MinJobAge, 300 s by default) among `selection` (`-j 1,2,3_4`, `-u NAME`), array tasks
    one per line (`-r`). A selection of only forgotten ids is an empty answer, not an error."""
    argv = ["squeue", "-h", "-r", "-t", "all", "-o", SQUEUE_FORMAT, *selection]
    proc = runner(argv, check=False, timeout=30)
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:
            return {}
        raise SubmitError(
            f"squeue failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}",
            argv=argv, returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
        )
    return parse_squeue(proc.stdout)


def scontrol_job(job_id: str, runner: Runner = run) -> dict[str, str] | None:
    proc = runner(["scontrol", "-o", "show", "job", job_id], check=False, timeout=30)
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    return scontrol_fields(proc.stdout)


def job_folder(job_id: str, root: Path | None = None) -> Path:
    """The folder of job `JOBID`, or of array task `JOBID_K` (its trial-K)."""
    base, sep, task = str(job_id).partition("_")
    jobdir.check_job_id(base)
    if not sep:
        return jobdir.job_dir(base, root)
    return jobdir.trial_dir(base, int(jobdir.check_job_id(task)), root)


def statuses(job_ids: Sequence[str], root: Path | None = None, *, runner: Runner = run,
             unknown: dict[str, SubmitError] | None = None) -> dict[str, JobStatus]:
    """Every job's (or array task's) status with one squeue call; scontrol only for an
    ended job whose folder holds no exit code (cancelled, timed out: what code Slurm saw).
    A job neither Slurm nor a folder knows raises, or with `unknown` is left out and its
    error kept there."""
    folders = {j: job_folder(j, root) for j in job_ids}
    rows = squeue(["-j", ",".join(job_ids)], runner) if job_ids else {}
    out = {}
    for j in job_ids:
        try:
            out[j] = status_of(j, rows.get(j), folders[j], runner)
        except SubmitError as exc:
            if unknown is None:
                raise
            unknown[j] = exc
    return out


def job_status(job_id: str, root: Path | None = None, *, runner: Runner = run) -> JobStatus:
    """State of a job (or array task `JOBID_K`) without an accounting DB: squeue, then its folder."""
    return statuses([str(job_id)], root, runner=runner)[str(job_id)]




def status_of(job_id: str, row: SqueueRow | None, folder: Path, runner: Runner = run) -> JobStatus:
    """The status given squeue's row (None: the controller has forgotten the job): a job
    still queued or running as squeue says; an ended one with the batch script's exit code
    (scontrol's when the script never wrote one); a forgotten one from its folder alone."""
    if row is not None and row.state not in TERMINAL_STATES:
        return row.status()
    exit_code = jobdir.read_exit_code(folder)
    if row is not None:
        if exit_code is None:
            fields = scontrol_job(job_id, runner)
            exit_code = scontrol_exit(fields or {}, row.state)
        return replace(row.status(), exit_code=exit_code)
    if exit_code is not None:
        return JobStatus(job_id, "COMPLETED" if exit_code == 0 else "FAILED", exit_code, source="job folder")
    if folder.is_dir():
        # The scheduler forgot the job and the script never wrote its exit code:
        # cancelled, timed out or killed with its node.
        return JobStatus(job_id, "ENDED", None, "no exit-code file (cancelled or killed?)", source="job folder")
    raise SubmitError(
        f"job {job_id} is unknown to squeue, and {folder} does not exist",
        tip="check the job id and SLURMTORCH_HOME",
    )


def my_jobs(runner: Runner = run) -> dict[str, JobStatus]:
    """This user's jobs that the controller still knows (queued, running, recently ended),
    by id, from one squeue call; ended ones without their exit code (the caller has folders)."""
    return {j: row.status() for j, row in squeue(["-u", _me()], runner).items()}


# --------------------------------------------------------------------------- arrays


def array_status(job_id: str, root: Path | None = None, *, runner: Runner = run,
                 known: dict[int, JobStatus] | None = None) -> list[TrialStatus]:
    """Every trial (array task) of an array job submitted by slurmtorch.

    One squeue for all tasks; scontrol only for an ended task without an exit code. Trials
    in `known` (ended ones a waiter has already reported) are taken as they are, without
    asking the scheduler again.
    """
    folder = jobdir.job_dir(job_id, root)
    record = jobdir.read_trials(folder)
    if record is None:
        raise SubmitError(f"job {job_id} is not an array job (no {folder / jobdir.TRIALS})")
    known = known or {}
    trials = sorted(((int(t), params) for t, params in record["trials"].items()), key=lambda kv: kv[0])
    rows = squeue(["-j", job_id], runner) if any(t not in known for t, _ in trials) else {}
    out = []
    for t, params in trials:
        task = f"{job_id}_{t}"
        status = known.get(t) or status_of(task, rows.get(task), jobdir.trial_dir(job_id, t, root), runner)
        out.append(TrialStatus(t, params, status))
    return out


def _me() -> str:
    """This process's user name as Slurm shows it (not $USER, which a shell may have changed)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _live_job(job_id: str, runner: Runner, what: str) -> JobStatus:
    """The status of a job of this user's that is still queued or running; else SubmitError.

    scancel (22.05) exits 0 and says nothing for an unknown job id, so the job is looked up
    first: unknown, someone else's, or already ended is an error naming which.
    """
    base = jobdir.check_job_id(str(job_id).partition("_")[0])
    rows = squeue(["-j", str(job_id)], runner)
    row = rows.get(str(job_id)) or next((r for j, r in rows.items() if j.partition("_")[0] == base), None)
    if row is None:
        raise SubmitError(f"job {job_id} is not known to Slurm (never submitted, or ended long enough ago "
                          "to be forgotten)", tip=f"slurmtorch status {job_id} reads its folder")
    me = _me()
    if row.user and row.user != me:
        raise SubmitError(f"job {job_id} belongs to {row.user}, not to {me}",
                          tip=f"only its owner (or an operator, with scancel) can {what} it")
    status = row.status()
    if status.done:
        raise SubmitError(f"job {job_id} has already ended ({status.state}); nothing to {what}",
                          tip=f"slurmtorch status {job_id}")
    return status


def cancel(job_id: str, *, runner: Runner = run) -> JobStatus:
    """scancel a job of this user's that is still queued or running; its status before."""
    status = _live_job(job_id, runner, "cancel")
    runner(["scancel", str(job_id)])
    return status


def signal_stacks(job_id: str, batch_step: bool = False, *, runner: Runner = run) -> None:
    """Ask a running job's ranks for their stacks (`send_stacks_signal`); `batch_step` also
    signals the batch step, where a launcher such as mpirun runs the first node's ranks."""
    status = _live_job(job_id, runner, "ask")
    if status.state != "RUNNING":
        raise SubmitError(f"job {job_id} is {status.state.lower()}, not running: no rank to ask",
                          tip=f"slurmtorch status {job_id}")
    send_stacks_signal(job_id, batch_step, runner)


def send_stacks_signal(job_id: str, batch_step: bool = False, runner: Runner = run) -> None:
    """`scancel --signal=28 JOBID`: every task of every step (and with `batch_step`, every
    process of the batch step: `--batch`; Slurm 22.05's `--full` reached the batch step
    only, on the testbed). By number: its scancel knows no WINCH by name ("Unknown job
    signal"). Every process ignores the signal unless it installed our handler
    (protocol.STACKS_SIGNAL), so the batch shell, srun and mpirun are untouched."""
    number = int(getattr(signal, f"SIG{protocol.STACKS_SIGNAL}"))
    runner(["scancel", f"--signal={number}", str(job_id)], timeout=20)
    if batch_step:
        runner(["scancel", f"--signal={number}", "--batch", str(job_id)], timeout=20)


def signal_pids(job_id: str, pids: dict[str, list[int]], runner: Runner = run) -> None:
    """Send the stacks signal to these processes on these nodes of a running job, by pid: a
    one-task step on each node (`srun --overlap`, which shares the job's CPUs with the
    running step). For ranks the job-wide signal missed: mpirun's ranks on the batch node
    (scancel --batch reaches the batch shell only, and the ranks are sessions of their own,
    out of its process group; testbed, Slurm 22.05). A rank gone meanwhile is no error."""
    number = int(getattr(signal, f"SIG{protocol.STACKS_SIGNAL}"))
    if "_" in job_id:  # srun's --jobid takes no array task ("Invalid numeric value"): its own id
        job_id = runner(["squeue", "-h", "-j", job_id, "-o", "%A"], timeout=20).stdout.strip() or job_id
    for host, ids in sorted(pids.items()):
        runner(["srun", "--overlap", f"--jobid={job_id}", f"--nodelist={host}", "--nodes=1", "--ntasks=1",
                "--quiet", "kill", f"-{number}", *map(str, ids)], timeout=30, check=False)
