"""What a job printed, as the user's terminal shows it (issue 44): a progress bar's redraws
(carriage returns, tqdm's cursor-ups, line erases) applied so each line shows its final state,
colours dropped, and every other control character or escape sequence written out, never
obeyed. The only escapes on the terminal are the waiter's own (`\\r\\x1b[K` over the live line).

Real tqdm output (the library, writing to a file as a rank's stderr), a real pseudo-terminal
for the live line."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtorch.submit.follow.tail import Tail
from slurmtorch.submit.jobfolder.terminaltext import Redraws, final_text, visible

NESTED_BARS = """
import sys
from tqdm import tqdm
for epoch in tqdm(range(2), desc="epoch", file=sys.stderr, mininterval=0, ascii=True):
    for batch in tqdm(range(3), desc="batch", leave=False, file=sys.stderr, mininterval=0, ascii=True):
        pass
    tqdm.write(f"epoch {epoch} done", file=sys.stderr)
print("trained", file=sys.stderr)
"""


@pytest.fixture
def tqdm_log(tmp_path) -> Path:
    """rank-0.err as a rank running tqdm's nested bars leaves it."""
    pytest.importorskip("tqdm")
    log = tmp_path / "rank-0.err"
    with open(log, "wb") as err:
        subprocess.run([sys.executable, "-c", NESTED_BARS], stderr=err, check=True, timeout=60)
    assert b"\x1b[A" in log.read_bytes() and b"\r" in log.read_bytes()  # what tqdm draws with
    return log


def shown_lines(text: str) -> list[str]:
    """The lines, with tqdm's rate and times (they change run to run) left out."""
    return [line.split(" [")[0] for line in text.splitlines()]


def test_logs_show_nested_progress_bars_in_their_final_state_not_their_escape_codes(tqdm_log):
    """Was: every redraw, and tqdm's cursor-up shown as `\\x1b[A` on each line."""
    out = io.StringIO()
    tail = Tail(tqdm_log, out)
    tail.pump()
    tail.finish()
    assert shown_lines(out.getvalue()) == ["epoch 0 done", "epoch 1 done", "epoch: 100%|##########| 2/2", "trained"]
    assert out.getvalue().endswith("\n") and not any(c in out.getvalue() for c in "\x1b\r\\")


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_the_final_state_is_the_same_however_the_output_arrives_in_pieces(tqdm_log, size):
    """Once a stream has moved its cursor up: a line above the cursor is then held as far up
    as it went (the first cursor-up finds only what is still held: see terminaltext)."""
    text = tqdm_log.read_bytes().decode()
    first = text.index("\x1b[A") + 3
    redraws = Redraws()
    got = redraws.feed(text[:first])
    got += "".join(redraws.feed(text[i:i + size]) for i in range(first, len(text), size)) + redraws.finish()
    assert got == final_text(text)


@pytest.mark.parametrize("text, shown", [
    ("a\nb\n", "a\nb\n"),
    ("no newline at the end", "no newline at the end"),
    ("  0%|   | 0/3\r 33%|#  | 1/3\r100%|###| 3/3\n", "100%|###| 3/3\n"),
    ("downloading\rdone\n", "doneloading\n"),  # as a terminal leaves it: only what was drawn over changes
    ("abc\x1b[2K\rxy\n", "xy\n"),  # rich's erase-line
    ("hello\x1b[K world\n", "hello world\n"),
    ("windows\r\n", "windows\n"),
    ("\x1b[32mINFO\x1b[0m ready\n", "INFO ready\n"),  # a colour: its text, plain
    ("tab\there\n", "tab\there\n"),
    ("outer 0%\n\rinner 50%\x1b[A\router 100%\n", "outer 100%\ninner 50%"),
    ("title \x1b]0;pwned\x07 clip \x1b]52;c;cHduZWQ=\x07 clear \x1b[2J back\x08 csi \u009b2J end\n",
     "title \\x1b]0;pwned\\x07 clip \\x1b]52;c;cHduZWQ=\\x07 clear \\x1b[2J back\\x08 csi \\x9b2J end\n"),
    ("bell\x07 nul\x00 cursor \x1b[10;10H save\x1b7\n", "bell\\x07 nul\\x00 cursor \\x1b[10;10H save\\x1b7\n"),
    ("cut short \x1b[", "cut short \\x1b["),
])
def test_redraws_are_applied_and_every_other_control_is_written_out(text, shown):
    assert final_text(text) == shown


def test_a_cursor_up_past_the_open_lines_never_reaches_what_was_shown():
    redraws = Redraws()
    assert redraws.feed("shown\n") == "shown\n"
    assert "shown" not in redraws.feed("\x1b[5Aover\n") + redraws.finish()


def test_a_line_without_end_is_cut_as_a_terminal_wraps_it():
    text = final_text("x" * (Redraws.WIDTH * 2 + 5) + "\n")
    assert [len(line) for line in text.splitlines()] == [Redraws.WIDTH, Redraws.WIDTH, 5]


def test_a_sequence_cut_by_the_end_of_a_read_waits_for_its_rest():
    redraws = Redraws()
    assert redraws.feed("bar 50%\x1b") == "" and redraws.live() == "bar 50%"
    assert redraws.feed("[2K\rbar 100%\n") == "bar 100%\n" and redraws.finish() == ""


def test_visible_writes_out_carriage_returns_too():
    """Outside a log (a host name, a cause, a table cell) a `\\r` would redraw our own line."""
    assert visible("node1\rrank 0 ok") == "node1\\x0drank 0 ok"


def test_on_a_terminal_the_bar_being_redrawn_is_live_and_only_our_escapes_reach_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    master, slave = os.openpty()
    with open(slave, "w", encoding="utf-8", closefd=True) as terminal:
        log = tmp_path / "rank-0.err"
        tail = Tail(log, terminal)
        log.write_text("epoch 1  50%")
        tail.pump()
        log.write_text("epoch 1  50%\repoch 1 100%\nnext\x1b]0;pwned\x07")
        tail.pump()
        tail.finish()
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other end is closed and all it wrote was read
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    seen = seen.decode()
    assert seen == "epoch 1  50%\r\x1b[Kepoch 1 100%\r\nnext\\x1b]0;pwned\\x07\r\x1b[Knext\\x1b]0;pwned\\x07", repr(seen)
