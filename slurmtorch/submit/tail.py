"""Following a job's logs as they grow: what was appended since the last look.

The ranks write their logs on a shared file system while `--wait`, `logs --follow` and
a Distributor's job stream them here; a write may end in the middle of a UTF-8 character.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO


class Tail:
    """Copies what was appended to a file since the last call."""

    def __init__(self, path: Path, out: IO[str]):
        self.path = path
        self.out = out
        self.offset = 0

    def pump(self) -> bool:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return False
        if not data:
            return False
        # Hold back an incomplete UTF-8 sequence at the end until the rest arrives.
        cut = len(data)
        for back in range(1, min(4, len(data)) + 1):
            b = data[-back]
            if b & 0xC0 == 0xC0:
                need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4
                if back < need:
                    cut = len(data) - back
                break
            if b & 0x80 == 0:
                break
        self.offset += cut
        self.out.write(data[:cut].decode("utf-8", errors="replace"))
        self.out.flush()
        return True


def drain(tails: Sequence[Tail]) -> None:
    """Output written just before the end may land a moment after the state changed:
    pump until the files stay quiet for a few polls (at most ~1 s)."""
    quiet = 0
    for _ in range(20):
        quiet = 0 if any([t.pump() for t in tails]) else quiet + 1
        if quiet >= 3:
            break
        time.sleep(0.05)
