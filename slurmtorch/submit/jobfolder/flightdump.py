"""torch's NCCL flight recorder dumps, summarised: which collective each rank last entered
and completed, and the sequence number where the ranks disagree.

torch writes one dump per rank when a collective times out (`bootstrap.flightrecorder`
points it at `flight/rank-R` in the job folder): a pickled dict with `entries`, each one
collective as torch's `flight_recorder` tools read it (`process_group` as (name, desc),
`collective_seq_id`, `profiling_name` such as `nccl:all_reduce`, `state` scheduled |
started | completed, `is_p2p`). `summary_lines` is pure; `load` reads one dump with an
unpickler that builds plain values only (dicts, lists, strings, numbers), never objects.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Mapping
from pathlib import Path

from slurmtorch import protocol
from slurmtorch.submit.jobfolder.stacks import ranges


class _PlainValues(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name} is not a plain value")


def load(path: Path) -> dict | None:
    """One rank's dump, or None when it is missing or not a dump of plain values."""
    try:
        dump = _PlainValues(io.BytesIO(path.read_bytes())).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError):
        return None
    return dump if isinstance(dump, dict) and isinstance(dump.get("entries"), list) else None


def load_folder(folder: Path) -> dict[int, dict]:
    """Every rank's dump in a job folder's flight/, by rank."""
    dumps = {}
    for path in (folder / protocol.FLIGHT).glob("rank-*"):
        tail = path.name[len("rank-"):]
        dump = load(path) if tail.isdigit() else None
        if dump is not None:
            dumps[int(tail)] = dump
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


def summary_lines(dumps: Mapping[int, dict], ranks: int | None = None) -> list[str]:
    """`flight recorder (group 0): ranks 0-4,6-7 entered all_reduce #42, completed #41; rank
    5 entered all_reduce #41, completed #41` and where they disagree; [] without dumps."""
    if not dumps:
        return []
    per_rank = {rank: last_collectives(d.get("entries", [])) for rank, d in dumps.items()}
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
    if ranks is not None and len(dumps) < ranks:
        missing = [r for r in range(ranks) if r not in dumps]
        lines.append(f"flight recorder: no dump from {'ranks' if len(missing) > 1 else 'rank'} {ranges(missing)}")
    return lines
