"""The outcome of a Distributor's call: the cluster side's answer (`serve.answer`) as one
line, and its reading on the laptop (`distribute`): the value, or the error raised there,
raised here.

A value travels as JSON wherever it can: every question's answer but `result` is plain
data (a state, a log's text, a job id), and so is rank 0's value of a job submitted with
`answer="json"`. Only a default `result` travels pickled, and the laptop unpickles one only
where it asked for a pickle: unpickling runs whatever code the bytes name, so a pickle it
did not ask for is refused, never loaded. An error travels as plain data always: its type
(among the few a call raises), message, tip and fields, rebuilt here.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from slurmtorch import __version__
from slurmtorch import errors
from slurmtorch.errors import ClusterError, JobFailed, RemoteError, SlurmtorchError

# The SlurmtorchError kinds rebuilt by name; any other is rebuilt as the nearest of these.
_KINDS = {c.__name__: c for c in (errors.SlurmtorchError, errors.SpecError, errors.ShellSafetyError,
                                  errors.SubmitError, errors.ClusterError, errors.SiteError,
                                  errors.TemplateError, errors.BootstrapError)}


def line(ok: bool, value: Any, pickled: bool = False) -> bytes:
    """The answer line: the value as JSON (pickled only where `pickled`: a default result), or
    the error as plain data."""
    answer: dict[str, Any] = {"ok": ok, "version": __version__}
    if not ok:
        answer["error"] = error_record(value)
    elif pickled:
        import cloudpickle  # lazy: an optional extra (slurmtorch[api]), as for a local run

        answer["pickle"] = base64.b64encode(cloudpickle.dumps(value)).decode()
    else:
        answer["json"] = value
    return json.dumps(answer).encode() + b"\n"


def read(out: bytes, code: int, name: str, pickled: bool = False) -> Any:
    """The value the last line of `out` carries, or the error it carries raised; a pickle
    only where `pickled` (a default result), else refused unread."""
    lines = out.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ClusterError(f"cluster {name} gave no answer to the call (exit {code})", tip="its lines above say why")
    if answer.get("ok") is not True:
        raise error_from(answer.get("error"))
    if "json" in answer:
        return answer["json"]
    if "pickle" in answer and pickled:
        import cloudpickle  # lazy: as in `line`

        return cloudpickle.loads(base64.b64decode(answer["pickle"]))
    raise ClusterError(f"cluster {name} answered with a pickle, and answer='json' unpickles nothing",
                       tip="the job was submitted without answer='json'; nothing of its answer was loaded here")


def error_record(exc: BaseException) -> dict[str, Any]:
    """An error as plain data: its kind, message, tip and the fields `error_from` rebuilds."""
    record: dict[str, Any] = {"type": type(exc).__name__, "message": getattr(exc, "message", None) or str(exc),
                              "tip": getattr(exc, "tip", None), "exit_code": getattr(exc, "exit_code", None)}
    if isinstance(exc, RemoteError):
        record.update(type="RemoteError", rank=exc.rank, host=exc.host, traceback_text=exc.traceback_text,
                      exc_type=exc.exc_type, report=list(exc.report))
    elif isinstance(exc, JobFailed):
        record.update(type="JobFailed", rank=exc.rank, host=exc.host)
    elif isinstance(exc, SlurmtorchError):
        record["type"] = next((c.__name__ for c in type(exc).__mro__ if c.__name__ in _KINDS), "SlurmtorchError")
    if isinstance(exc, JobFailed):
        record.update(job_id=exc.job_id, state=exc.state, job_exit_code=exc.job_exit_code)
    return record


def error_from(record: Any) -> BaseException:
    """The error a record describes, rebuilt from plain values (whatever the cluster sent:
    a field of the wrong type is left out, never a crash here)."""
    rec = record if isinstance(record, dict) else {}
    kind, message, tip = _text(rec, "type"), _text(rec, "message"), _text(rec, "tip") or None
    job_id, state, job_exit_code = _text(rec, "job_id"), _text(rec, "state"), _number(rec, "job_exit_code")
    exc: BaseException
    if kind == "RemoteError":
        report = rec.get("report")
        exc = RemoteError(_number(rec, "rank") or 0, _text(rec, "host"), _text(rec, "traceback_text"),
                          job_id=job_id, exc_type=_text(rec, "exc_type"), state=state, job_exit_code=job_exit_code,
                          report=tuple(str(r) for r in report) if isinstance(report, list) else ())
    elif kind == "JobFailed":
        exc = JobFailed(message, tip, job_id=job_id, state=state, job_exit_code=job_exit_code,
                        rank=_number(rec, "rank"), host=_text(rec, "host"))
    elif kind in ("TimeoutError", "KeyboardInterrupt"):
        exc = TimeoutError(message) if kind == "TimeoutError" else KeyboardInterrupt(message)
    else:
        exc = _KINDS.get(kind, SlurmtorchError)(message or "the cluster side failed without saying why", tip)
    code = _number(rec, "exit_code")
    if isinstance(exc, SlurmtorchError) and code is not None and 0 < code < 256:
        exc.exit_code = code
    return exc


def _text(rec: dict, key: str) -> str:
    value = rec.get(key)
    return value if isinstance(value, str) else ""


def _number(rec: dict, key: str) -> int | None:
    value = rec.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
