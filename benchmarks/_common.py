"""Shared pieces for the benchmarks: timing commands, alternating cases, medians, tables.

Every benchmark measures slurmtorch and its baselines in the same run, alternating
their order each repetition so drift (caches, thermal, other load) hits all alike.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
    # Installed packages run from .pyc; so must ours (a wheel install compiles them).
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    e.update(extra)
    return e


def run(argv, *, environ=None, timeout=300, cwd=None) -> subprocess.CompletedProcess:
    p = subprocess.run([str(a) for a in argv], env=environ or env(), cwd=cwd, capture_output=True,
                       text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def timed(argv, **kw) -> float:
    t0 = time.perf_counter()
    run(argv, **kw)
    return time.perf_counter() - t0


def alternate(cases: dict, reps: int, warmup: int = 1) -> dict[str, list[float]]:
    """Run each zero-argument callable `reps` times, rotating the order; returns seconds."""
    names = list(cases)
    for _ in range(warmup):
        for name in names:
            cases[name]()
    out = {name: [] for name in names}
    for i in range(reps):
        order = names[i % len(names):] + names[:i % len(names)]
        for name in order:
            out[name].append(cases[name]())
    return out


def med(xs) -> float:
    return statistics.median(xs)


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def ms(s: float) -> str:
    return f"{s * 1000:.0f} ms"


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def have(tool: str) -> bool:
    return shutil.which(tool, path=env()["PATH"]) is not None
