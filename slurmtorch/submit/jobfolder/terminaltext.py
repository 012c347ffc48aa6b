"""What a job printed, as a careful terminal user wants to see it: its control characters
written out (`visible`), never obeyed, and its progress bars' redraws applied (`Redraws`).

A rank's output is data: an escape sequence in it (a title change, OSC 52 writing the
clipboard, a clear-screen, a cursor move that hides the lines above) would act on the
user's terminal. So nothing a job wrote reaches the terminal as it was but its newlines and
tabs. What a progress bar means by its carriage returns, cursor-ups (`ESC[A`: tqdm's nested
bars) and line erases (`ESC[K`) is applied instead, to the job's own lines only: each line
is shown in its final state, as a terminal would have left it, rather than as a thousand
redraws or as `\\x1b[A`. Colours (SGR, `ESC[...m`) are dropped, their text kept; any other
sequence or control character is written out (`\\x1b]0;title\\x07`, `\\x08`). What is drawn
on the terminal besides (the line a bar is redrawing, shown live while following a job) the
waiter draws itself.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, and the C1 controls (U+0080..U+009F: U+009B is CSI to some terminals).
_CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# One piece of a job's output: a CSI sequence (its parameters and final byte), an OSC one
# (to BEL or ST), another escape, one control character, or a run of plain text.
_TOKEN_RE = re.compile(r"\x1b\[(?P<params>[0-?]*)[ -/]*(?P<final>[@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?"
                       r"|[\x00-\x1f\x7f-\x9f]|[^\x00-\x1f\x7f-\x9f]+", re.S)
# A sequence the end of a chunk cut short: kept until the rest arrives.
_UNFINISHED_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*)?$")
_HELD = 256  # a longer unfinished sequence is no sequence: written out


def visible(text: str) -> str:
    """`text` with every control character a terminal would act on written out as `\\xHH`."""
    return _CONTROL_RE.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


def final_text(text: str) -> str:
    """A whole text (a log's end) with its redraws applied: each line in its final state."""
    redraws = Redraws()
    return redraws.feed(text) + redraws.finish()


class _Line:
    """A line still open to redraws: its characters, whether any were drawn over, and whether a
    cursor-up made it (it stands for a line shown already: left out if nothing is written on it)."""

    def __init__(self, made_by_cursor: bool = False) -> None:
        self.cells: list[str] = []
        self.redrawn = self.made_by_cursor = made_by_cursor

    def text(self) -> str:
        text = "".join(self.cells)
        return text.rstrip(" ") if self.redrawn else text  # a bar pads with blanks what it drew over


class Redraws:
    """One stream's output, fed as it arrives: `feed` returns the lines that are final (each
    with its newline), `live` the line the cursor is on, `finish` what is left at the end.

    A line is final once the cursor is below it and out of the stream's reach: the farthest
    a cursor-up of this stream has gone (0 for a log without one, whose lines are then shown
    as soon as they end), at most REACH lines. So a stream's first cursor-up may come after
    the line it goes back to was shown (tqdm writes its first inner bar's newline and its
    cursor-up apart): it then starts a new line, and the shown one stays as it was.
    """

    REACH = 32  # tqdm moves up one line per nested bar
    WIDTH = 1 << 16  # a longer line is cut here, as a terminal wraps it: what is held stays small

    def __init__(self) -> None:
        self.lines = [_Line()]  # open lines, top first
        self.row = self.col = 0  # the cursor, in `lines`
        self.reach = 0
        self.held = ""
        self.done: list[str] = []

    def feed(self, text: str) -> str:
        text, self.held = self.held + text, ""
        cut = _UNFINISHED_RE.search(text)
        if cut and len(cut[0]) < _HELD:
            text, self.held = text[:cut.start()], cut[0]
        for token in _TOKEN_RE.finditer(text):
            self._apply(token)
        self._close(self.row - self.reach)
        done, self.done = "".join(self.done), []
        return done

    def live(self) -> str:
        """The line the cursor is on, as it stands ('' when empty)."""
        return self.lines[self.row].text()

    def finish(self) -> str:
        """Every line still open (the last without a newline, if it had none); a new start after."""
        self._write(visible(self.held))
        self.held = ""
        on_last = self.row == len(self.lines) - 1
        last = self.lines.pop().text()  # '' after a text's last newline
        self._close(len(self.lines))
        done, self.done = "".join(self.done) + last + ("" if on_last or not last else "\n"), []
        self.lines, self.row, self.col = [_Line()], 0, 0
        return done

    def _apply(self, token: re.Match) -> None:
        text, final = token[0], token["final"]
        if text == "\n":
            self._down(1)
            self.col = 0
        elif text == "\r":
            self.col = 0
            self.lines[self.row].redrawn = True
        elif final and final in "ABK" and re.fullmatch(r"[0-9]{0,4}", token["params"]):
            self._move(final, int(token["params"] or (0 if final == "K" else 1)))
        elif final == "m":
            pass  # a colour: its text is kept, plain
        else:
            self._write(visible(text))

    def _move(self, final: str, n: int) -> None:
        line = self.lines[self.row]
        if final == "A":  # up, to a line still open; above those, a new one (theirs were shown already)
            n = min(self.REACH, n)
            self.reach = max(self.reach, n)
            self.lines[:0] = [_Line(made_by_cursor=True) for _ in range(max(0, n - self.row))]
            self.row = max(0, self.row - n)
        elif final == "B":
            self._down(min(n, self.REACH))
        elif n == 0:  # K: erase to the line's end, from its start (1), or all of it (2)
            del line.cells[self.col:]
        elif n == 1:
            line.cells[:self.col + 1] = " " * min(self.col + 1, len(line.cells))
        elif n == 2:
            line.cells.clear()
        line.redrawn = True

    def _down(self, n: int) -> None:
        self.row += n
        while self.row >= len(self.lines):
            self.lines.append(_Line())
        self.lines[self.row].made_by_cursor = False  # written on or not, the text goes through it
        if self.row > 2 * self.REACH:  # a long run of lines: keep few open
            self._close(self.row - self.reach)

    def _write(self, text: str) -> None:
        cells = self.lines[self.row].cells
        if self.col > len(cells):
            cells.extend(" " * (self.col - len(cells)))
        cells[self.col:self.col + len(text)] = text
        self.col += len(text)
        while len(cells) > self.WIDTH:
            rest = cells[self.WIDTH:]
            del cells[self.WIDTH:]
            self._down(1)
            cells = self.lines[self.row].cells
            cells[:len(rest)] = rest
            self.col = len(rest)

    def _close(self, n: int) -> None:
        """The first `n` open lines are final."""
        if n > 0:
            self.done += [line.text() + "\n" for line in self.lines[:n] if line.cells or not line.made_by_cursor]
            del self.lines[:n]
            self.row -= n
