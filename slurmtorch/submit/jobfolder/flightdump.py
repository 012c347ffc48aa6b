"""torch's NCCL flight recorder dumps, summarised: which collective each rank last entered
and completed, and the sequence number where the ranks disagree.

torch writes one dump per rank when a collective times out (`bootstrap.flightrecorder`
points it at `flight/rank-R` in the job folder): a pickled dict with `entries`, each one
collective as torch's `flight_recorder` tools read it (`process_group` as (name, desc),
`collective_seq_id`, `profiling_name` such as `nccl:all_reduce`, `state` scheduled |
started | completed, `is_p2p`). `summary_lines` is pure; `load` reads one dump with an
unpickler that builds plain values only (dicts, lists, strings, numbers), never objects,
from a plain file and up to MAX_BYTES (readback): a dump that is not one is a reason, not
an error.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Mapping
from pathlib import Path

from slurmtorch import protocol, readback
from slurmtorch.submit.jobfolder.stacks import ranges


MAX_BYTES = 64 << 20  # torch keeps 2,000 entries (TORCH_NCCL_TRACE_BUFFER_SIZE): a few MiB with their frames


class _PlainValues(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name} is not a plain value")


def load(path: Path, below: Path | None = None) -> dict | str | None:
    """One rank's dump; None when there is none; else why it is not one (one short phrase).
    Read as readback reads what a job wrote (a plain file only: /dev/urandom never ends) and
    up to MAX_BYTES, so no dump can hang `stacks` or fill its memory."""
    try:
        data = readback.read_bytes(path, MAX_BYTES, below=below)
    except readback.NotRead as exc:
        return str(exc)
    if data is None:
        return None
    try:
        dump = _PlainValues(io.BytesIO(data)).load()
    except Exception as exc:  # noqa: BLE001 - any bytes at all: pickle raises a dozen kinds
        return f"not a dump ({type(exc).__name__})"
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        return "not a dump (no list of entries)"
    why = _malformed(dump["entries"])
    return f"malformed ({why})" if why else dump


def _malformed(entries: list) -> str | None:
    """Why entries are not the flight recorder's, in the fields read here; None if they are."""
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            return f"entry {i} is not a record"
        seq, group, name = e.get("collective_seq_id", 0), e.get("process_group", ("",)), e.get("profiling_name", "")
        if not _sequence(seq):
            return f"entry {i}'s collective_seq_id is not a sequence number"
        if not isinstance(group, (list, tuple)) or not group or not (isinstance(group[0], str) or _sequence(group[0])):
            return f"entry {i}'s process_group is not (name, description)"
        if not isinstance(name, str) or not isinstance(e.get("state", ""), str):
            return f"entry {i}'s profiling_name or state is not text"
    return None


def _sequence(value) -> bool:
    """A number torch could have counted to: a pickle holds ints of any size, and str() refuses
    one of over 4300 digits (the summary says `#42`)."""
    return type(value) is int and 0 <= value < 1 << 63


def load_folder(folder: Path) -> dict[int, dict | str]:
    """Every rank's dump in a job folder's flight/, by rank (a str: why that rank's is not one)."""
    dumps = {}
    for path in (folder / protocol.FLIGHT).glob("rank-*"):
        rank = readback.numbered(path.name, "rank-")
        dump = None if rank is None else load(path, folder)
        if rank is not None and dump is not None:
            dumps[rank] = dump
    return dumps


def _op(entry: dict) -> str:
    return str(entry.get("profiling_name", "?")).partition(":")[2].split(" ")[0] or "?"


def last_collectives(entries: list) -> dict[str, tuple[tuple[int, str] | None, tuple[int, str] | None]]:
    """Per process group: the (sequence number, collective) last entered and last completed."""
    out: dict[str, tuple] = {}
    for e in entries:
        if not isinstance(e, dict) or e.get("is_p2p") or "collective_seq_id" not in e:
            continue
        group = e.get("process_group")
        name = str(group[0]) if isinstance(group, (list, tuple)) and group else str(e.get("pg_id", "?"))
        seq = (int(e["collective_seq_id"]), _op(e))
        entered, completed = out.get(name, (None, None))
        entered = max(entered, seq) if entered else seq
        if e.get("state") == "completed":
            completed = max(completed, seq) if completed else seq
        out[name] = (entered, completed)
    return out


def _said(seq: tuple[int, str] | None) -> str:
    return f"{seq[1]} #{seq[0]}" if seq else "none"


def summary_lines(dumps: Mapping[int, dict | str], ranks: int | None = None) -> list[str]:
    """`flight recorder (group 0): ranks 0-4,6-7 entered all_reduce #42, completed #41; rank
    5 entered all_reduce #41, completed #41` and where they disagree; [] without dumps. A
    rank whose dump could not be read (`load`'s why) is one line, the others shown still."""
    if not dumps:
        return []
    per_rank = {rank: last_collectives(d["entries"]) for rank, d in dumps.items() if isinstance(d, dict)}
    lines = []
    for group in sorted({g for seen in per_rank.values() for g in seen}):
        states: dict[tuple, list[int]] = {}
        for rank in sorted(per_rank):
            states.setdefault(per_rank[rank].get(group, (None, None)), []).append(rank)
        parts = [f"{'ranks' if len(rs) > 1 else 'rank'} {ranges(rs)} entered {_said(e)}, completed "
                 f"{'#' + str(c[0]) if c else 'none'}"
                 for (e, c), rs in sorted(states.items(), key=lambda kv: (len(kv[1]), kv[1][0]))]
        lines.append(f"flight recorder (group {group}): " + "; ".join(parts))
        entered = {r: (per_rank[r].get(group, (None, None))[0] or (0, ""))[0] for r in per_rank}
        completed = {r: ((per_rank[r].get(group, (None, None))[1]) or (0, ""))[0] for r in per_rank}
        if len(set(entered.values())) > 1:
            seq = min(entered.values()) + 1
            behind = [r for r, s in entered.items() if s < seq]
            lines.append(f"flight recorder (group {group}): the ranks disagree at #{seq}: "
                         f"{'ranks' if len(behind) > 1 else 'rank'} {ranges(behind)} never entered it")
        elif len(set(completed.values())) > 1:
            seq = min(completed.values()) + 1
            behind = [r for r, s in completed.items() if s < seq]
            lines.append(f"flight recorder (group {group}): all entered #{seq}; "
                         f"{'ranks' if len(behind) > 1 else 'rank'} {ranges(behind)} never completed it")
    unread: dict[str, list[int]] = {}
    for rank, why in sorted(dumps.items()):
        if isinstance(why, str):
            unread.setdefault(why, []).append(rank)
    for why, rs in unread.items():
        lines.append(f"flight recorder: {'ranks' if len(rs) > 1 else 'rank'} {ranges(rs)}: {why}")
    if ranks is not None and len(dumps) < ranks:
        missing = [r for r in range(ranks) if r not in dumps]
        lines.append(f"flight recorder: no dump from {'ranks' if len(missing) > 1 else 'rank'} {ranges(missing)}")
    return lines
