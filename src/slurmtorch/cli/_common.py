"""Edge helpers shared by the verbs: site lookup, SCRIPT checks, provenance argv."""

from __future__ import annotations

import os

import typer

from ..errors import SpecError

# Flags that change what happens, not what is submitted: they are left out of the
# `# Run with:` line so that a dry run prints exactly what a submission sends.
_NOT_IN_PROVENANCE = {"--dry-run", "--wait"}


def provenance(ctx: typer.Context, verb: str) -> tuple[str, ...]:
    argv = list((ctx.obj or {}).get("argv") or [])
    out, passthrough = [], False
    for token in argv:
        if token == "--":
            passthrough = True
        if passthrough or token not in _NOT_IN_PROVENANCE:
            out.append(token)
    if not out or out[0] != verb:
        out.insert(0, verb)
    return ("slurmtorch", *out)


def split_script(script_and_args: list[str] | None, module: str | None) -> tuple[str | None, list[str]]:
    """SCRIPT [ARGS...] or -m MODULE [ARGS...]; SCRIPT must exist and becomes absolute."""
    items = list(script_and_args or [])
    if module is not None:
        return None, items
    if not items:
        raise SpecError("missing SCRIPT", tip="e.g. slurmtorch sbatch train.py -- --lr 0.1, or -m pkg.train")
    script, args = items[0], items[1:]
    if not os.path.isfile(script):
        raise SpecError(f"SCRIPT {script} does not exist", tip="check the path; use -m MODULE for a module")
    return os.path.abspath(script), args


def site_ref(site: str | None, fallback: str | None) -> str:
    ref = site or os.environ.get("SLURMTORCH_SITE") or fallback
    if not ref:
        raise SpecError("no site given", tip="pass --site NAME|PATH or set SLURMTORCH_SITE (see: slurmtorch site list)")
    return ref
