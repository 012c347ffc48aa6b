"""What the ranks' live samples say (bootstrap.live writes them): the table of `slurmtorch top`,
the slowest rank, and the end-of-job line. Pure, but for `read_samples`.

The slowest rank is the one whose steps spend longest outside backward (OWN), said against
the median of all ranks': in synchronous training every rank steps at the slowest one's
pace, so the step time is the same everywhere, and the slow rank's extra time (data,
forward, its own code) is what its peers wait for in backward's all-reduce
(bootstrap.live.Steps). Where no rank timed backward, the step time stands in for it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from slurmtorch import protocol, rankfiles, readback
from slurmtorch.pace import pace, slowest
from slurmtorch.rankfiles import LiveSample
from slurmtorch.submit.jobfolder.jobstatus import clock
from slurmtorch.submit.jobfolder.terminaltext import visible


SHORT_S = 60  # a run this short, without steps, gets no end line


def read_samples(folder: Path, note: Callable[[str], None] | None = None) -> dict[int, LiveSample]:
    """Every rank's latest sample of the job's (or trial's) latest start, by rank; {} when none.
    A file that is not a sample is skipped, and `note` told why (`note: skipped
    .live/start-0/rank-3.json: rss is not a number of bytes`)."""
    starts = read_starts(folder, note)
    return starts[-1] if starts else {}


def read_starts(folder: Path, note: Callable[[str], None] | None = None) -> list[dict[int, LiveSample]]:
    """Each start's samples (a requeue or a restart makes a new start: `.live/start-K/`), in
    the order of the starts; a start whose ranks left none is left out."""
    live = folder / protocol.LIVE
    starts = sorted((k, p) for p in live.glob("start-*") if (k := readback.numbered(p.name, "start-")) is not None)
    found = [_samples(folder, path, note) for path in (live, *(p for _, p in starts))]
    return [samples for samples in found if samples]


def _samples(folder: Path, where: Path, note: Callable[[str], None] | None) -> dict[int, LiveSample]:
    samples = {}
    for path in sorted(where.glob("rank-*.json")):
        try:
            text = readback.read_text(path, readback.SAMPLE, below=folder)
            sample = rankfiles.live_or_why(text) if text is not None else None
        except readback.NotRead as exc:
            sample = str(exc)
        if isinstance(sample, str) and note is not None:
            note(f"note: skipped {path.relative_to(folder)}: {sample}")
        elif isinstance(sample, LiveSample):
            samples[sample.rank] = sample
    return samples


def slowest_line(samples: Mapping[int, LiveSample], recent: bool = True) -> str | None:
    found = slowest(samples, recent)
    if found is None:
        return None
    sample, pace, median = found
    ratio = pace / median if median > 0 else 1.0
    what = "outside backward" if sample.own_s is not None else "a step"
    return (f"slowest: rank {sample.rank} on {visible(sample.host)}, {_seconds(pace)} {what} = {ratio:.2f}x the median "
            f"({_seconds(median)})")


def top_lines(samples: Mapping[int, LiveSample], now: float) -> list[str]:
    """`slurmtorch top`: the slowest rank named, then a row per rank, slowest first (ranks
    without a step time last, by rank)."""
    if not samples:
        return []
    head = slowest_line(samples)
    gpus = any(s.gpu for s in samples.values())
    rows = sorted(samples.values(), key=lambda s: (pace(s, True) is None, -(pace(s, True) or 0.0), s.rank))
    cols = f"{'RANK':>5}  {'HOST':<14} {'STEPS':>7} {'STEP':>8} {'OWN':>8} {'TREND':>6} {'CPU%':>5} {'RSS':>7}"
    if gpus:
        cols += f" {'GPU':>3} {'UTIL%':>5} {'MEM':>7} {'POWER':>6} {'SM MHz':>6}  THROTTLE"
    out = [head] if head else []
    out.append(cols + "  AGE")
    for s in rows:
        line = (f"{s.rank:>5}  {visible(s.host)[:14]:<14} {s.steps:>7} {_seconds(s.step_s):>8} {_seconds(s.own_s):>8} "
                f"{_trend(s):>6} "
                f"{_num(s.cpu, '{:.0f}'):>5} {_bytes(s.rss):>7}")
        if gpus:
            g = s.gpu or {}
            line += (f" {_num(g.get('index'), '{}'):>3} {_num(g.get('util'), '{}'):>5} {_bytes(g.get('mem')):>7} "
                     f"{_num(g.get('power_w'), '{:.0f}W'):>6} {_num(g.get('sm_mhz'), '{}'):>6}  "
                     f"{','.join(g.get('throttle') or []) or '-':<8}")
        out.append(f"{line}  {'ended' if s.ended else f'{max(0.0, now - s.written):.0f}s'}")
    return out


def end_line(starts: Sequence[Mapping[int, LiveSample]],
             spans: Sequence[tuple[float, float, int]] = ()) -> str | None:
    """The end of a job, every start of it together: its mean step and steps, the slowest
    rank (of the start with the most steps), node-hours and, where the GPUs reported them,
    GPU-hours and energy. `spans` (start, end, nodes) of each start of the batch script, from
    the job's record, give the node-hours where known; else each start's ranks' hosts for the
    span from its first rank's start to its last sample. None when no rank sampled, or for a
    run of under a minute without steps (a probe, a failed start: nothing worth a line)."""
    starts = [s for s in starts if s]
    if not starts:
        return None
    own = [_span(s) for s in starts]
    if sum(own) < SHORT_S and not any(x.mean_step_s is not None for s in starts for x in s.values()):
        return None
    parts = []
    steps = [max(x.steps for x in s.values()) for s in starts]
    means = [(statistics.mean(m), n) for s, n in zip(starts, steps)
             if (m := [x.mean_step_s for x in s.values() if x.mean_step_s is not None])]
    if means:
        mean = sum(m * max(n, 1) for m, n in means) / sum(max(n, 1) for _, n in means)
        parts.append(f"mean step {_seconds(mean)} over {sum(steps)} steps")
        found = slowest(starts[steps.index(max(steps))], recent=False)
        if found is not None and found[2] > 0:
            sample, pace, median = found
            parts.append(f"slowest rank {sample.rank} on {visible(sample.host)} ({pace / median:.2f}x the median "
                         f"{'outside backward' if sample.own_mean_s is not None else 'step'})")
    ran = list(spans) or [(0.0, span, len({x.host for x in s.values()})) for s, span in zip(starts, own)]
    parts.append(_node_hours(ran))
    gpus = [({(x.host, x.gpu.get("index")): x.gpu for x in s.values() if x.gpu}, span) for s, span in zip(starts, own)]
    if any(g for g, _ in gpus):
        parts.append(f"{sum(len(g) * span for g, span in gpus) / 3600:.3g} GPU-hours")
        joules = [v.get("energy_j") for g, _ in gpus for v in g.values()]
        if joules and None not in joules:
            total = sum(float(j) for j in joules if j is not None)
            parts.append(f"{total / 3.6e6:.3g} kWh ({total:.0f} J)")
    return "run: " + "; ".join(parts)


def _span(samples: Mapping[int, LiveSample]) -> float:
    """One start's span: from its first rank's start to its last sample."""
    return max(0.0, max(s.written for s in samples.values()) - min(s.since for s in samples.values()))


def _node_hours(spans: Sequence[tuple[float, float, int]]) -> str:
    """`2 nodes x 3:10 = 0.106 node-hours`, with `over 2 starts` where there were more; the
    starts' time alone where their node counts differ."""
    seconds = sum(end - start for start, end, _ in spans)
    hours = sum((end - start) * nodes for start, end, nodes in spans) / 3600
    counts = {nodes for _, _, nodes in spans}
    over = f" over {len(spans)} starts" if len(spans) > 1 else ""
    if len(counts) == 1:
        (n,) = counts
        return f"{n} node{'s' if n != 1 else ''} x {clock(seconds)}{over} = {hours:.3g} node-hours"
    return f"{clock(seconds)}{over} = {hours:.3g} node-hours"


def _trend(s: LiveSample) -> str:
    """The recent mean step against the one before it: +12% is slower."""
    if s.step_s is None or not s.trend_s:
        return "-"
    return f"{100 * (s.step_s / s.trend_s - 1):+.0f}%"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _bytes(value) -> str:
    if value is None:
        return "-"
    for unit in ("B", "K", "M", "G"):
        if value < 1024 or unit == "G":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return "-"


def _num(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
