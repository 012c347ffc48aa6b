"""Run every benchmark and write BENCHMARKS.md (machine, date, medians, ratios).

    .venv/bin/python benchmarks/run_all.py [--reps N] [--only render,startup,phases,turnaround,allreduce]

Benchmarks, not tests: nothing here asserts a time. Run it on a quiet machine, after
`scripts/setup` and `.venv/bin/pip install torchx` (the render baseline). Section 4
starts the local Slurm testbed. benchmarks/NOTES.md is appended as written.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

ALL = ("render", "startup", "phases", "turnaround", "allreduce")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7, help="repetitions per case (default 7)")
    ap.add_argument("--only", default=",".join(ALL))
    ap.add_argument("--out", default=str(_common.REPO / "BENCHMARKS.md"))
    args = ap.parse_args()
    chosen = [b for b in args.only.split(",") if b]
    import compileall

    compileall.compile_dir(str(_common.REPO / "src"), quiet=1)  # as a wheel install would
    sections, ratios = [], {}
    for name in chosen:
        t0 = time.perf_counter()
        print(f"benchmark {name} ...", file=sys.stderr, flush=True)
        mod = __import__(name)
        fn = getattr(mod, "run_bench", None) or mod.run
        # Cheap or noisy sections get more repetitions; the Slurm one fewer (each is a job).
        reps = {"render": max(15, 2 * args.reps), "turnaround": max(3, args.reps // 2)}.get(name, args.reps)
        text, r = fn(max(1, reps))
        sections.append(text)
        ratios.update(r)
        print(text + f"\n({time.perf_counter() - t0:.0f} s)\n", file=sys.stderr, flush=True)
    head = (f"# Benchmarks\n\nMeasured {datetime.date.today().isoformat()} on {_common.machine()}.\n"
            f"Command: `.venv/bin/python benchmarks/run_all.py --reps {args.reps}`. Each case alternates with its "
            "baselines in the same run; figures are medians.\n\n## Summary (slurmtorch / baseline; lower is faster)\n\n"
            + _common.table(["comparison", "value"],
                            [[k, f"{v:.1f}" if "(ms)" in k else f"{v:.2f}x"] for k, v in ratios.items()]))
    notes = (_common.REPO / "benchmarks" / "NOTES.md").read_text()
    Path(args.out).write_text(head + "\n\n" + "\n\n".join(sections) + "\n\n" + notes)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
