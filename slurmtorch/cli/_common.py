"""Edge helper shared by the verbs: the provenance argv for the `# Run with:` line."""

from __future__ import annotations

import typer


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


def site_ref(site: str | None, fallback: str | None) -> str:
    """`sites.site_ref`, imported only when a verb runs (keeps `slurmtorch --help` light)."""
    from slurmtorch.submit.sites import site_ref as resolve

    return resolve(site, fallback)
