"""Shared pieces for the benchmarks: timing commands, alternating cases, medians, tables.

Every benchmark measures slurmtorch and its baselines in the same run, alternating
their order each repetition so drift (caches, thermal, other load) hits all alike.
"""

from __future__ import annotations

import os
import platform
import shutil
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PY = Path(sys.executable)


def tool(name: str) -> str | None:
    """A program beside this interpreter (a venv's mpirun), else on PATH; None when absent.
    The lent GPU machine has Open MPI from a carried wheel on PATH, not beside python."""
    beside = BIN / name
    return str(beside) if beside.exists() else shutil.which(name)


def mpirun(n: int) -> list:
    """`mpirun -n N --oversubscribe`: more ranks than cores is the point of some rows."""
    return [tool("mpirun") or "mpirun", "-n", n, "--oversubscribe"]


def slurmtorch_cli() -> list:
    """The `slurmtorch` console script, or the module where the package is only on PYTHONPATH."""
    script = BIN / "slurmtorch"
    return [script] if script.exists() else [PY, "-m", "slurmtorch.cli.main"]


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


def reported_steps(boot: list, script, variants: dict[str, dict[str, str]], reps: int) -> dict[str, list[float]]:
    """Run `boot + [script]` under each environment of `variants`, alternating, `reps` times;
    per variant, the `step_s <seconds>` each launch's rank 0 printed."""
    steps: dict[str, list[float]] = {k: [] for k in variants}

    def step(name: str) -> float:
        out = run([*boot, script], environ=variants[name]).stdout
        steps[name].append(float(re.search(r"step_s (\S+)", out).group(1)))
        return 0.0

    alternate({k: (lambda k=k: step(k)) for k in variants}, reps)
    return steps


@dataclass(frozen=True)
class Figure:
    """One number of the summary: this run's value, which way is better, and the target
    if there is one (met or missed is computed from the value, never written by hand)."""

    name: str
    value: float
    unit: str = "x"  # "x": slurmtorch / baseline; "ms": milliseconds
    better: str = "lower"  # "lower" or "higher"
    target: float | None = None

    def show(self, v: float | None = None) -> str:
        v = self.value if v is None else v
        return f"{v:.1f} ms" if self.unit == "ms" else f"{v:.2f}x"

    def met(self) -> bool | None:
        if self.target is None:
            return None
        return self.value <= self.target if self.better == "lower" else self.value >= self.target

    def target_text(self) -> str:
        if self.target is None:
            return "-"
        return ("<= " if self.better == "lower" else ">= ") + self.show(self.target)

    def verdict(self) -> str:
        met = self.met()
        return "-" if met is None else ("met" if met else "**missed**")


def summary(figures: list[Figure]) -> str:
    """The summary table: each figure with its direction, its target and met/missed."""
    rows = [[f.name, f.show(), f"{f.better} is better", f.target_text(), f.verdict()] for f in figures]
    return table(["comparison", "this run", "direction", "target", "result"], rows)


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


def have(name: str) -> bool:
    return tool(name) is not None


def python_can(code: str) -> bool:
    """Whether this interpreter runs `code` (e.g. an import) without error."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, env=env()).returncode == 0


def needs_mpi_and_torch() -> str | None:
    """Why a one-host section cannot run here (None: it can)."""
    if not have("mpirun"):
        return "no mpirun (Open MPI) beside this python or on PATH"
    if not python_can("import mpi4py, torch"):
        return "mpi4py or torch cannot be imported"
    return None
