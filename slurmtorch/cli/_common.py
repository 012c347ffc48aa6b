"""Edge helpers shared by the verbs: options declared from `Options`, and the provenance argv."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import typer

from slurmtorch.submit.options import Options

_FIELDS = {f.name: f for f in dataclasses.fields(Options)}

# Flags that change what happens, not what is submitted: they are left out of the
# `# Run with:` line so that a dry run prints exactly what a submission sends.
_NOT_IN_PROVENANCE = {"--dry-run", "--wait"}


def option(name: str) -> Any:
    """The typer option for `Options.<name>`: its flags and help live beside the field.

    Its CLI default is None ("not given"): the field's default applies in `Options.given`.
    """
    meta = _FIELDS[name].metadata
    return typer.Option(None, *meta["flags"], help=meta["help"], metavar=meta["metavar"])


def options(params: Mapping[str, Any], verb_only: tuple[str, ...], **edge: Any) -> Options:
    """`Options` from a verb's parsed parameters, less the verb's own (`verb_only`), with
    the values the verb resolved at the edge (`edge`)."""
    return Options.given({k: v for k, v in params.items() if k not in verb_only}, **edge)


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
