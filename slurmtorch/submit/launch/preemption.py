"""Preemption: the signal Slurm sends the ranks before the time limit, and requeueing.

`--signal [R:]SIG[@SECONDS]` (or the preset's `signal`) implies `--requeue`; the ranks'
handler (`slurmtorch.bootstrap.preempt.install`) reads the signal and the requeue choice from
the environment the batch script exports.
"""

from __future__ import annotations

import re
from typing import Any

from slurmtorch import protocol
from slurmtorch.errors import SpecError
from slurmtorch.submit.sites.model import parse_time
from slurmtorch.options import Options

# Signals a rank can catch and survive by default action (KILL/STOP cannot be caught).
# Not TERM: scancel and the time limit send TERM to every task too, so a handler that
# requeues on TERM turns each cancel into a requeue and the job can never be cancelled.
PREEMPT_SIGNALS = ("USR1", "USR2", "INT", "HUP", "QUIT", "ALRM", "URG", "XCPU", "PWR")
# Slurm's own lead time for `--signal SIG` without @SECONDS (sbatch(1)).
DEFAULT_WARNING_S = 60
_SIGNAL_RE = r"^(?:(?P<flags>[A-Z]+):)?(?P<sig>[A-Za-z0-9]+)(?:@(?P<time>[0-9]+))?$"  # compiled on first use (re's cache): most jobs never need it


def resolve_preemption(o: Options, preset: dict[str, Any]) -> tuple[str | None, bool]:
    """(signal as Slurm reads it, e.g. USR1@60, requeue) from --signal/--requeue, else the
    preset's; checked for every kind, applied to batch jobs only (None, False otherwise)."""
    signal = o.pick(preset, "signal")
    if signal is not None:
        signal = parse_signal(signal, "--signal" if o.signal is not None else f"preset {o.preset or 'default'!r} signal")
    requeue = o.pick(preset, "requeue")
    requeue = bool(signal) if requeue is None else bool(requeue)
    if o.kind != "sbatch":
        return None, False
    return signal, requeue


def preempt_env(signal: str | None, requeue: bool) -> tuple[tuple[str, str], ...]:
    """What the ranks' handler reads: the bare signal name and whether to requeue."""
    if not signal:
        return ()
    return ((protocol.PREEMPT_SIGNAL, signal.split("@", 1)[0].rsplit(":", 1)[-1]),
            (protocol.PREEMPT_REQUEUE, "1" if requeue else "0"))


def parse_signal(text: str, what: str = "--signal") -> str:
    """Check `--signal [R:]SIG[@SECONDS]` and normalise it to Slurm's form (`USR1@60`).

    `B:` (only the batch shell) is refused: slurmtorch's handler runs in the ranks,
    and a bare batch shell dies of SIGUSR1.
    """
    m = re.match(_SIGNAL_RE, str(text).strip())
    tip = f"e.g. --signal USR1@60 (signals: {', '.join(PREEMPT_SIGNALS)}; @ seconds before the time limit)"
    if not m:
        raise SpecError(f"invalid {what} {text!r}", tip=tip)
    flags, sig, when = m.group("flags"), m.group("sig").upper(), m.group("time")
    if flags is not None and flags != "R":
        raise SpecError(f"{what} {text!r}: only the R: flag is supported",
                        tip="B: would signal only the batch shell, not the ranks that run the hooks")
    sig = sig[3:] if sig.startswith("SIG") else sig
    if sig == "TERM":
        raise SpecError(f"{what} {text!r}: scancel sends TERM too, so cancelling the job would requeue it",
                        tip="use --signal USR1@SECONDS (or USR2) for preemption warnings")
    if sig == protocol.STACKS_SIGNAL:
        raise SpecError(f"{what} {text!r}: {sig} is how `slurmtorch stacks` asks the ranks for their stacks", tip=tip)
    if sig not in PREEMPT_SIGNALS:
        raise SpecError(f"{what} {text!r}: {sig} cannot be used for preemption", tip=tip)
    if when is not None and int(when) > 65535:
        raise SpecError(f"{what} {text!r}: at most 65535 seconds before the time limit", tip=tip)
    return f"{'R:' if flags else ''}{sig}{'@' + str(int(when)) if when is not None else ''}"


def check_warning_time(signal: str | None, time: str | None) -> None:
    """A warning due before the job starts (`--signal USR1@60 --time 1`) preempts at once."""
    if not signal or time is None:
        return
    lead = int(signal.split("@", 1)[1]) if "@" in signal else DEFAULT_WARNING_S
    seconds = parse_time(time)
    if lead >= seconds:
        raise SpecError(f"--signal {signal!r} would come {lead} s before the end of a {seconds:.0f} s job, "
                        "that is at its start",
                        tip=f"give the job more --time, or warn fewer seconds before its end (@{int(seconds) // 2})")

