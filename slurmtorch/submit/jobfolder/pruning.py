"""Only the newest ended run folders stay: a Distributor's (`usecases.runfolder`) and a local
`slurmtorch mpirun` run's (`localrun`), each kept for its logs, stacks and reports a while."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

_PRUNING = ".pruning-"  # a folder being removed: renamed first, so nobody reads half of one


def prune_ended(runs: Path, keep: int, marker: str = "ended") -> list[Path]:
    """Remove the ended run folders under `runs` but the newest `keep` (by when they were
    marked: their file `marker`); returns those removed. Only folders of its own (no links
    followed) marked ended; each is renamed away before it is removed, so two pruners never both remove one
    and `Job.logs` of a pruned run finds no folder rather than half of one."""
    marked = []
    for folder in runs.iterdir() if runs.is_dir() else ():
        if folder.name.startswith(_PRUNING):  # a pruner stopped half way: finish its work
            shutil.rmtree(folder, ignore_errors=True)
            continue
        try:
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                continue
            marked.append((os.lstat(folder / marker).st_mtime, folder.name, folder))
        except OSError:
            continue  # not ended (running, or an answer nobody asked for), or not ours
    marked.sort(reverse=True)
    removed = []
    for _, name, folder in marked[keep:]:
        if remove(folder):
            removed.append(folder)
    return removed


def remove(folder: Path) -> bool:
    """Remove `folder`, renamed away first (`.pruning-<name>`), so that nobody reads half of
    it and two removers never both remove it; False where another got there first."""
    doomed = folder.parent / f"{_PRUNING}{folder.name}"
    try:
        os.rename(folder, doomed)
    except OSError:
        return False
    shutil.rmtree(doomed, ignore_errors=True)
    return True
