"""Job arrays and sweeps: one Slurm job array, each array task one multi-node job.

`--sweep k=v1,v2 ...` is the product grid, trial K being array index K; `--array`
picks indices (and a `%N` limit) from it, or is a plain array without a sweep.
"""

from __future__ import annotations

import itertools
import math
import re

from slurmtorch import protocol, shell
from slurmtorch.errors import SpecError
from slurmtorch.options import Options

_ARRAY_RE = (r"^(?P<ranges>[0-9]+(?:-[0-9]+(?::[0-9]+)?)?(?:,[0-9]+(?:-[0-9]+(?::[0-9]+)?)?)*)?"
             r"(?:%(?P<limit>[0-9]+))?$")  # compiled on first use
_SWEEP_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_-]*$"  # compiled on first use (re's cache): most jobs never need it
DEFAULT_MAX_ARRAY_SIZE = 1001  # Slurm's MaxArraySize unless the cluster sets it (the site's max_array_size)
ARRAY_TIP = "e.g. --array 0-19%4 (indices 0..19, at most 4 at a time), --array 1,3,5-7, or --array %2 with --sweep"


def limit_tip(size: int) -> str:
    return (f"split it into jobs of at most {size} tasks (--array 0-{size - 1}, and the rest shifted by an offset "
            "your script adds); a cluster whose MaxArraySize is larger says so in its site's max_array_size")


def plan_array(o: Options, max_size: int = DEFAULT_MAX_ARRAY_SIZE) -> tuple[
        str | None, tuple[int, ...], tuple[tuple[str, tuple[str, ...]], ...],
        tuple[tuple[int, tuple[tuple[str, str], ...]], ...]]:
    """--sweep and --array as one job array (batch jobs only): (Slurm's --array text, the
    trial ids it selects, the sweep grid (name, values), and every selected trial's
    parameters); (None, (), (), ()) for a single job. `max_size`: the cluster's MaxArraySize."""
    sweep = parse_sweep(o.sweep)
    if o.array is None and not sweep:
        return None, (), (), ()
    if o.kind != "sbatch":
        raise SpecError("--array and --sweep need slurmtorch sbatch")
    if max_size < 1:
        raise SpecError("the site's cluster runs no job arrays (its max_array_size: 0, as MaxArraySize=0 turns them "
                        "off), so no --array or --sweep",
                        tip="submit each trial as a job of its own (separate jobs, or a chain); if `scontrol show "
                            "config` says another MaxArraySize, correct the site's max_array_size")
    trials = math.prod(len(values) for _, values in sweep)
    if sweep and trials > max_size:  # refused before the grid is built: it can be huge
        raise SpecError(f"--sweep is a grid of {trials} trials, more than one job array holds "
                        f"(MaxArraySize {max_size})", tip=limit_tip(max_size))
    grid = sweep_grid(sweep)
    array, trial_ids = parse_array(o.array if o.array is not None else "%" + str(len(grid)),
                                   len(grid) if sweep else None, max_size)
    return array, trial_ids, sweep, tuple((t, grid[t] if grid else ()) for t in trial_ids)


def parse_array(text: str, grid: int | None = None,
                max_size: int = DEFAULT_MAX_ARRAY_SIZE) -> tuple[str, tuple[int, ...]]:
    """Check `--array` against MaxArraySize `max_size` and expand its indices (pure); returns
    (Slurm's text, indices).

    With a sweep of `grid` trials the indices must be trial ids (0..grid-1), and a bare
    `%N` means every trial, at most N at a time.
    """
    text = str(text).strip()
    m = re.match(_ARRAY_RE, text)
    if not text or not m:
        raise SpecError(f"malformed --array {text!r}", tip=ARRAY_TIP)
    ranges, limit = m.group("ranges"), m.group("limit")
    if limit is not None and int(limit) < 1:
        raise SpecError(f"--array {text!r}: %{limit} would never run a task", tip=ARRAY_TIP)
    if ranges is None:
        if grid is None:
            raise SpecError(f"--array {text!r} names no indices", tip=ARRAY_TIP)
        ranges = f"0-{grid - 1}" if grid > 1 else "0"
        text = ranges + text
    indices: set[int] = set()
    for part in ranges.split(","):
        lo, _, rest = part.partition("-")
        hi, _, step = rest.partition(":")
        lo_i, hi_i, step_i = int(lo), int(hi) if hi else int(lo), int(step) if step else 1
        if hi_i < lo_i or step_i < 1:
            raise SpecError(f"--array {text!r}: range {part!r} is empty", tip=ARRAY_TIP)
        top = lo_i + (hi_i - lo_i) // step_i * step_i
        if top >= max_size:  # checked before expanding: 0-99999999 would take minutes and GBs
            raise SpecError(f"--array {text!r}: index {top} exceeds MaxArraySize {max_size} "
                            f"(indices 0..{max_size - 1})", tip=limit_tip(max_size))
        indices.update(range(lo_i, hi_i + 1, step_i))
    if grid is not None and max(indices) >= grid:
        raise SpecError(f"--array {text!r}: the sweep has {grid} trials (ids 0..{grid - 1}), not {max(indices) + 1}",
                        tip="leave --array out, or give only the limit: --array %2")
    return text, tuple(sorted(indices))


def parse_sweep(items: tuple[str, ...] | list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`NAME=V1,V2` strings -> ((name, values), ...) in the order given (pure)."""
    tip = "e.g. --sweep lr=1e-3,1e-4 --sweep bs=32,64 (a grid: every combination)"
    out: list[tuple[str, tuple[str, ...]]] = []
    for item in items:
        name, sep, values = str(item).partition("=")
        if not sep or not re.match(_SWEEP_NAME_RE, name):
            raise SpecError(f"malformed --sweep {item!r}: expected NAME=V1,V2,... "
                            "(NAME: letters, digits, '_' or '-')", tip=tip)
        if name in dict(out) or sweep_var(name) in {sweep_var(n) for n, _ in out}:
            raise SpecError(f"--sweep {name!r} given twice", tip=tip)
        vals = tuple(values.split(","))
        if any(v == "" for v in vals):
            raise SpecError(f"malformed --sweep {item!r}: an empty value", tip=tip)
        if len(set(vals)) != len(vals):
            raise SpecError(f"--sweep {item!r} repeats a value", tip=tip)
        for v in vals:
            shell.quote(v, what=f"--sweep {name} value")  # refuses NUL and non-UTF-8 text
        out.append((name, vals))
    return tuple(out)


def sweep_var(name: str) -> str:
    """Sweep parameter NAME -> its variable SLURMTORCH_SWEEP_<NAME> (upper case, '-' -> '_')."""
    return protocol.SWEEP_PREFIX + name.upper().replace("-", "_")


def sweep_grid(sweep: tuple[tuple[str, tuple[str, ...]], ...]) -> list[tuple[tuple[str, str], ...]]:
    """Every combination, the last parameter varying fastest: trial k is the k-th."""
    if not sweep:
        return []
    names = [n for n, _ in sweep]
    return [tuple(zip(names, combo)) for combo in itertools.product(*(v for _, v in sweep))]


def sweep_args(params: tuple[tuple[str, str], ...]) -> list[str]:
    """A trial's parameters as script arguments: `--lr 1e-3 --bs 32`."""
    return [x for name, value in params for x in (f"--{name}", value)]
