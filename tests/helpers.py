"""Helpers shared by test modules in different folders (tests/ is on sys.path: conftest.py lives here)."""

from __future__ import annotations

import subprocess
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
