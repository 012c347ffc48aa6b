"""1. Cold CLI render: `slurmtorch sbatch --dry-run` vs `torchx run --dryrun` vs importing typer+jinja2+yaml."""
from __future__ import annotations

import tempfile
from pathlib import Path

from _common import PY, REPO, Figure, alternate, med, ms, run, slurmtorch_cli, table, timed

# benchmarks/setup installs the pinned torchx here, apart from the project's .venv (whose
# packages are exactly what CI tests with).
TORCHX_VENV = REPO / "benchmarks" / ".venv"
TORCHX = TORCHX_VENV / "bin" / "torchx"
TARGETS = {"floor": 1.5, "torchx": 0.6}  # issue 28


def torchx_version() -> str | None:
    if not TORCHX.exists():
        return None
    return run([TORCHX_VENV / "bin" / "python", "-c",
                "from importlib.metadata import version; print(version('torchx'))"]).stdout.strip()


def run_bench(reps: int) -> tuple[str, list[Figure]]:
    tmp = Path(tempfile.mkdtemp(prefix="st-bench-render-"))
    (tmp / "train.py").write_text("print('hi')\n")
    dry_run = [*slurmtorch_cli(), "sbatch", "--site", "testbed", "--nodes", "4", "--dry-run", "train.py"]
    cases = {
        "slurmtorch": lambda: timed(dry_run, cwd=tmp),
        "floor": lambda: timed([PY, "-c", "import typer, jinja2, yaml"], cwd=tmp),
    }
    version = torchx_version()
    if version:
        cases["torchx"] = lambda: timed([TORCHX, "run", "--dryrun", "--scheduler", "slurm", "dist.ddp",
                                         "-j", "4x1", "--script", "train.py"], cwd=tmp)
    times = alternate(cases, reps)
    ours = med(times["slurmtorch"])
    rows = [[name + (f" {version}" if name == "torchx" else ""), ms(med(t)), f"{ours / med(t):.2f}x"]
            for name, t in times.items()]
    figures = [Figure(f"render vs {n}", ours / med(t), target=TARGETS.get(n))
               for n, t in times.items() if n != "slurmtorch"]
    text = ("## 1. Cold CLI render (`--dry-run`, a new process each time)\n\n"
            + table(["command", "median", "slurmtorch / this (lower is faster)"], rows)
            + "\n\nTargets: <= 0.6x torchx, <= 1.5x the floor (`python -c 'import typer, jinja2, yaml'`). "
            "Every run loads and validates the site from its YAML."
            + (f" torchx {version} runs from its own venv (`benchmarks/.venv`, made by `benchmarks/setup`)."
               if version else "\n\ntorchx is not installed (`benchmarks/setup` installs it): no torchx row."))
    return text, figures
