"""Helpers shared by test modules in different folders (tests/ is on sys.path: conftest.py lives here)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def st(testbed, home: Path, argv, **kw) -> subprocess.CompletedProcess:
    env = {"SLURMTORCH_HOME": str(home)}
    env.update(kw.pop("env", {}))
    return testbed.run([testbed.python, "-m", "slurmtorch.cli.main", *argv], env=env, **kw)


def wait_for(predicate, what: str, timeout: float, poll_s: float = 0.2):
    """`predicate()`'s first true value, polled every `poll_s`; a failed test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    pytest.fail(f"timed out waiting for {what}", pytrace=False)


def read(path: Path) -> str:
    """A file's text, '' while it is not there."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def rank_failure(folder: Path, script: str, *args: str, name: str = "train.py") -> str:
    """The stderr of one rank that ran `script` (written to `folder`/`name`) under the real
    bootstrap and failed: what its rank-R.err holds, its report included."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(script)
    env = {"PATH": os.environ["PATH"], "HOME": str(folder), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.bootstrap", "--from", "single", "--no-init", name, *args],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and f"rank 0 on {os.uname().nodename} failed:" in proc.stderr, proc.stderr
    return proc.stderr


def as_run(spec) -> str:
    """A spec's batch script as bash runs it: each `. "$SLURMTORCH_SH"/NAME` in its place holding
    that shell file, as the job folder's copy gives it (render.shell_files)."""
    from slurmtorch.submit.launch import render

    text = render.render_sbatch(spec)
    for name, body in render.shell_files(spec):
        text = text.replace(f'. "$SLURMTORCH_SH"/{name}\n', body)
    return text
