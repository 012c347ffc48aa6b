"""The cluster side of `--cluster NAME`: run the verb the laptop sent, in this process, as if typed here.

`request.BOOT` has checked the version and calls `main`. The header line's sync record (the
code the laptop sent: commit, dirtiness, every file's hash) goes into a private file named by
`SLURMTORCH_SYNCED`, which `sbatch` copies its snapshot by. Then a thread relays the laptop's
signals from stdin: INT, TERM and HUP are raised in this process, and the end of stdin (the
laptop or its connection gone) is a hangup, as a closed terminal would be. So `--wait`,
`logs --follow`, Ctrl-C and the exit codes are the cluster's own: what the laptop shows is
what a shell on the login host would have shown.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import tempfile
import threading

from slurmtorch import protocol
from slurmtorch.remote import request


def main(argv: list[str], cluster: str = "1") -> None:
    """`cluster`: the laptop's name for this cluster, which tips name (errors.typed)."""
    tty = bool(argv) and argv[0] == "--tty"
    args = argv[argv.index("--") + 1:] if "--" in argv else []
    os.environ[protocol.ON_CLUSTER] = cluster
    record_file, call = None, None
    if not tty:
        sync, call = request.read_header(sys.stdin.readline())
        if len(args) == 2 and args[0] == request.MIRROR:  # quick, and the laptop's stdin may close first
            sys.exit(_mirror(args[1]))
        if args in ([request.WHERE], [request.LISTING]):  # a pull's questions, in the header's call
            from slurmtorch.remote.pullsource import answer as answer_pull

            sys.exit(answer_pull(args[0].lstrip("-"), call or {}))
        if sync is not None:
            record_file = _write_record(sync)
            os.environ[protocol.SYNCED] = record_file
        threading.Thread(target=_relay, name="slurmtorch-signals", daemon=True).start()
    if call is not None and args == ["--distribute"]:
        sys.exit(answer(call))
    from slurmtorch.cli.main import main as cli

    try:
        cli(args)
    finally:
        if record_file:
            os.unlink(record_file)


def answer(call: dict) -> int:
    """A Distributor's call from the laptop (remote.distribute): submitted with its settings
    and waited for (`run`), or only submitted (`submit`: the job id), or a question about a
    job submitted so (`ClusterJob`: `Job.attach` by id); the outcome written on stdout as
    one line."""
    import cloudpickle  # noqa: F401 - the ranks need it too; its absence is their error, said here first

    from slurmtorch.api.distributor import Distributor
    from slurmtorch.api.job import Job
    from slurmtorch.errors import SlurmtorchError
    from slurmtorch.remote import outcome
    from slurmtorch.remote.distribute import QUESTIONS

    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # rank 0's output, streamed, goes with the state lines to stderr
    sys.stdout = sys.stderr
    pickled = False  # only a default result travels pickled (outcome)
    submitted = None  # a Distributor's run, once submitted: what Ctrl-C cancels
    try:
        if "job" in call:
            question = str(call["question"])
            if question not in QUESTIONS:
                raise SlurmtorchError(f"unknown question {question!r} about job {call['job']}",
                                      tip="the laptop's slurmtorch is another version: install the cluster's")
            kwargs = {k: v for k, v in dict(call.get("kwargs") or {}).items() if k in QUESTIONS[question]}
            job = Job.attach(str(call["job"]), answer=call.get("answer"))
            value = getattr(job, question)(**kwargs)
            pickled = question == "result" and getattr(job, "answer", "pickle") == "pickle"
        else:
            settings = call["settings"]
            dist = Distributor(**settings, **call["options"])
            submitted = dist.submit_prepared(call["meta"], base64.b64decode(call["payload"]) or None, call["name"])
            if call.get("wait", True):
                value = submitted.result(stream=bool(settings.get("progress", True)))
                pickled = dist.answer == "pickle"
            else:
                value = submitted.job_id
        ok = True
    except (SlurmtorchError, TimeoutError) as exc:  # RemoteError and JobFailed are SlurmtorchErrors
        value, ok = exc, False
    except KeyboardInterrupt:
        if "job" in call:  # the laptop's Ctrl-C, relayed, while a ClusterJob waited: it ends the wait
            value, ok = KeyboardInterrupt(f"job {call['job']} goes on there"), False
        elif submitted is None:  # before the job was submitted: nothing to cancel
            raise
        else:  # while `Distributor(cluster=).run` waited: the job is cancelled, as a local run's is
            value, ok = KeyboardInterrupt(submitted.cancel_on_interrupt()), False
    out.write(outcome.line(ok, value, pickled))
    out.flush()
    return 0


def _mirror(name: str) -> int:
    """The laptop's check before it sends code (remote.sync): the mirror made here privately
    (`codesync.ready`), or the error line and tip a job folder's check would give, and its exit code."""
    from slurmtorch.errors import SlurmtorchError
    from slurmtorch.usecases import codesync  # lazy: only a sync's first question needs it

    try:
        codesync.ready(name)
    except SlurmtorchError as exc:
        if exc.tip and "SLURMTORCH_HOME" in exc.tip:
            exc.tip += " (from a laptop: workdir: of this cluster in its clusters file)"
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    return 0


def _write_record(sync: dict) -> str:
    """The sync record as a private file (0600), its mirror's `~` made this home."""
    mirror = str(sync.get("mirror", ""))
    if mirror == "~" or mirror.startswith("~/"):
        sync = {**sync, "mirror": os.path.expanduser(mirror)}
    fd, path = tempfile.mkstemp(prefix="slurmtorch-sync-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
        json.dump(sync, f)
    return path


def _relay() -> None:
    for line in sys.stdin:
        signum = request.read_signal(line)
        if signum is not None:
            os.kill(os.getpid(), signum)
    os.kill(os.getpid(), signal.SIGHUP)
