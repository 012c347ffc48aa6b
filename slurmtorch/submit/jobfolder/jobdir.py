"""The job folder: where it lives, what is in it, and how it is written.

`$SLURMTORCH_HOME/jobs/<jobid>/` (default `~/.slurmtorch/jobs`) holds `script.sh` (the
exact submitted text), `job.json` (its layout: which launcher, how many nodes and ranks),
`run-token` (random: with the job id, the run id every start of the job exports,
bootstrap.runid), `code/` and `snapshot.json` (the copy of the code the job runs and what
it is: codecopy; absent with --no-snapshot), `batch.out`, `rank-<r>.out|err` (torchrun: `node-<n>.out|err`) and, once
the launch step ends, `exit-code`; while it runs, `.started-<restart>` says that srun's task 0
started. A job array (`--array`, `--sweep`) has one folder per array job holding `script.sh`,
`job.json`, `run-token`, `trials.json` and a `trial-<K>/` folder per array task. The names are
`slurmtorch.protocol`'s. The batch script (templates/sbatch.sh.j2) writes the logs,
`exit-code` and the marker; this module makes the folder and reads it back.

A folder is made under a temporary name (`.submitting-<hex>`) and renamed to the job id
once sbatch has answered. It is private whatever the umask: the folder 0700, the files we
write in it 0600 (script.sh holds the --env exports, often tokens; the logs what the
ranks printed), and the jobs folder and SLURMTORCH_HOME above it are refused when another
user owns or can write them (`ownership`: script.sh runs as the user). What the job writes
inside follows the job's umask (`umask o-w`, which the user's script inherits for its own
outputs, checkpoints a project group may share): the folder's 0700 already keeps it from
everyone else; `chmod g+rx` on a job folder (and g+x on the two levels above, made 0700)
shares it. Pure paths and plain file writes only: the dry run imports this module,
never the scheduler's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from slurmtorch import protocol, readback
from slurmtorch.errors import SpecError, SubmitError
from slurmtorch.protocol import (BATCH_OUT, EXIT_CODE, HEARTBEATS, JOB, NODE_PROLOGUE_ERR, RESTARTS, RUN_TOKEN,
                                 SCRIPT, TRIALS)
from slurmtorch.submit.jobfolder import ownership

__all__ = ["BATCH_OUT", "EXIT_CODE", "HEARTBEATS", "JOB", "NODE_PROLOGUE_ERR", "RESTARTS", "RUN_TOKEN", "SCRIPT",
           "TRIALS"]


# --------------------------------------------------------------------------- where


def jobs_root(environ=None) -> Path:
    """Where job folders live: `$SLURMTORCH_HOME/jobs`, default `~/.slurmtorch/jobs`."""
    environ = os.environ if environ is None else environ
    home = environ.get("SLURMTORCH_HOME") or os.path.join(os.path.expanduser("~"), ".slurmtorch")
    return Path(os.path.abspath(os.path.expanduser(home))) / "jobs"


def check_job_id(job_id: str) -> str:
    if not re.fullmatch(r"[0-9]+", str(job_id)):
        raise SpecError(f"invalid job id {job_id!r}", tip="a Slurm job id is a number, e.g. 1234")
    return str(job_id)


def job_dir(job_id: str, root: Path | None = None) -> Path:
    return (root or jobs_root()) / check_job_id(job_id)


def trial_dir(job_id: str, trial: int, root: Path | None = None) -> Path:
    """An array task's folder: `trial-K` in its array job's folder."""
    return job_dir(job_id, root) / f"trial-{int(trial)}"


# --------------------------------------------------------------------------- writing


def private_folder(path: Path) -> None:
    """A new folder only its owner can enter (0700, whatever the umask)."""
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)  # mkdir's mode is masked by the umask (an odd one like 0277)


def write_new(path: Path, text: str) -> None:
    """A new file only its owner can read (0600). Rendered text is UTF-8 already (shell.quote
    refuses anything else); `surrogateescape` only keeps a stray undecodable byte from
    becoming a traceback here."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
        os.fchmod(fd, 0o600)
        f.write(text)


def folder_error(exc: OSError, place: Path, what: str = "job folder") -> SubmitError:
    """An OSError while writing under `place` (a job root, a run folder) as one line + tip."""
    return SubmitError(
        f"cannot write the {what} {exc.filename or place}: {exc.strerror or exc}",
        tip=f"{what}s live in {place}: make it writable, or set SLURMTORCH_HOME to a folder "
            "you can write on the file system the nodes share",
    )


def _ensure_root(root: Path) -> None:
    """The jobs folder and SLURMTORCH_HOME above it: made privately, or refused when another
    user owns or can write them (ownership)."""
    ownership.secure_folder(root, root.parent)


def _make_temp_folder(root: Path) -> Path:
    """mkdtemp's name, a private folder (0700)."""
    while True:
        path = root / f".submitting-{os.urandom(6).hex()}"  # not `secrets`: 6 ms of imports on every dry run
        try:
            private_folder(path)
        except FileExistsError:
            continue
        return path


def run_token() -> str:
    """What makes a job's run id unlike any other job's: the job id repeats (a cluster whose
    state was reset counts from 1 again; two clusters count through the same numbers)."""
    return os.urandom(4).hex()  # not `secrets`: as in _make_temp_folder


def make_temp(root: Path, script: str, trials: dict | None = None, job: dict | None = None,
              files: Sequence[tuple[str, str]] = ()) -> Path:
    """A new job folder under a temporary name holding script.sh, run-token, job.json (`job`:
    spec.job_record), the shell files the script sources (`files`: in sh/) and, for an array
    job (`trials`: spec.trials_record), trials.json and trial-K/. A file system error becomes
    a SubmitError naming the path, and nothing made is left behind."""
    try:
        _ensure_root(root)
        tmp = _make_temp_folder(root)
    except OSError as exc:
        raise folder_error(exc, root) from None
    try:
        write_new(tmp / SCRIPT, script)
        write_new(tmp / RUN_TOKEN, run_token() + "\n")
        _write_shell_files(tmp, files, write_new)
        if job is not None:
            write_new(tmp / JOB, json.dumps(job, indent=1) + "\n")
        if trials is not None:
            # ASCII JSON: a value that is not UTF-8 reads back as it was written.
            write_new(tmp / TRIALS, json.dumps(trials, indent=1) + "\n")
            for t in trials["trials"]:
                private_folder(tmp / f"trial-{int(t)}")
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise folder_error(exc, root) from None
    return tmp


def allocation_run(root: Path, job_id: str, script: str, job: dict, files: Sequence[tuple[str, str]] = ()) -> Path:
    """An interactive allocation's folder (`slurmtorch alloc`), for one `slurmtorch run`: made
    privately on the first run, then script.sh, job.json, the shell files it sources and a new
    run-token (each run is a run of its own, for the trackers) replaced whole. Returns the folder."""
    folder = root / check_job_id(job_id)
    try:
        _ensure_root(root)
        ownership.secure_folder(folder, root.parent)  # made 0700, or an earlier run's: this user's alone
        replace_private(folder / SCRIPT, script)
        replace_private(folder / JOB, json.dumps(job, indent=1) + "\n")
        replace_private(folder / RUN_TOKEN, run_token() + "\n")
        _write_shell_files(folder, files, replace_private)
    except OSError as exc:
        raise folder_error(exc, root) from None
    return folder


def _write_shell_files(folder: Path, files: Sequence[tuple[str, str]], write) -> None:
    """The shell files a script sources, in the job folder's SHELL_DIR (private)."""
    where = folder / protocol.SHELL_DIR
    if files and (where.is_symlink() or not where.is_dir()):  # an allocation's next run finds it made
        private_folder(where)
    for name, text in files:
        write(folder / protocol.SHELL_DIR / name, text)


def move_into_place(tmp: Path, root: Path, job_id: str) -> Path:
    """Rename the temporary folder to the job id; an older folder of that id is kept aside
    (job ids restart when a cluster's state is reset). Returns the job's folder."""
    target = root / job_id
    try:
        if target.exists() or target.is_symlink():
            stale = root / f"{job_id}.stale-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
            os.rename(target, stale)
            print(f"note: moved an older folder for job id {job_id} to {stale}", file=sys.stderr)
        os.rename(tmp, target)
    except OSError as exc:
        raise folder_error(exc, root) from None
    return target


# --------------------------------------------------------------------------- reading


def checked(folder: Path, home: Path | None = None) -> Path:
    """`folder` (a job's, a trial's, a local run's, or a level in one such as its stacks/),
    which a verb is about to read or write: refused as at submission (ownership) where it,
    a level between it and SLURMTORCH_HOME or the home is another user's or writable by
    others, or a level above could be renamed by another user; nothing made (a missing
    level ends the check: the caller says what is not there). What such a folder holds
    steers what runs as this user (`stacks` signals the pids it reads there)."""
    home = home or jobs_root().parent
    try:
        ownership.secure_folder(folder, home, make=False)
    except OSError as exc:
        raise SubmitError(f"cannot read the job folder {exc.filename or folder}: {exc.strerror or exc}",
                          tip="check it and the levels above it, or set SLURMTORCH_HOME to the home you submitted "
                              "with") from None
    return folder


def read_record(path: Path) -> dict | None:
    """A JSON record slurmtorch wrote into a job folder (job.json, restarts.json, ...), read
    back as what the job may have made of it (readback): None when it is not there; SubmitError
    when it is not a JSON object, or not a plain file."""
    try:
        text = readback.read_text(path, readback.RECORD)
        record = None if text is None else json.loads(text)
    except readback.NotRead as why:
        raise SubmitError(f"cannot read {path}: {why}") from None
    except ValueError as exc:
        raise SubmitError(f"cannot read {path}: not JSON ({exc})") from None
    if text is not None and not isinstance(record, dict):
        raise SubmitError(f"cannot read {path}: not a JSON object")
    return record


def read_trials(folder: Path) -> dict | None:
    """An array job's trials.json (its `trials`: parameters by trial number), or None for a
    plain job; SubmitError when it is not one slurmtorch wrote."""
    record = read_record(folder / TRIALS)
    trials = None if record is None else record.get("trials")
    if record is not None and not (isinstance(trials, dict) and trials and all(
            readback.numbered(t, "") is not None and isinstance(params, dict) for t, params in trials.items())):
        raise SubmitError(f"cannot read {folder / TRIALS}: no trials by number", tip="was it edited by hand?")
    return record


def read_restarts(folder: Path) -> dict | None:
    """A --max-restarts job's restarts.json, or None (no restarts asked, none yet, or unreadable)."""
    try:
        return read_record(folder / RESTARTS)
    except SubmitError:
        return None


def write_restarts(folder: Path, record: dict) -> None:
    """Replace restarts.json whole, private like the rest."""
    replace_private(folder / RESTARTS, json.dumps(record, indent=1) + "\n")


def supervisor_ended(code: int, environ=None) -> int:
    """The restart supervisor's exit code, left in its job folder as it ends (SUPERVISOR_END): the
    batch script takes its absence for a supervisor killed outright, and says so. Returns `code`."""
    folder = (os.environ if environ is None else environ).get(protocol.JOB_DIR)
    if folder:
        try:
            replace_private(Path(folder) / protocol.SUPERVISOR_END, f"{code}\n")
        except OSError:
            pass  # the batch script then says the supervisor was killed: a wrong line, not a lost job
    return code


def replace_private(path: Path, text: str) -> None:
    """Replace `path` whole (a reader never sees half of it), readable by its owner only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


_EXIT_CODE_RE = re.compile(r"-?[0-9]{1,9}")


def read_exit_code(folder: Path) -> int | None:
    """The launch step's exit code, once the batch script has written it."""
    text = readback.text_or_empty(folder / EXIT_CODE, readback.SAMPLE, cut=None).strip()
    return int(text) if _EXIT_CODE_RE.fullmatch(text) else None


_DIRECTIVE = re.compile(r"^#SBATCH --(?P<name>[\w-]+)(?:=(?P<value>.*))?$", re.MULTILINE)


def read_directives(folder: Path) -> dict[str, str]:
    """The `#SBATCH --NAME[=VALUE]` lines the job was submitted with (an array task's: its
    array job's script), by name ('' for a flag)."""
    path = folder / SCRIPT
    if not path.exists() and folder.name.startswith("trial-"):
        path = folder.parent / SCRIPT
    return {m["name"]: (m["value"] or "").strip().strip("'\"") for m in _DIRECTIVE.finditer(readback.text_or_empty(path, 8192, cut="head"))}


def read_job_name(folder: Path) -> str:
    """The name the job was submitted with (its script's `#SBATCH --job-name=`), '' if none."""
    return read_directives(folder).get("job-name", "")


def progress_mark(folder: Path) -> tuple[bool, int | None]:
    """What the folder says of the job's progress, cheaply (two stats): whether the batch
    script started (batch.out exists) and when it last wrote its exit code (mtime, ns).
    A waiter asks the scheduler sooner when this changes (polling.Backoff.nudge)."""
    try:
        ended = (folder / EXIT_CODE).stat().st_mtime_ns
    except OSError:
        ended = None
    return (folder / BATCH_OUT).exists(), ended


def read_job(folder: Path) -> dict | None:
    """A job's job.json (an array task's: its array job's), or None (none, or unreadable)."""
    path = folder / JOB
    if not path.exists() and folder.name.startswith("trial-"):
        path = folder.parent / JOB
    try:
        return read_record(path)
    except SubmitError:
        return None


def job_number(job: dict | None, key: str, most: int = 1 << 20) -> int | None:
    """A count in a job's job.json (nodes, ntasks), or None where it is not one from 0 to
    `most` (pure): the job can write its folder, and a count sizes what is read and shown."""
    value = (job or {}).get(key)
    return value if type(value) is int and 0 <= value <= most else None


def torchrun_layout(job: dict | None) -> tuple[int, int] | None:
    """(nodes, ranks per node) when a job (its job.json) launches torchrun, else None (pure)."""
    if not job or job.get("launcher") != "torchrun":
        return None
    nodes, per = job_number(job, "nodes"), job_number(job, "ntasks_per_node")
    return (nodes, per) if nodes and per else None


def log_names(torchrun: tuple[int, int] | None, rank: int | None = None, node: int | None = None) -> tuple[str, str]:
    """Names of the stdout and stderr files of a rank, or of a node under torchrun (pure).

    srun and mpirun write rank-R.out|err. torchrun writes one pair per node, node-N.out|err,
    with every rank of that node in it; its rendezvous, not Slurm, decides which node
    holds which ranks (it sorts the nodes by host name), so a rank names a file only when
    there is one node. Neither rank nor node: rank 0's, or node 0's under torchrun.
    """
    if torchrun is None:
        if node is not None:
            raise SpecError("this job writes one log per rank; a node's log applies to torchrun jobs only",
                            tip="ask for a rank's log instead")
        return protocol.rank_logs(rank or 0)
    nodes, per = torchrun
    if node is None:
        if rank is not None and nodes > 1:
            raise SpecError(
                f"this torchrun job writes one log per node, each with its {per} rank{'s' if per > 1 else ''}, "
                f"and torchrun (not Slurm) decides which of its {nodes} nodes holds rank {rank}",
                tip=f"ask for a node's log instead (node 0..{nodes - 1}; node 0 is the allocation's first)")
        node = 0
    if not 0 <= node < nodes:
        raise SpecError(f"node {node} is not in this job (nodes 0..{nodes - 1})")
    return protocol.node_logs(node)


def rank_log_paths(folder: Path, rank: int | None = None, node: int | None = None) -> tuple[Path, Path]:
    """`log_names` in a job (or trial) folder, by the launcher its job.json records."""
    out, err = log_names(torchrun_layout(read_job(folder)), rank, node)
    return folder / out, folder / err


def error_logs(folder: Path) -> dict[int, str]:
    """The text of every rank-R.err (torchrun: node-N.err) in a job folder, by R (or N)."""
    errs: dict[int, str] = {}
    for prefix in ("rank-", "node-"):
        for p in folder.glob(f"{prefix}*.err"):
            idx = readback.numbered(p.name, prefix, ".err")
            if idx is not None:
                errs.setdefault(idx, read_log(p))
    return errs


def exit_notes(folder: Path) -> list[str]:
    """The text of every rank-R.exit in a job folder: the ranks whose script returned
    (bootstrap.exits.note_exit; failures.latest_exits reads them)."""
    return [readback.text_or_empty(p, readback.SAMPLE, cut=None)
            for p in sorted(folder.glob(protocol.exit_note_name("*")))]


def read_log(path: Path) -> str:
    """A log's end (readback.LOG_TAIL: where its failure is), '' when it is not there (yet)
    or not a plain file."""
    return readback.text_or_empty(path, readback.LOG_TAIL)
