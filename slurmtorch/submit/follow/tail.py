"""Following a job's logs as they grow: what was appended since the last look.

The ranks write their logs on a shared file system while `--wait`, `logs --follow` and
a Distributor's job stream them here; a write may end in the middle of a UTF-8 character.
A log is read as readback reads what a job wrote (a plain file only; a FIFO or a link there
is one line saying so) and copied a chunk at a time, however large it grew. What a rank
printed reaches the user's terminal only through `terminaltext`: each line in its final
state (a progress bar's redraws applied), its control characters written out. On a
terminal, the line a bar is still redrawing is shown live, drawn over by us with `\r`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from slurmtorch import readback
from slurmtorch.submit.follow.statusline import is_terminal
from slurmtorch.submit.jobfolder.terminaltext import Redraws, visible

_CLEAR = "\r\x1b[K"  # ours: the live line taken away


class Tail:
    """Copies what was appended to a file since the last call, as `terminaltext` shows it;
    `finish` writes what is left at the end (a last line without its newline).

    `line` (a statusline.StatusLine) is told before and after each write, so that a live
    status line on the same terminal steps aside for the job's output.
    """

    def __init__(self, path: Path, out: IO[str], line=None):
        self.path = path
        self.out = out
        self.offset = 0
        self.line = line
        self.refused = ""  # why the file is not read, once said
        self.redraws = Redraws()
        self.live = is_terminal(out)  # show the line a bar is redrawing
        self.shown = ""  # the live line on the terminal now

    def pump(self) -> bool:
        """Copy what the file holds past `offset` now, a chunk at a time; whether anything came."""
        try:
            f = readback.open_plain(self.path)
        except FileNotFoundError:
            return False
        except readback.NotRead as why:
            self._refuse(str(why))
            return False
        wrote = False
        with f:
            end = os.fstat(f.fileno()).st_size
            while self.offset < end:
                f.seek(self.offset)
                taken = self._copy(f.read(min(readback.CHUNK, end - self.offset)))
                if not taken:
                    break
                wrote = True
        return wrote

    def _refuse(self, why: str) -> None:
        if why != self.refused:
            self.refused = why
            if self.line is not None:
                self.line.before_output()
            print(visible(f"slurmtorch: {self.path}: {why}, not read"), file=sys.stderr, flush=True)

    def _copy(self, data: bytes) -> int:
        """Write `data` (less an unfinished UTF-8 character at its end); the bytes taken."""
        if not data:
            return 0
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
        if not cut:
            return 0
        self.offset += cut
        done = self.redraws.feed(data[:cut].decode("utf-8", errors="replace"))
        self._show(done, self.redraws.live() if self.live else "")
        return cut

    def finish(self) -> None:
        """The end of the stream: every line still open, in its final state."""
        self._show(self.redraws.finish(), "")

    def _show(self, done: str, live: str) -> None:
        if not done and live == self.shown:
            return
        text = (_CLEAR if self.shown else "") + done + live
        if self.line is not None:
            self.line.before_output()
        self.out.write(text)
        self.out.flush()
        self.shown = live
        if self.line is not None:
            self.line.after_output(text, self.out)


def last_lines_offset(path: Path, lines: int, chunk: int = 1 << 16) -> int:
    """Where the last `lines` lines of a file start (its size: none; 0: all of it), read
    backwards a chunk at a time and at most readback.LOG_LINES back, so a long log is not
    read whole (nor a 10 GiB line)."""
    try:
        with readback.open_plain(path) as f:
            end = f.seek(0, 2)
            if lines <= 0:
                return end
            pos, seen, floor = end, 0, max(0, end - readback.LOG_LINES)
            if end and (f.seek(end - 1), f.read(1))[1] == b"\n":
                seen = -1  # the last line's own newline ends it, not another line
            while pos > floor:
                start = max(floor, pos - chunk)
                f.seek(start)
                data = f.read(pos - start)
                for i in range(len(data) - 1, -1, -1):
                    if data[i] == 0x0A:
                        seen += 1
                        if seen == lines:
                            return start + i + 1
                pos = start
            return floor
    except (OSError, readback.NotRead):
        return 0


class Prefixed:
    """A stream whose every line starts with `prefix`: one job array's trials, streamed to
    one terminal, each line saying whose it is (a line a progress bar redraws after `\r` too)."""

    def __init__(self, out: IO[str], prefix: str):
        self.out = out
        self.prefix = prefix
        self.at_start = True

    def write(self, text: str) -> int:
        pieces = []
        for piece in text.splitlines(keepends=True):
            if self.at_start:
                pieces.append(self.prefix)
            pieces.append(piece)
            self.at_start = piece.endswith(("\n", "\r"))
        return self.out.write("".join(pieces))

    def flush(self) -> None:
        self.out.flush()

    def isatty(self) -> bool:
        return self.out.isatty()


def drain(tails: Sequence[Tail]) -> None:
    """Output written just before the end may land a moment after the state changed:
    pump until the files stay quiet for a few polls (at most ~1 s), then finish each."""
    quiet = 0
    for _ in range(20):
        quiet = 0 if any([t.pump() for t in tails]) else quiet + 1
        if quiet >= 3:
            break
        time.sleep(0.05)
    for t in tails:
        t.finish()
