"""Whether the job's python finds `-m MODULE` from the job's working folder, asked of that
python here before anything is submitted or run: a mistyped module otherwise queues, then
fails on every rank.

Found, not imported: `importlib.util.find_spec` of a dotted name imports its parents (a
package's `__init__` would run on the login node), so the probe asks each finder on
sys.meta_path for each part in turn with its parent's search path, as the import system
does, without executing anything. `python -c` puts the working folder first on sys.path,
as `python -m` does (neither under PYTHONSAFEPATH).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from slurmtorch.errors import SubmitError
from slurmtorch.submit.edge.runner import run

# Exit 0: found; 2: not found (the missing name on stdout); anything else: cannot tell.
_PROBE = r"""
import sys
parts = sys.argv[1].split(".")
path = None
for i in range(len(parts) + 1):
    if i == len(parts):
        if path is None:
            sys.exit(0)
        parts.append("__main__")  # `python -m PACKAGE` runs PACKAGE.__main__
    name = ".".join(parts[:i + 1])
    spec = None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(name, path) if find is not None else None
        if spec is not None:
            break
    if spec is None:
        print(name)
        sys.exit(2)
    if name.endswith(".__main__"):
        sys.exit(0)
    path = spec.submodule_search_locations
    if path is None and i < len(parts) - 1:
        print(".".join(parts[:i + 2]))
        sys.exit(2)
"""


def missing(python: str, module: str, folder: str, env: Mapping[str, str], timeout: float = 30) -> str | None:
    """The first part of `module` (or its package's `__main__`) that `python`, run in `folder`
    with `env` over ours, does not find; None where it finds it, or where it cannot tell (no
    such python here, a crash, no answer in time): better silent than a wrong refusal."""
    try:
        proc = run([python, "-c", _PROBE, module], timeout=timeout, check=False, cwd=folder,
                   env={**os.environ, **env})
    except SubmitError:
        return None
    name = proc.stdout.strip()
    return name if proc.returncode == 2 and name else None
