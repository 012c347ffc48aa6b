"""Snapshot: what `slurmtorch sbatch` adds to a submission to copy the code, beside copying
the same tree by hand, in the same run.

    cd benchmarks && ../.venv/bin/python snapshot.py [--reps N]

Two trees: this repository (its tracked and not-ignored files, as a job submitted from it
copies them) and a generated git repository of 1,000 files (50 folders x 20 files of 2 KiB).
Ours is the whole snapshot step of a submission (git's listing, the commit and the dirty
check, the copy with every file hashed, snapshot.json), in-process as `sbatch.submit` runs
it. The baselines, each a fresh process like ours would be part of one: `git archive HEAD |
tar -x` (committed files only, no hashing) and `git ls-files | xargs cp --parents` (the same
file list as ours, copied by cp).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from _common import REPO, alternate, med, ms, table

from slurmtorch.submit.edge.git import git
from slurmtorch.submit.jobfolder import codecopy, snapshot

LISTING = "git ls-files -z --cached --others --exclude-standard"


def make_tree(root: Path, folders: int = 50, per_folder: int = 20, size: int = 2048) -> Path:
    """A git repository of folders x per_folder files of `size` bytes, committed."""
    root.mkdir()
    line = "x = 'abcdefghijklmnopqrstuvwxyz0123456789' * 1  # filler of a typical source line\n"
    body = (line * (size // len(line) + 1))[:size]
    for d in range(folders):
        (root / f"pkg{d:02d}").mkdir()
        for f in range(per_folder):
            (root / f"pkg{d:02d}" / f"mod{f:02d}.py").write_text(f"# {d} {f}\n" + body)
    (root / "train.py").write_text("print('hi')\n")
    for argv in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.email=b@example.invalid", "-c", "user.name=b", "commit", "-qm", "tree"]):
        subprocess.run(["git", "-C", str(root), *argv], check=True, capture_output=True)
    return root


def fresh(scratch: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=scratch))


def ours(tree: Path, scratch: Path) -> float:
    folder = fresh(scratch)
    t0 = time.perf_counter()
    snap = snapshot.locate(str(tree / "train.py"), None, str(tree))
    codecopy.take(snap, folder, git, 1 << 40)
    return time.perf_counter() - t0


def shell(command: str, tree: Path, scratch: Path) -> float:
    dest = fresh(scratch)
    t0 = time.perf_counter()
    subprocess.run(["bash", "-c", command.format(dest=dest)], cwd=tree, check=True, capture_output=True)
    return time.perf_counter() - t0


def measure(name: str, tree: Path, reps: int, scratch: Path) -> list:
    cases = {
        "slurmtorch snapshot": lambda: ours(tree, scratch),
        "git archive + tar -x": lambda: shell("git archive HEAD | tar -x -C {dest}", tree, scratch),
        "git ls-files + xargs cp --parents": lambda: shell(f"{LISTING} | xargs -0 cp -P --parents -t {{dest}}",
                                                           tree, scratch),
    }
    times = alternate(cases, reps)
    folder = fresh(scratch)
    record = codecopy.take(snapshot.locate(str(tree / "train.py"), None, str(tree)), folder, git, 1 << 40)
    mine = med(times["slurmtorch snapshot"])
    return [[name, case, f"{record['files']} files, {record['bytes'] / (1 << 20):.2f} MiB", ms(med(t)),
             f"{mine / med(t):.2f}x"] for case, t in times.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    reps = parser.parse_args().reps
    scratch = Path(tempfile.mkdtemp(prefix="st-bench-snapshot-"))
    try:
        generated = make_tree(scratch / "tree1000")
        rows = measure("1,000-file repository", generated, reps, scratch)
        # This repository as a job whose script sits at its root snapshots it (locate needs only the path).
        rows += measure("this repository", REPO, reps, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"## Snapshot at submission (median of {reps}, alternating order)\n")
    print(table(["tree", "how", "the snapshot holds", "median", "slurmtorch / this"], rows))


if __name__ == "__main__":
    main()
