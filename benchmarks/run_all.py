"""Run every benchmark and write BENCHMARKS.md (machine, date, medians, ratios).

    .venv/bin/python benchmarks/run_all.py [--reps N] [--only render,startup,phases,turnaround,allreduce]

Benchmarks, not tests: nothing here asserts a time. Run it on a quiet machine.
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
        text, r = fn(max(1, args.reps if name not in ("turnaround", "allreduce") else max(3, args.reps // 2)))
        sections.append(text)
        ratios.update(r)
        print(text + f"\n({time.perf_counter() - t0:.0f} s)\n", file=sys.stderr, flush=True)
    head = (f"# Benchmarks\n\nMeasured {datetime.date.today().isoformat()} on {_common.machine()}.\n"
            f"Command: `.venv/bin/python benchmarks/run_all.py --reps {args.reps}`. Each case alternates with its "
            "baselines in the same run; figures are medians.\n\n## Summary (slurmtorch / baseline; lower is faster)\n\n"
            + _common.table(["comparison", "ratio"], [[k, f"{v:.2f}x"] for k, v in ratios.items()]))
    Path(args.out).write_text(head + "\n\n" + "\n\n".join(sections) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
