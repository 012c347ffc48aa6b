"""The one way the login node's edge runs a program and waits for it: `run`, whose failure
is a SubmitError carrying argv, exit code, stdout and stderr (said as one line). Each
program family's module calls it (or a test's fake with the same signature: `Runner`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence

from slurmtorch.errors import SubmitError

Runner = Callable[..., subprocess.CompletedProcess]


def run(argv: Sequence[str], *, timeout: float = 60, check: bool = True, cwd: str | None = None,
        env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run one scheduler command (in `cwd`, with `env`: else ours); failures become a
    SubmitError carrying argv and output."""
    argv = [str(a) for a in argv]
    try:
        # A session of its own: a TERM/HUP/Ctrl-C meant for us (our process group) must
        # not kill sbatch mid-call, after the job exists but before we know its id. What a
        # program prints that is not UTF-8 (a node's or job's name in Latin-1) reads as U+FFFD.
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout,
                              start_new_session=True, cwd=cwd, env=None if env is None else dict(env))
    except FileNotFoundError:
        raise SubmitError(f"{argv[0]} not found on PATH", tip=not_found_tip(argv[0]), argv=argv) from None
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


def not_found_tip(program: str) -> str:
    """What to do without Slurm here (pure): reach a login node through `--cluster NAME`
    (the clusters file names it); only a submission (sbatch) also has `--dry-run`, which the
    verbs that ask the scheduler (status, logs, cancel, stacks, top) do not."""
    through = "run this on a Slurm login node, or reach one from here with --cluster NAME (~/.config/slurmtorch/clusters.yaml)"
    return f"{through}; --dry-run only prints the script" if program == "sbatch" else through


def _text(data) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data
