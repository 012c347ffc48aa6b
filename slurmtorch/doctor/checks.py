"""The doctor's report: one `Check` per line, ok | warn | fail, with the fix for anything not ok.

Every check, on a node or across an allocation, returns these lines; the verb (and rank 0
of the allocation check) prints them and a summary, and exits 1 when any failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    status: str  # ok | warn | fail
    what: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status:<4}  {self.what}"
        if self.fix and self.status != OK:
            text += f"  (fix: {self.fix})"
        return text


def any_failed(checks: Sequence[Check]) -> bool:
    return any(c.status == FAIL for c in checks)


def summary(checks: Sequence[Check]) -> str:
    counts = {s: sum(c.status == s for c in checks) for s in (OK, WARN, FAIL)}
    return f"doctor: {counts[OK]} ok, {counts[WARN]} warn, {counts[FAIL]} fail"
