"""1. Cold CLI render: `slurmtorch sbatch --dry-run` vs `torchx run --dryrun` vs importing typer+jinja2+yaml."""
from __future__ import annotations

import tempfile
from pathlib import Path

from _common import BIN, alternate, have, med, ms, table, timed


def run(reps: int) -> tuple[str, dict]:
    tmp = Path(tempfile.mkdtemp(prefix="st-bench-render-"))
    (tmp / "train.py").write_text("print('hi')\n")
    cases = {
        "slurmtorch": lambda: timed([BIN / "slurmtorch", "sbatch", "train.py", "--site", "testbed", "--nodes", "4",
                                     "--dry-run"], cwd=tmp),
        "floor": lambda: timed([BIN / "python", "-c", "import typer, jinja2, yaml"], cwd=tmp),
    }
    if have("torchx"):
        cases["torchx"] = lambda: timed([BIN / "torchx", "run", "--dryrun", "--scheduler", "slurm", "dist.ddp",
                                         "-j", "4x1", "--script", "train.py"], cwd=tmp)
    times = alternate(cases, reps)
    ours = med(times["slurmtorch"])
    rows = [[name, ms(med(t)), f"{ours / med(t):.2f}x"] for name, t in times.items()]
    ratios = {f"render vs {n}": ours / med(t) for n, t in times.items() if n != "slurmtorch"}
    text = ("## 1. Cold CLI render (`--dry-run`, a new process each time)\n\n"
            + table(["command", "median", "slurmtorch / this"], rows)
            + "\n\nTargets: <= 0.45x torchx, <= 1.25x the floor (`python -c 'import typer, jinja2, yaml'`)."
            + ("" if "torchx" in times else "\n\ntorchx is not installed here (`benchmarks/setup` installs it)."))
    return text, ratios
