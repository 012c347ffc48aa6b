"""A chain of jobs (train -> evaluate -> export), pure: its parts read and checked, the
dependency each part is submitted with, and how the chain ended.

A part is what `slurmtorch sbatch` takes (the `Options` fields, by name, as a `Distributor`
takes them), its program (`script` or `module`, and `args`), its own `site`, and `after`:
how it follows the part before it, in Slurm's dependency kinds:

- `ok` (the default): `afterok:<job before>`; it runs only if that one completed;
- `any`: `afterany:<job before>`; it runs once that one ended, however (keep going);
- `singleton`: `afterok:<job before>,singleton`; as `ok`, and besides no other job of
  its name and user runs at the same time (a chain submitted twice takes turns).
  On the first part it is `singleton` alone.

Every part but an `any` one also gets `--kill-on-invalid-dep=yes`: when the part before
fails, the dependency can never be met and Slurm cancels the part (and so, in turn, what
depends on it) instead of leaving it pending forever with `DependencyNeverSatisfied`,
whatever the cluster's `DependencyParameters` say (sbatch(1), --kill-on-invalid-dep).
Both reach the `#SBATCH` header through the options they are (`dependency`, the escape
hatch), so they are checked and quoted on the one path.

A submitted chain leaves its record (`RECORD`, chain.json: every part's name, job id, job
folder and `after`, in order) in every part's job folder, so any part's id finds the whole
chain again from another process (`slurmtorch status ID`, `Chain.attach(ID)`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from slurmtorch import protocol
from slurmtorch.errors import SpecError, SubmitError, typed
from slurmtorch.options import Options

AFTER = ("ok", "any", "singleton")
KILL_ON_INVALID_DEP = "--kill-on-invalid-dep=yes"

# A part's keys besides the options: its name, program, site, how it follows, and its snapshot.
OWN_KEYS = ("name", "script", "module", "args", "site", "after", "snapshot")
# The options a part may set: every one the CLI offers (module is the part's own key).
OPTION_KEYS = tuple(f.name for f in fields(Options) if "flags" in f.metadata and f.name != "module")
_OPTION_TYPES = {f.name: f.type for f in fields(Options)}
# A part's name is how the report and `--dependency` messages name it: a word, no shell in it.
_NAME_RE = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
# The chain's record, in every part's job folder (written while every part is still held).
RECORD = protocol.CHAIN_RECORD


@dataclass(frozen=True)
class Part:
    """One job of a chain: its name, program, site (None: the chain's), how it follows the
    part before it, and its options as given (field name -> value)."""

    name: str
    script: str | None = None
    module: str | None = None
    args: tuple[str, ...] = ()
    site: str | None = None
    after: str = "ok"
    snapshot: bool | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PartEnd:
    """How one part of a chain ended: its job, Slurm's final state, its exit code, and
    whether it ever started (a part cancelled for its dependency never did). `done` False:
    it has not ended yet (`status` on a chain still running), `state` then as a person
    reads it (`RUNNING on c1 0:42`) and `code` meaningless."""

    name: str
    job_id: str
    state: str
    code: int
    started: bool = True
    done: bool = True


@dataclass(frozen=True)
class RecordedPart:
    """A part as the chain's record keeps it: its name, job id, job folder and `after`."""

    name: str
    job_id: str
    folder: str
    after: str


def parts_from(document: Any, source: str = "chain", where=None) -> tuple[Part, ...]:
    """A chain file's document (`parts:`, a list of mappings; `site:` for every part) as
    its parts, every part checked; the first problem is one SpecError line naming
    `source` (`where(mapping, key)`: its file:line) and the part."""
    def at(mapping, key) -> str:
        return where(mapping, key) if where is not None else source

    if not isinstance(document, Mapping) or not isinstance(document.get("parts"), list):
        raise SpecError(f"{source}: a chain file is a mapping with `parts:`, a list of parts",
                        tip="parts: [{name: train, script: train.py}, {name: evaluate, script: eval.py}]")
    extra = sorted(set(document) - {"parts", "site"})
    if extra:
        raise SpecError(f"{at(document, extra[0])}: unknown key {extra[0]!r} in a chain file",
                        tip="a chain file has `parts:` and, for every part, `site:`")
    site = document.get("site")
    if site is not None and (not isinstance(site, str) or not site):
        raise SpecError(f"{at(document, 'site')}: site must be a site name or path")
    parts = [part_from(item, k, site, at) for k, item in enumerate(document["parts"])]
    return check_chain(parts, source)


def part_from(item: Any, index: int, site: str | None, where) -> Part:
    """Part number `index` of a chain file, checked: its keys, their types, its program."""
    if not isinstance(item, Mapping):
        raise SpecError(f"{where(None, None)}: part {index + 1} must be a mapping, not {type(item).__name__}")

    def at(mapping, key) -> str:  # a key missing: where the part starts
        return where(mapping, key if key in mapping else next(iter(mapping), None))

    name = item.get("name")
    label = f"part {name!r}" if isinstance(name, str) else f"part {index + 1}"
    if not isinstance(name, str) or not re.fullmatch(_NAME_RE, name):
        raise SpecError(f"{at(item, 'name')}: {label} needs a name: letters, digits, '_', '.', '-'",
                        tip="e.g. name: train")
    for key in item:
        if key not in OWN_KEYS and key not in OPTION_KEYS:
            near = [k for k in (*OWN_KEYS, *OPTION_KEYS) if k == str(key).replace("-", "_")]
            raise SpecError(f"{at(item, key)}: {label}: unknown key {key!r}",
                            tip=f"write {near[0]}" if near else f"a part's keys: {', '.join(OWN_KEYS)} and the "
                                                                 "options of slurmtorch sbatch, by their Python "
                                                                 "names (gpus_per_node, sbatch_args, ...)")
    options = {key: checked_option(key, value, f"{at(item, key)}: {label}") for key, value in item.items()
               if key in OPTION_KEYS}
    after = item.get("after", "ok")
    if after not in AFTER:
        raise SpecError(f"{at(item, 'after')}: {label}: after must be one of {', '.join(AFTER)}, not {after!r}",
                        tip="ok: if the part before completed; any: once it ended; singleton: as ok, "
                            "one job of its name at a time")
    script, module = item.get("script"), item.get("module")
    if (script is None) == (module is None):
        raise SpecError(f"{at(item, 'name')}: {label} needs a script or a module (one of them)",
                        tip="script: train.py, or module: mypkg.train")
    for key in ("script", "module", "site"):
        if item.get(key) is not None and (not isinstance(item[key], str) or not item[key]):
            raise SpecError(f"{at(item, key)}: {label}: {key} must be text")
    args = item.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool)
                                             for a in args):
        raise SpecError(f"{at(item, 'args')}: {label}: args must be a list of words",
                        tip='e.g. args: ["--epochs", "3"]')
    snapshot = item.get("snapshot")
    if snapshot is not None and not isinstance(snapshot, bool):
        raise SpecError(f"{at(item, 'snapshot')}: {label}: snapshot must be true or false")
    return Part(name, script, module, tuple(str(a) for a in args), item.get("site") or site, after, snapshot,
                options)


def checked_option(key: str, value: Any, label: str) -> Any:
    """An option's value as `Options` holds it (a list as a tuple, a number for a text
    option as its text), or a SpecError saying which type it needs."""
    kind = _OPTION_TYPES[key]
    if kind == "tuple[str, ...]":
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                           for v in value):
            return tuple(str(v) for v in value)
        if key == "env" and isinstance(value, Mapping):
            return tuple(f"{k}={v}" for k, v in value.items())
        need = "a list of words"
    elif kind == "bool | None":
        if isinstance(value, bool):
            return value
        need = "true or false"
    elif kind == "int | None":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        need = "a whole number"
    elif kind == "float | None":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        need = "a number"
    else:
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)
        need = "text"
    raise SpecError(f"{label}: {key} must be {need}, not {value!r}")


def check_chain(parts: Sequence[Part], source: str = "chain") -> tuple[Part, ...]:
    """The chain's own rules: at least one part, names unique, the first part follows nothing,
    and a part's own dependency can join the chain's (',', all of them)."""
    if not parts:
        raise SpecError(f"{source}: the chain has no parts", tip="parts: [{name: train, script: train.py}]")
    seen: set[str] = set()
    for k, part in enumerate(parts):
        if part.name in seen:
            raise SpecError(f"{source}: two parts are named {part.name!r}", tip="give each part its own name")
        seen.add(part.name)
        if part.after not in AFTER:
            raise SpecError(f"{source}: part {part.name!r}: after must be one of {', '.join(AFTER)}, not "
                            f"{part.after!r}")
        if k == 0 and part.after == "any":
            raise SpecError(f"{source}: part {part.name!r} is the first: after: any follows nothing",
                            tip="leave after out of the first part (or after: singleton)")
        own = part.options.get("dependency")
        if own and "?" in str(own) and k > 0:
            raise SpecError(f"{source}: part {part.name!r}: its dependency {own!r} uses '?' (any of them), "
                            "which cannot join the chain's (all of them)", tip="join its items with ','")
        if any(str(a).startswith("--kill-on-invalid-dep") for a in part.options.get("sbatch_args", ())):
            raise SpecError(f"{source}: part {part.name!r}: --kill-on-invalid-dep is the chain's to set",
                            tip="after: any keeps the part when the one before fails")
    return tuple(parts)


def dependency(part: Part, previous: str | None) -> str | None:
    """The part's `--dependency`: on the job before (`previous`; None for the first part) as
    its `after` says, joined with its own (',': all of them), or None."""
    chain = None
    if part.after == "singleton":
        chain = "singleton" if previous is None else f"afterok:{previous},singleton"
    elif previous is not None:
        chain = f"{'afterany' if part.after == 'any' else 'afterok'}:{previous}"
    own = part.options.get("dependency")
    return ",".join(d for d in (chain, own) if d) or None


def chained_options(part: Part, previous: str | None) -> dict[str, Any]:
    """The part's options as submitted after the job `previous`: its dependency, and (but
    for `after: any`) Slurm told to cancel it when that dependency can never be met."""
    out = dict(part.options)
    dep = dependency(part, previous)
    if dep is not None:
        out["dependency"] = dep
    if part.after != "any" and (previous is not None or part.after == "singleton" or part.options.get("dependency")):
        out["sbatch_args"] = (*out.get("sbatch_args", ()), KILL_ON_INVALID_DEP)
    return out


def held_namesake(singletons: Mapping[str, str], held: Sequence[tuple[str, str]]) -> SubmitError | None:
    """The refusal of a chain whose `after: singleton` part (`singletons`: its job name ->
    its part's name) would wait for good behind a held job of the same name (`held`: squeue's
    held jobs of this user, as (id, name)), or None (pure). Slurm starts a singleton job only
    once every earlier job of its name and user has ended, and a held job never ends: one a
    submission killed outright (SIGKILL, a lost node) left held keeps the part pending for good."""
    for job_id, name in held:
        if name in singletons:
            return SubmitError(f"chain not submitted: part {singletons[name]!r} (after: singleton) would wait for "
                               f"good behind job {job_id}, held, of the same name {name!r}",
                               tip=f"{typed(f'cancel {job_id}')} (left held by a submission killed midway), or "
                                   f"scontrol release {job_id} if you held it, then submit the chain again")
    return None


def end_lines(ends: Sequence[PartEnd], parts: Sequence[Part]) -> tuple[int, str | None, list[str]]:
    """How a chain ended, as (exit code, the first failed part's name or None, one line per
    part). 0 only if every part completed; a part that never ran after a failure says which
    part's failure cancelled it."""
    after = {p.name: p.after for p in parts}
    failed: str | None = None
    lines = []
    for end in ends:
        line = f"part {end.name!r}: job {end.job_id} {end.state} (exit {end.code})"
        if not end.done:
            line = f"part {end.name!r}: job {end.job_id} {end.state}"
        elif end.code != 0 and failed is not None and not end.started and after.get(end.name) != "any":
            line = f"part {end.name!r}: job {end.job_id} never ran: cancelled: part {failed!r} failed"
        elif end.code != 0 and failed is None:
            failed = end.name
        lines.append(line)
    code = 0 if failed is None else next(e.code for e in ends if e.name == failed) or 1
    return code, failed, lines


def failure_head(failed: str, job_id: str) -> str:
    """The line that names where a chain failed; that part's own report follows it, indented."""
    return f"chain failed at part {failed!r} (job {job_id}):"


def status_lines(ends: Sequence[PartEnd], parts: Sequence[Part], report: Sequence[str] = ()) -> list[str]:
    """`slurmtorch status` on any part of a chain (pure): the chain, every part's state or
    end (`end_lines`: the parts a failure cancelled say so), then where it failed with that
    part's own `report`, or that all completed, or how many have ended so far."""
    _, failed, lines = end_lines(ends, parts)
    head = f"chain {' -> '.join(p.name for p in parts)} ({len(parts)} part{'s' if len(parts) > 1 else ''}):"
    if failed is not None:
        job_id = next(e.job_id for e in ends if e.name == failed)
        tail = [failure_head(failed, job_id), *(f"  {line}" for line in report)]
    elif all(e.done for e in ends):
        tail = [f"chain: all {len(ends)} parts completed"]
    else:
        tail = [f"chain: {sum(e.done for e in ends)} of {len(ends)} parts ended"]
    return [head, *(f"  {line}" for line in lines), *tail]


def record_text(parts: Sequence[RecordedPart]) -> str:
    """The chain's record (`RECORD`) as written: its parts in order, as JSON."""
    return json.dumps({"parts": [asdict(p) for p in parts]}, indent=1) + "\n"


def parse_record(text: str, source: str) -> tuple[RecordedPart, ...]:
    """A chain's record read back, checked (every part a name, a job id, a folder and an
    `after`, as `record_text` writes them); else one SubmitError line naming `source`."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise SubmitError(f"cannot read the chain record {source}: {exc}") from None
    items = document.get("parts") if isinstance(document, dict) else None
    parts = [_recorded(item) for item in items] if isinstance(items, list) else []
    if not parts or None in parts:
        raise SubmitError(f"{source} is not a chain record slurmtorch wrote",
                          tip="parts: [{name, job_id, folder, after}, ...]; was it edited by hand?")
    return tuple(p for p in parts if p is not None)


def _recorded(item: Any) -> RecordedPart | None:
    """One part of a record, or None where it is not as `record_text` writes one."""
    if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in ("name", "job_id", "folder")):
        return None
    if not re.fullmatch(_NAME_RE, item["name"]) or not re.fullmatch(r"[0-9]{1,18}", item["job_id"]) \
            or item.get("after") not in AFTER:
        return None
    return RecordedPart(item["name"], item["job_id"], item["folder"], item["after"])
