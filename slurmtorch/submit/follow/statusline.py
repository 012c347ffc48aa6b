"""A waiting job's state for the person waiting: one live line on a terminal, plain lines elsewhere.

On a terminal (`job 12: PENDING (Priority) 0:42`, then `job 12: RUNNING on node[1-4] 3:10`)
the line is redrawn in place every second and cleared before the job's own output is
written, then drawn again under it. Anywhere else (a pipe, a file, CI) a line is printed
only when the state, reason or nodes change, never a carriage return or escape sequence.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import IO

from slurmtorch.submit.jobfolder.jobstatus import JobStatus
from slurmtorch.submit.jobfolder.terminaltext import visible

_CLEAR = "\r\x1b[K"


def is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


class StatusLine:
    """Shows `job N: <state>` on `stream` (stderr): live on a terminal, a line per change elsewhere."""

    def __init__(self, stream: IO[str], job_id: str, live: bool | None = None, prefix: str = ""):
        self.stream = stream
        self.job_id = job_id
        self.prefix = prefix  # `slurmtorch: ` where the lines share a stream with a program's own
        self.live = is_terminal(stream) if live is None else live
        self._drawn = ""  # the text on screen now (live), '' when cleared
        self._plain = ""  # the last plain line printed
        self._at_line_start = True  # whether the job's output last ended a line

    def show(self, status: JobStatus, now: float | None = None) -> None:
        """The job's state: with its elapsed time on a terminal, without it on a plain line."""
        if not status.done:
            self.say(status.describe(now), status.describe(elapsed=False))

    def say(self, live_text: str, plain_text: str) -> None:
        """`live_text` redrawn in place on a terminal; elsewhere `plain_text`, once per change."""
        if self.live:
            text = visible(f"{self.prefix}job {self.job_id}: {live_text}")
            if self._at_line_start and text != self._drawn:
                self.stream.write(_CLEAR + text)
                self.stream.flush()
                self._drawn = text
        elif plain_text != self._plain:
            self._plain = plain_text
            self.stream.write(visible(f"{self.prefix}job {self.job_id}: {plain_text}") + "\n")
            self.stream.flush()

    def before_output(self) -> None:
        """The job's output is about to be written: take the live line away first."""
        if self._drawn:
            self.stream.write(_CLEAR)
            self.stream.flush()
            self._drawn = ""

    def after_output(self, text: str, stream: IO[str]) -> None:
        """What was just written to `stream`: on a terminal, the live line comes back only
        under a finished line (a progress bar redrawing its own line keeps it)."""
        if text and is_terminal(stream):
            self._at_line_start = text.endswith("\n")

    def saying(self, say: Callable[[str], None]) -> Callable[[str], None]:
        """`say`, the live line taken away first: for lines said between the job's output."""
        def said(text: str) -> None:
            self.before_output()
            say(text)
        return said

    def close(self) -> None:
        self.before_output()

