"""Run every benchmark and write BENCHMARKS.md (machine, date, command, medians, ratios).

    benchmarks/setup                      # once: the project's .venv and the baselines (torchx)
    .venv/bin/python benchmarks/run_all.py [--reps N] [--only render,startup,phases,turnaround,allreduce,nccl,scale]

Benchmarks, not tests: nothing here asserts a time. Run it on a quiet machine. Section 4
starts the local Slurm testbed. Every figure in the output, and whether each target was
met, comes from this run; benchmarks/NOTES.md (explanations and dated one-off checks, never this run's figures) is appended.
"""
from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

ALL = ("render", "startup", "phases", "turnaround", "allreduce", "nccl", "scale")


def command_line() -> str:
    """This run's command as typed, with the interpreter relative to the repo when inside it."""
    python = sys.executable
    try:
        python = os.path.relpath(python, _common.REPO) if Path(python).is_relative_to(_common.REPO) else python
    except ValueError:
        pass
    return shlex.join([python, "benchmarks/run_all.py", *sys.argv[1:]])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7, help="repetitions per case (default 7)")
    ap.add_argument("--only", default=",".join(ALL), help="comma-separated sections (default: all)")
    ap.add_argument("--out", default=str(_common.REPO / "BENCHMARKS.md"))
    args = ap.parse_args()
    chosen = [b for b in args.only.split(",") if b]
    unknown = [b for b in chosen if b not in ALL]
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(ALL)}")
    import compileall

    compileall.compile_dir(str(_common.REPO / "slurmtorch"), quiet=1)  # as a wheel install would
    sections, figures = [], []
    for name in chosen:
        t0 = time.perf_counter()
        print(f"benchmark {name} ...", file=sys.stderr, flush=True)
        mod = __import__(name)
        reason = mod.missing() if hasattr(mod, "missing") else None
        if reason:
            title = (mod.__doc__ or name).strip().splitlines()[0]
            sections.append(f"## {title}\n\nSkipped on this machine: {reason}.")
            print(f"  skipped: {reason}", file=sys.stderr, flush=True)
            continue
        # Cheap or noisy sections get more repetitions; the Slurm one fewer (each is a job).
        reps = {"render": max(15, 2 * args.reps), "turnaround": max(3, args.reps // 2)}.get(name, args.reps)
        text, figs = mod.run_bench(max(1, reps))
        sections.append(text)
        figures += figs
        print(text + f"\n({time.perf_counter() - t0:.0f} s)\n", file=sys.stderr, flush=True)
    skipped = [b for b in ALL if b not in chosen]
    head = (f"# Benchmarks\n\nMeasured {datetime.date.today().isoformat()} on {_common.machine()}.\n"
            f"Command: `{command_line()}`"
            + (f" (sections not run: {', '.join(skipped)})" if skipped else "")
            + ". Each case alternates with its baselines in the same run; figures are medians.\n\n"
            "## Summary\n\nRatios are slurmtorch / baseline. For times a lower ratio is faster; for the "
            "all_reduce bandwidth a higher one is. Each row says which; met/missed is computed from this "
            "run's value.\n\n" + _common.summary(figures))
    notes = (_common.REPO / "benchmarks" / "NOTES.md").read_text()
    Path(args.out).write_text(head + "\n\n" + "\n\n".join(sections) + "\n\n" + notes)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
