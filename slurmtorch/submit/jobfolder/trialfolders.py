"""A sweep's or array's trial folders below the submission folder's `trials/`: the name each
trial's folder gets, and whether a folder is one (the snapshot leaves them out of later jobs).
A job-folder layout fact, so both the launch (which names them) and the snapshot read it here."""

from __future__ import annotations

import re


_FOLDER_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-")
MAX_FOLDER_NAME = 120


def trial_folder(trial: int, params: tuple[tuple[str, str], ...]) -> str:
    """A trial's working folder, below the one the job was submitted from (`trials/` + this):
    named by its parameters (`lr=1e-3,bs=32`), so that a resubmission of the same trial finds
    its checkpoint and a trial with other parameters never does; `trial-K` for a plain array.
    A character a file name should not hold is written %XX; a name too long for one, by its
    parameters' hash (pure)."""
    if not params:
        return f"trial-{int(trial)}"
    name = ",".join(f"{_escaped(n)}={_escaped(v)}" for n, v in params)
    if len(name.encode()) <= MAX_FOLDER_NAME and not name.startswith("."):
        return name
    import hashlib  # lazy: only a sweep with long values needs it

    digest = hashlib.sha256("\0".join(f"{n}={v}" for n, v in params).encode("utf-8", "surrogateescape")).hexdigest()
    return f"params-{digest[:16]}"


# Every name trial_folder gives: `trial-K`, `params-<hash>`, or NAME=VALUE pairs of escaped characters.
_ESCAPED = r"[A-Za-z0-9._+%-]"
_TRIAL_FOLDER = re.compile(rf"trial-[0-9]+|params-[0-9a-f]{{16}}|{_ESCAPED}+={_ESCAPED}*(?:,{_ESCAPED}+={_ESCAPED}*)*")


def is_trial_folder(name: str) -> bool:
    """Whether `name` (a folder below a `trials/`) is one `trial_folder` makes (pure)."""
    return _TRIAL_FOLDER.fullmatch(name) is not None


def _escaped(text: str) -> str:
    return "".join(c if c in _FOLDER_SAFE else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogateescape"))
                   for c in text)
