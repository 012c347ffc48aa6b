"""Helpers shared by test modules in different folders (tests/ is on sys.path: conftest.py lives here)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def st(testbed, home: Path, argv, **kw) -> subprocess.CompletedProcess:
    env = {"SLURMTORCH_HOME": str(home)}
    env.update(kw.pop("env", {}))
    return testbed.run([testbed.python, "-m", "slurmtorch.cli.main", *argv], env=env, **kw)
