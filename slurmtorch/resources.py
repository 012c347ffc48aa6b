"""Find the bundled templates and site configs.

In a wheel they are package data (`slurmtorch/templates`, `slurmtorch/site-configs`);
in a source checkout (editable install) they sit at the repository root.
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _find(name: str) -> Path:
    for candidate in (_PKG / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"bundled folder {name!r} not found next to {_PKG}")


def templates_dir() -> Path:
    return _find("templates")


def site_configs_dir() -> Path:
    return _find("site-configs")

