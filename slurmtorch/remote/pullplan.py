"""What a pull does with each entry a job sent, against the laptop's own tree (pure).

The job's files arrive in a private staging folder first (`placing`); nothing the cluster
says (a date, a mode, a link) decides what happens to a laptop file. For each entry:

- a new file is placed, with the laptop's defaults for its mode (the umask: never the
  mirror's private 0600), executable where the job's was; new dotfiles (any part of the
  path starting with '.') and new executables are named, so an `.envrc` is seen;
- over an existing laptop file: nothing when it is the same; the job's where the laptop's
  own ledger says a pull placed that file and it is still as placed; else the laptop's is
  kept and named ("kept yours");
- a folder: made where the laptop has none; written through where the laptop has the
  user's link to a folder (as rsync's -K); where the laptop has a file, a link to anything
  else or a special file, the laptop's entry is kept and nothing of the job's below it;
- nothing is deleted, nothing becomes another type, the pull makes no link;
- a file still changing on the cluster (its size or time now differs from what was
  transferred) is not placed: a half-written checkpoint that looks whole is worse than
  none, and the next pull brings it whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurmtorch.errors import typed
from slurmtorch.remote.ledger import Placed

FILE, DIR = "file", "dir"
MISSING, DIRLINK, LINK, OTHER = "missing", "dirlink", "link", "other"
NAMED = 10  # names a line shows before "and N more"
_KIND_HERE = {FILE: "a file", DIR: "a folder", LINK: "a link", DIRLINK: "a link to a folder",
              OTHER: "not a plain file"}


@dataclass(frozen=True)
class Staged:
    """An entry the job sent, as it lies in the staging folder."""

    path: str  # relative, '/'-separated
    kind: str  # FILE or DIR
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0  # the job's permission bits
    sha256: str = ""


@dataclass(frozen=True)
class Here:
    """The laptop's entry at a staged entry's path."""

    kind: str  # MISSING, FILE, DIR, DIRLINK (a link to a folder), LINK (to anything else), OTHER
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0
    sha256: str = ""  # a FILE's, where `needs_hash` said so
    target: str = ""  # a link's


@dataclass(frozen=True)
class Step:
    path: str
    action: str  # "mkdir", "new" or "replace"
    mode: int
    sha256: str = ""


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...] = ()
    kept: tuple[tuple[str, str], ...] = ()  # (path, why; '' for the user's own file)
    changing: tuple[str, ...] = ()
    dotfiles: tuple[str, ...] = ()
    executables: tuple[str, ...] = ()
    through: tuple[tuple[str, str], ...] = ()  # the user's links written through: (path, target)

    @property
    def placed(self) -> int:
        return sum(1 for s in self.steps if s.action != "mkdir")


def needs_hash(staged: Staged, size: int, mtime_ns: int, placed: Placed | None) -> bool:
    """Whether a laptop file of this size and time must be hashed to decide: it may be the
    same as the job's, or as an earlier pull placed it."""
    return size == staged.size or (placed is not None and (placed.size, placed.mtime_ns) == (size, mtime_ns))


def plan(staged: Sequence[Staged], here: Mapping[str, Here], ledger: Mapping[str, Placed],
         now: Mapping[str, tuple[int, int] | None], umask: int) -> Plan:
    """Each staged entry decided (parents before children); `now`: each staged file's size and
    time on the cluster after the transfer (None: gone, or no longer a plain file)."""
    steps: list[Step] = []
    kept: list[tuple[str, str]] = []
    changing: list[str] = []
    dotfiles: list[str] = []
    executables: list[str] = []
    through: list[tuple[str, str]] = []
    blocked: set[str] = set()  # the job's folders kept out: nothing below them
    for s in sorted(staged, key=lambda e: e.path.split("/")):
        if any(p in blocked for p in _parents(s.path)):
            continue
        h = here.get(s.path, Here(MISSING))
        if s.kind == DIR:
            if h.kind == MISSING:
                steps.append(Step(s.path, "mkdir", 0o777 & ~umask))
            elif h.kind == DIRLINK:
                through.append((s.path, h.target))
            elif h.kind != DIR:
                kept.append((s.path, f"{_KIND_HERE[h.kind]} here, a folder in the job"))
                blocked.add(s.path)
            continue
        if h.kind not in (MISSING, FILE):
            kept.append((s.path, f"{_KIND_HERE[h.kind]} here, a file in the job"))
            continue
        if h.kind == FILE:
            if h.sha256 and h.sha256 == s.sha256:
                continue  # the same already
            before = ledger.get(s.path)
            if before != Placed(h.size, h.mtime_ns, h.sha256):
                kept.append((s.path, "changed here since pulled" if before else ""))
                continue
        if not settled(s, now.get(s.path)):
            changing.append(s.path)
        elif h.kind == FILE:
            steps.append(Step(s.path, "replace", h.mode, s.sha256))
        else:
            runs = bool(s.mode & 0o111)
            steps.append(Step(s.path, "new", (0o777 if runs else 0o666) & ~umask, s.sha256))
            if any(part.startswith(".") for part in s.path.split("/")):
                dotfiles.append(s.path)
            if runs:
                executables.append(s.path)
    return Plan(tuple(steps), tuple(kept), tuple(changing), tuple(dotfiles), tuple(executables), tuple(through))


def settled(s: Staged, now: tuple[int, int] | None) -> bool:
    """Whether the cluster's file is still what was transferred: its size, and its time to the
    nanosecond (to the second where the transfer kept whole seconds only)."""
    if now is None or now[0] != s.size:
        return False
    second = 1_000_000_000
    return now[1] == s.mtime_ns or (s.mtime_ns % second == 0 and now[1] // second == s.mtime_ns // second)


def report(p: Plan, *, job: str, cluster: str, source: str, dest: str, running: bool,
           never: Sequence[str] = (), never_more: int = 0) -> list[str]:
    """The lines a pull ends with: what it placed, then what the user should look at.
    `never`: what the job's folder holds that no pull brings (its `.git` folders and links),
    as the cluster named them, and how many more it did not name."""
    n = p.placed
    lines = [f"slurmtorch: pulled {n} file{'' if n == 1 else 's'} of job {job} from "
             f"{cluster}:{shown(source)} into {shown(dest)}"]
    if p.dotfiles:
        lines.append(f"slurmtorch: new dotfiles (look before anything runs them): {names(p.dotfiles)}")
    if p.executables:
        lines.append(f"slurmtorch: new executables: {names(p.executables)}")
    if p.kept:
        kept = [f"{path} ({why})" if why else path for path, why in p.kept]
        lines.append(f"slurmtorch: kept yours: {names(kept)}; the job's are not placed "
                     f"({typed(f'pull {job} --to DIR', cluster)} brings them into another folder)")
    if p.through:
        lines.append(f"slurmtorch: written through your links: {names([f'{a} -> {b}' for a, b in p.through])}")
    if p.changing:
        then = "the job is still running: pull again after it ends" if running else "pull again"
        lines.append(f"slurmtorch: still changing on the cluster, not placed: {names(p.changing)}; {then}")
    if never:
        lines.append(f"slurmtorch: never pulled: {names(never, never_more)}")
    return lines


def names(items: Sequence[str], unnamed: int = 0) -> str:
    """The first NAMED items, shown safely, and how many more (`unnamed` beyond `items`)."""
    more = len(items) - NAMED + unnamed if len(items) > NAMED else unnamed
    return ", ".join(shown(i) for i in items[:NAMED]) + (f" and {more} more" if more > 0 else "")


def shown(text: str) -> str:
    """A name the job chose, safe on a terminal: a control character (an escape sequence's
    start, a newline) or a byte that is not UTF-8 as a Python escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
