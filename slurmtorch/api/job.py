"""`Job`: a submitted `Distributor` run (what its result raises when there is no answer,
`JobFailed` and `RemoteError`, is in `slurmtorch.errors`, where the relay rebuilds it too).

The ranks answer through the run folder (see `slurmtorch.bootstrap.runfn`): rank 0's
value in result.pkl, a rank that raised in error-rank-R.json. A rank that failed before
`runfn` ran (in the bootstrap) reported only on its stderr, which `failures.rank_reports`
reads. Where the job runs (Slurm, or mpirun here) is its handle's business.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from slurmtorch import protocol, readback
from slurmtorch.api.clusterjob import ClusterJob
from slurmtorch.usecases import handles
from slurmtorch.usecases.handles import Handle
from slurmtorch.usecases.runfolder import ENDED, close_run_folder
from slurmtorch.bootstrap import runfn
from slurmtorch.errors import JobFailed, RemoteError, SlurmtorchError, SpecError
from slurmtorch.submit.jobfolder.jobstatus import JobStatus


JSON_CAP = 256 << 20  # a JSON answer is plain data, read bounded: a summary, not a model's weights


def checked_answer(answer: str | None) -> None:
    """`answer=`: None (the default), "pickle" or "json"; else one SpecError line."""
    if answer is not None and answer not in runfn.ANSWERS:
        raise SpecError(f"answer must be {' or '.join(repr(a) for a in runfn.ANSWERS)}, got {answer!r}",
                        tip="answer='json': rank 0's value comes back as JSON and nothing is unpickled")


class Job:
    """A submitted run. `job_id` is the Slurm job id (or `local-...` for local_mode)."""

    def __init__(self, handle: Handle, workdir: Path, kind: str, name: str, ntasks: int, answer: str = "pickle"):
        self._handle = handle
        self.workdir = workdir
        self.kind = kind
        self.name = name
        self.ntasks = ntasks
        self.answer = answer  # how rank 0's value comes back: pickled, or JSON (nothing unpickled)
        self._json_only = False  # attached with answer="json": a pickled answer is refused, not read
        self._outcome: tuple[bool, Any] | None = None
        # Once a result was returned its run folder may be pruned (close_run_folder), and with
        # it what a local run's handle reads its state from: the final status is kept here.
        self._succeeded: JobStatus | None = None

    @classmethod
    def attach(cls, job_id: str | int, *, cluster: str | None = None, answer: str | None = None) -> Job | ClusterJob:
        """The Distributor job `job_id`, submitted earlier from any process (a notebook whose
        kernel died): state, wait, result, logs and cancel as the Job submit() returned.
        `cluster`: one submitted there from this laptop (default $SLURMTORCH_CLUSTER).
        `answer="json"`: take its answer only as JSON, as it was submitted with; nothing the
        cluster sends is unpickled here (a job submitted without it is refused in one line)."""
        checked_answer(answer)
        cluster = cluster or os.environ.get(protocol.CLUSTER) or None
        if cluster and not os.environ.get(protocol.ON_CLUSTER):
            return ClusterJob(str(job_id), cluster, answer=answer or runfn.ANSWERS[0])
        job = _attached(str(job_id))
        job._json_only = answer == "json"
        return job

    @property
    def job_id(self) -> str:
        return self._handle.job_id

    def __repr__(self) -> str:
        return f"Job({self.job_id!r}, {self.name})"

    def state(self) -> str:
        """PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ... (Slurm's words)."""
        return (self._succeeded or self._handle.status()).state

    def wait(self, timeout: float | None = None) -> str:
        """Block until the job ends (TimeoutError after `timeout` s); its final state."""
        return (self._succeeded or self._wait(timeout, stream=False)).state

    def result(self, timeout: float | None = None, *, stream: bool = False) -> Any:
        """Rank 0's return value (None for a file); raises RemoteError / JobFailed, or
        TimeoutError when the job is still running after `timeout` seconds. `stream`: rank 0's
        output and a state line while it waits (what `Distributor.run` shows)."""
        if self._outcome is None:
            if self._json_only and self.answer != "json" and self.kind == "function":
                raise SpecError(f"job {self.job_id} was submitted without answer='json': its answer is pickled, "
                                "and answer='json' unpickles nothing",
                                tip="attach without answer= to unpickle it (code from the job then runs here as you)")
            status = self._wait(timeout, stream)
            try:
                self._outcome = (True, self._collect(status))
            except JobFailed as exc:
                self._outcome = (False, exc)
            ok, value = self._outcome
            self._succeeded = status if ok else None
            close_run_folder(self.workdir, ok, "" if ok else str(value))
        ok, value = self._outcome
        if not ok:
            raise value
        return value

    def logs(self, rank: int | None = None, stream: str = "both", *, node: int | None = None) -> str:
        """What rank `rank` (default 0) printed so far: stream "out", "err" or "both" (out, then err).

        Under torchrun each node writes one log holding all its ranks, and torchrun, not
        Slurm, decides which node holds which rank: ask by `node=` (default node 0) on
        more than one node; `rank=` then raises SpecError. A local_mode run keeps its logs
        in its run folder: kept for the newest runs (runfolder.KEEP_RUNS) once ended. A log over
        64 MiB gives its last 64 MiB (readback.LOG_LINES).
        """
        if stream not in ("out", "err", "both"):
            raise SpecError(f"stream must be 'out', 'err' or 'both', got {stream!r}")
        if rank is not None and not 0 <= rank < self.ntasks:
            raise SpecError(f"rank {rank} is not in this job (ranks 0..{self.ntasks - 1})")
        out, err = self._handle.log_paths(rank, node)
        chosen = {"out": [out], "err": [err], "both": [out, err]}[stream]
        return "".join(readback.text_or_empty(p, readback.LOG_LINES) for p in chosen)

    def cancel(self) -> None:
        """Cancel the job (scancel, or signal the local mpirun); a finished job is left alone."""
        if self._succeeded is None and not self._handle.status().done:
            self._handle.cancel()

    def cancel_on_interrupt(self) -> str:
        """Ctrl-C while `Distributor.run` waited: the job cancelled, and the one line that says
        so (or why it was not)."""
        try:
            # Asked afresh: the shared watch's answer may be a poll old (PENDING while rank 0 prints).
            self._handle.done_waiting()
            state = (self._succeeded or self._handle.status()).state.lower()
            self.cancel()
        except Exception as exc:  # noqa: BLE001 - one line, whatever stopped the cancel
            why = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            return f"job {self.job_id} was not cancelled: {why}"
        return f"job {self.job_id} cancelled: Ctrl-C during run() (it was {state})"

    # -- internals

    def _cancel_quietly(self) -> None:
        try:
            self.cancel()
        except Exception:  # noqa: BLE001 - the interrupt that got us here matters more
            pass

    def _wait(self, timeout: float | None, stream: bool) -> JobStatus:
        return handles.wait(self._handle, timeout, stream, say)

    def _collect(self, status: JobStatus) -> Any:
        """Turn the ended job's files into rank 0's value, a RemoteError or a JobFailed.

        A job that COMPLETED with exit 0 succeeded, whatever error files the folder holds:
        a requeued job (a `requeue: true` preset, preemption) runs again in the same
        folder, where an earlier run's error-rank-*.json and *.err stay; within one run a
        rank that raises always makes the job's exit non-zero. So the result comes first,
        and a failure is told from the latest run's reports (`_raise_failure`).
        """
        exit_code = status.exit_code
        if status.state != "COMPLETED" or exit_code:
            self._raise_failure(status)
        if self.kind != "function":
            self._drop_pickles()
            return None
        value = self._read_json(status) if self.answer == "json" else self._unpickle(status)
        self._drop_pickles()
        return value

    def _unpickle(self, status: JobStatus) -> Any:
        """Rank 0's value from result.pkl: unpickling it runs whatever code it names."""
        path = self.workdir / runfn.RESULT
        data = self._result_bytes(path, status)
        import cloudpickle  # lazy: an optional extra (slurmtorch[api]) that a file's run never needs

        try:
            return cloudpickle.loads(data)
        except Exception as exc:  # noqa: BLE001 - e.g. a class this process cannot import
            raise SlurmtorchError(f"cannot load rank 0's result of job {self.job_id} ({path}): "
                                  f"{type(exc).__name__}: {exc}",
                                  tip="return plain data (numbers, lists, dicts, tensors, state_dicts)") from None

    def _read_json(self, status: JobStatus) -> Any:
        """Rank 0's value from result.json (answer="json"): plain data, read bounded."""
        path = self.workdir / runfn.RESULT_JSON
        data = self._result_bytes(path, status, JSON_CAP)
        try:
            return json.loads(data)
        except ValueError as exc:
            raise SlurmtorchError(f"rank 0's result of job {self.job_id} ({path}) is not JSON: {exc}") from None

    def _result_bytes(self, path: Path, status: JobStatus, cap: int | None = None) -> bytes:
        """The result file's bytes (at most `cap`, from a plain file); one clear error where
        it is missing: read already, or never written."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            if (self.workdir / ENDED).exists():
                raise SlurmtorchError(f"job {self.job_id} completed, and its result was read already by the Job "
                                      "that waited for it (the run folder keeps the logs, not the result)",
                                      tip="keep the value where result() returned it") from None
            raise JobFailed(f"job {self.job_id} completed but rank 0 left no result in {self.workdir}",
                            tip=self._handle.log_tip(), job_id=self.job_id, state=status.state,
                            job_exit_code=status.exit_code) from None
        except OSError as exc:
            raise SlurmtorchError(f"cannot read rank 0's result of job {self.job_id} ({path}): "
                                  f"{exc.strerror or exc}") from None
        with os.fdopen(fd, "rb") as f:
            data = f.read() if cap is None else f.read(cap + 1)
        if cap is not None and len(data) > cap:
            raise SlurmtorchError(f"rank 0's result of job {self.job_id} ({path}) is over {cap >> 20} MiB of JSON",
                                  tip="return a small summary; write large outputs to files the job keeps")
        return data

    def _raise_failure(self, status: JobStatus) -> None:
        """The ended job's failure, as `--wait` tells it (`failures`, through the handle):
        the rank that failed first. It raised: RemoteError with its traceback; it died
        (a signal, an early exit) or the job ended otherwise: JobFailed naming it."""
        self._drop_pickles()
        exit_code = status.exit_code
        found = self._handle.failures()
        first = next((f for f in found if f.primary), None)
        errors = self._reported_errors()
        if first is not None:
            error = errors.get(first.rank) or self._logged_failure(first.rank)
        else:  # no cause told apart from its consequences: the earliest report
            error = min(errors.values(), key=lambda e: e[4], default=None) or self._logged_failure()
        if error is not None:
            rank, host, text, exc_type = error[:4]
            raise RemoteError(rank, host, text, job_id=self.job_id, exc_type=exc_type, state=status.state,
                              job_exit_code=exit_code, report=tuple(self._handle.report()))
        if status.state.startswith("CANCELLED"):
            word = "was cancelled"
        elif status.state == "ENDED":  # known only from its folder, and no exit-code in it
            word = "ended without recording an exit code (cancelled, timed out or lost with its node?)"
        else:
            word = f"ended {status.state}"
        code = "" if exit_code is None else f" (exit {exit_code})"
        if first is not None and first.code is not None and exit_code:  # as --wait says it: the rank's own
            step = f"; the step exited {exit_code}" if exit_code != first.code else ""
            code = f" (exit {first.code} from rank {first.rank}{step})"
        # What --wait would say; of a cancelled job, whose ranks were ended, nothing of theirs.
        told = self._handle.report() if not status.state.startswith("CANCELLED") else []
        line = "; ".join(told) or self._handle.headline()
        raise JobFailed(f"job {self.job_id} {word}{code}" + (f": {line}" if line else ""),
                        tip=self._handle.log_tip(), job_id=self.job_id, state=status.state, job_exit_code=exit_code,
                        rank=first.rank if first else None, host=first.host if first else "")

    def _reported_errors(self) -> dict[int, tuple[int, str, str, str, tuple]]:
        """The errors the ranks wrote in the latest run, by rank, each with its (time, rank)
        to order them: a requeued job's earlier runs (a lower SLURM_RESTART_COUNT, recorded
        as `restart`) are history. A rerun that failed without reporting shows the earlier
        run's errors: the best account left."""
        records = []
        for path in self.workdir.glob(f"{runfn.ERROR_PREFIX}*.json"):
            try:
                r = json.loads(readback.read_text(path, readback.RECORD) or "")
                records.append((int(r.get("restart", 0)), int(r["rank"]), str(r["host"]), str(r["traceback"]),
                                str(r.get("exc_type", "")), float(r.get("time", 0))))
            except (readback.NotRead, ValueError, TypeError, KeyError, AttributeError, OverflowError):
                continue  # not a report runfn wrote
        if not records:
            return {}
        latest = max(r[0] for r in records)
        return {rank: (rank, host, text, exc_type, (at, rank))
                for restart, rank, host, text, exc_type, at in records if restart == latest}

    def _logged_failure(self, rank: int | None = None) -> tuple[int, str, str, str] | None:
        return handles.logged_failure(self._handle, rank)

    def _drop_pickles(self) -> None:
        """Payload and result can be large, and a result is read once; the small files (meta,
        errors, local logs) stay."""
        for name in (runfn.PAYLOAD, runfn.RESULT, runfn.RESULT_JSON):
            try:
                (self.workdir / name).unlink()
            except FileNotFoundError:
                pass


def _attached(job_id: str) -> Job:
    """`Job.attach` here: the job's handle, its run folder and what was called (`handles.attach`)."""
    handle, workdir, meta, record = handles.attach(job_id)
    name = str(meta.get("name") or Path(str(meta.get("script", ""))).name)
    answer = "json" if meta.get("answer") == "json" else "pickle"
    return Job(handle, workdir, str(meta.get("kind", "function")), name, int(record.get("ntasks", 1)), answer)


def say(text: str) -> None:
    """A progress line on stderr, as the CLI prints them."""
    print(f"slurmtorch: {text}", file=sys.stderr, flush=True)


def stopped(line: str) -> BaseException:
    """What Ctrl-C during `Distributor.run()` ends with, once the job is cancelled: `line` on
    stderr, then SystemExit(130), so a script ends as `sbatch --wait` does, in that one line
    and no traceback; in an interactive session (a REPL, a notebook), where ending the
    process is not what Ctrl-C means, KeyboardInterrupt."""
    say(line)
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", None) if ipython is not None else None
    if hasattr(sys, "ps1") or sys.flags.interactive or (shell is not None and shell() is not None):
        return KeyboardInterrupt(line)
    return SystemExit(130)
