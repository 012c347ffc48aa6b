"""Pure: the ranks' stacks grouped, the odd ones out first, one line per group.

Ranks whose main threads stand on the same stack are one group (`ranks 0-4,6-7 (7):
all_reduce <- train.py:42 step()`); a rank on a stack of its own is named with its node
(`rank 5 on node3: data.py:88 __next__()`). Groups print smallest first: the rank the
others wait for is usually alone. A rank that did not answer says why (dead: no process;
exited; no answer; not started) and comes before them all.

A stack reads as the innermost frame where it stands, then the innermost frame of the
user's own code that led there (not torch, the standard library, site-packages or our
bootstrap), which is the line a person looks at.

Where a rank's native frames came (py-spy's, `bootstrap.native`), its group's stack is shown
with them, C++ names cut to their path (`c10d::ProcessGroupGloo::AsyncWork::wait`); where
none came, one line per reason says why, the Python stacks standing alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

import re
from dataclasses import dataclass

from slurmtorch.rankfiles import Frame, Native, RankStacks

# Where a frame is somebody else's code: an installed package, the standard library, our bootstrap.
LIBRARY_MARKS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", f"{os.sep}slurmtorch{os.sep}bootstrap{os.sep}")


@dataclass(frozen=True)
class Silent:
    """A rank without a stack: `why` is dead (no process), exited N, no answer, not started."""

    rank: int
    host: str  # '' when not known
    why: str


def is_library(frame: Frame) -> bool:
    return any(mark in frame.file for mark in LIBRARY_MARKS)


def where(frame: Frame) -> str:
    return f"{os.path.basename(frame.file)}:{frame.line} {frame.function}()"


def summary(frames: tuple) -> str:
    """`all_reduce <- train.py:42 step()`: the innermost frame and the user's frame that led
    there; the user's frame alone when it is the innermost."""
    if not frames:
        return "no Python frame (in C code before or after Python)"
    inner = frames[0]
    own = next((f for f in frames if not is_library(f)), None)
    if own is None:
        return f"{inner.function} ({where(inner)})"
    if own is inner:
        return where(inner)
    return f"{inner.function} <- {where(own)}"


def ranges(ranks: Iterable[int]) -> str:
    """0,1,2,4,6,7 -> `0-2,4,6-7`."""
    out: list[tuple[int, int]] = []
    for r in sorted(ranks):
        if out and out[-1][1] == r - 1:
            out[-1] = (out[-1][0], r)
        else:
            out.append((r, r))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def groups(stacks: Mapping[int, RankStacks]) -> list[tuple[list[int], RankStacks]]:
    """(ranks, one of their stacks) per distinct main-thread stack: smallest group first,
    then by lowest rank."""
    by_stack: dict[tuple, list[int]] = {}
    for rank in sorted(stacks):
        main = stacks[rank].main_thread()
        by_stack.setdefault(main.frames if main else (), []).append(rank)
    return sorted(((ranks, stacks[ranks[0]]) for ranks in by_stack.values()), key=lambda g: (len(g[0]), g[0][0]))


def summary_lines(stacks: Mapping[int, RankStacks], silent: Iterable[Silent] = ()) -> list[str]:
    """One line per rank that gave no stack, then one per group of ranks on the same stack."""
    lines = [f"rank {s.rank}{f' on {s.host}' if s.host else ''}: {s.why}" for s in sorted(silent, key=lambda s: s.rank)]
    for ranks, one in groups(stacks):
        main = one.main_thread()
        what = summary(main.frames if main else ())
        if len(ranks) == 1:
            lines.append(f"rank {ranks[0]} on {one.host}: {what}")
        else:
            lines.append(f"ranks {ranges(ranks)} ({len(ranks)}): {what}")
    return lines


def detail_lines(stacks: Mapping[int, RankStacks], all_threads: bool = False,
                 native: Mapping[int, Native] | None = None) -> list[str]:
    """Each group's main-thread stack as Python prints a traceback (most recent call last);
    with `all_threads`, every thread of each group's first rank; with that rank's native
    frames where `native` has them."""
    lines: list[str] = []
    for ranks, one in groups(stacks):
        head = f"rank {ranks[0]} on {one.host}" if len(ranks) == 1 else f"ranks {ranges(ranks)}"
        main = one.main_thread()
        threads = one.threads if all_threads else ((main,) if main else ())
        mixed = (native or {}).get(ranks[0])
        for thread in threads:
            name = "main thread" if thread.ident == one.main else f"thread 0x{thread.ident:x}"
            frames = shown(mixed.frames(thread.ident) if mixed else None) or thread.frames
            note = ", native frames by py-spy" if any(f.native for f in frames) else ""
            lines.append(f"{head}, {name} (most recent call last{note}):")
            lines += [frame_line(f) for f in reversed(frames)]
    return lines


def shown(frames: tuple | None) -> tuple:
    """py-spy's frames worth reading: from the innermost on, up to the outermost Python
    frame (beyond it only the C runtime's start), named ones only (a bare address says nothing)."""
    if not frames:
        return ()
    outermost = max((i for i, f in enumerate(frames) if not f.native), default=len(frames) - 1)
    return tuple(f for f in frames[:outermost + 1] if not (f.native and f.function.startswith("0x")))


def frame_line(frame: Frame) -> str:
    if frame.native:
        return f"  [native] {short_name(frame.function)} ({frame.file})"
    return f'  File "{frame.file}", line {frame.line}, in {frame.function}'


def short_name(name: str) -> str:
    """A C++ name without its template arguments and parameter lists: pybind11's run to pages
    (`initialize<...>(...)::{lambda(...)#1}::_FUN` -> `initialize<>()::{lambda()#1}::_FUN`)."""
    while True:  # innermost first, each pair marked by a character no name holds
        shorter = re.sub(r"<[^<>]*>", "\x01", re.sub(r"\([^()]*\)", "\x02", name))
        if shorter == name:
            return name.replace("\x01", "<>").replace("\x02", "()")
        name = shorter


def native_notes(native: Mapping[int, Native], late: Iterable[int], wait_s: float) -> list[str]:
    """Once per reason, why ranks gave no native frames (`native frames: none from ranks
    0-7: py-spy is not installed ...`); [] where every rank gave them."""
    by_why: dict[str, list[int]] = {}
    for rank, n in native.items():
        if n.why:
            by_why.setdefault(n.why, []).append(rank)
    late = sorted(late)
    if late:
        by_why.setdefault(f"py-spy had not answered within {wait_s:g} s (--native-wait-s)", []).extend(late)
    return [f"native frames: none from rank{'s' if len(r) > 1 else ''} {ranges(r)}: {why}; Python stacks only"
            for why, r in sorted(by_why.items(), key=lambda item: min(item[1]))]
