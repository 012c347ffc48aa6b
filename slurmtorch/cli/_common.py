"""Edge helpers shared by the verbs: options declared from `Options`, the program's
arguments as typed (everything after SCRIPT or -m MODULE), and the provenance argv."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, List, Optional

import typer
from typer.core import TyperCommand

from slurmtorch import protocol
from slurmtorch.errors import SpecError
from slurmtorch.submit.options import Options

_FIELDS = {f.name: f for f in fields(Options)}

# Flags that change what happens, not what is submitted: they are left out of the
# `# Run with:` line so that a dry run prints exactly what a submission sends.
_NOT_IN_PROVENANCE = {"--dry-run", "--wait", "--cancel-on-interrupt", "--parsable"}


def option(name: str) -> Any:
    """The typer option for `Options.<name>`: its flags and help live beside the field.

    Its CLI default is None ("not given"): the field's default applies in `Options.given`.
    """
    meta = _FIELDS[name].metadata
    return typer.Option(None, *meta["flags"], help=meta["help"], metavar=meta["metavar"])


# An Options field's type (a string: the module uses postponed annotations) -> its CLI type.
_CLI_TYPES = {"int | None": Optional[int], "str | None": Optional[str], "bool | None": Optional[bool],
              "tuple[str, ...]": Optional[List[str]]}


def cli_type(name: str) -> Any:
    """The CLI type of the option `Options.<name>`; a field that is no option, or whose type
    the table lacks, is refused here, when a verb is declared, by name and with the fix."""
    f = _FIELDS.get(name)
    if f is None or "flags" not in f.metadata:
        raise TypeError(f"Options.{name} is not a CLI option: declare it in submit/options.py with _flag(...)")
    if f.type not in _CLI_TYPES:
        raise TypeError(f"Options.{name} is {f.type!r}, which has no CLI type: add it to _CLI_TYPES in "
                        f"{__name__} (known: {', '.join(_CLI_TYPES)})")
    return _CLI_TYPES[f.type]


def with_options(*names: str):
    """Give a verb the option of each `Options` field in `names` (typer reads the signature).

    They come after the verb's SCRIPT argument and before its own options; the verb takes
    them as `**given` and hands `ctx.params` to `options`. Their types are real objects,
    not strings: typer would otherwise evaluate each annotation on every call.
    """
    def wrap(verb):
        sig = inspect.signature(verb)
        params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
        lead = [p for p in params if p.name in ("ctx", "script_and_args")]
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=cli_type(name),
                                   default=option(name)) for name in names]
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params if p not in lead]
        verb.__signature__ = sig.replace(parameters=[*lead, *added, *own])
        verb.__annotations__ = {**verb.__annotations__, **{p.name: p.annotation for p in added}}
        return verb
    return wrap


def options(params: Mapping[str, Any], verb_only: tuple[str, ...], **edge: Any) -> Options:
    """`Options` from a verb's parsed parameters, less the verb's own (`verb_only`), with
    the values the verb resolved at the edge (`edge`)."""
    return Options.given({k: v for k, v in params.items() if k not in verb_only}, **edge)


class ProgramCommand(TyperCommand):
    """A verb that runs a program: its options end at SCRIPT, or with `-m MODULE`.

    As with sbatch, srun and torchrun, everything after SCRIPT goes to the script as
    typed (`train.py --lr 1e-3 -n 2` is three arguments of train.py's), and after
    `-m MODULE` to the module, as with `python -m`. Click stops at the first positional
    argument (allow_interspersed_args=False); `-m` takes its value and then ends the
    options too, the rest becoming the module's arguments.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allow_interspersed_args = False

    def make_parser(self, ctx):
        parser = super().make_parser(ctx)
        # click's parser keeps its options by flag (_long_opt/_short_opt, private but the
        # same throughout click 8); tests/cli/test_program_args.py pins the behaviour.
        for opt in {*parser._long_opt.values(), *parser._short_opt.values()}:
            if opt.dest == "module":
                opt.process = _ends_options(opt.process)  # type: ignore[method-assign]
        return parser


def _ends_options(process):
    def process_then_stop(value, state):
        process(value, state)
        state.largs.extend(state.rargs)  # the rest is the module's, as typed
        del state.rargs[:]
    return process_then_stop


def program_args(ctx: typer.Context, script_and_args: list[str] | None) -> list[str]:
    """SCRIPT and its arguments (or MODULE's arguments) as typed, refusing the one form that
    changed meaning: slurmtorch options between SCRIPT and a later `--`.

    `slurmtorch sbatch train.py --nodes 2 -- --lr 1` once gave --nodes to slurmtorch and
    --lr to the script; now both go to the script, which is almost never meant.
    """
    items = list(script_and_args or [])
    rest = items[1:] if ctx.params.get("module") is None else items
    if "--" not in rest or rest[:1] == ["--"]:
        return items
    ours = {flag for p in ctx.command.params for flag in (*p.opts, *p.secondary_opts) if flag.startswith("-")}
    mine = [t for t in rest[:rest.index("--")] if t.split("=", 1)[0] in ours]
    if mine:
        where = "SCRIPT" if ctx.params.get("module") is None else "-m MODULE"
        raise SpecError(f"slurmtorch option {mine[0]} after {where}, before a '--': everything after {where} "
                        "goes to the program, as with sbatch and torchrun",
                        tip=f"put slurmtorch's options before {where}; for the program's own {mine[0]}, start "
                            f"its arguments with '--' ({where} -- {mine[0]} ...)")
    return items


def cluster_option() -> Any:
    """`--cluster NAME`: the verb runs on that cluster of the clusters file, over SSH."""
    return typer.Option(None, "--cluster", envvar=protocol.CLUSTER, metavar="NAME", show_envvar=False,
                        help="run this on cluster NAME of ~/.config/slurmtorch/clusters.yaml, over SSH "
                             "(default: $SLURMTORCH_CLUSTER)")


def on_cluster(ctx: typer.Context, cluster: str | None, **kw: Any) -> int | None:
    """The verb's exit code once it ran on `cluster` over SSH; None where it runs here (no
    cluster given, or this process is that cluster's side of it)."""
    if not cluster:
        return None
    from slurmtorch.remote import forward  # lazy: only --cluster needs ssh's edge

    if not forward.elsewhere(cluster):
        return None
    return forward.verb(cluster, list((ctx.obj or {}).get("argv") or []), **kw)


def provenance(ctx: typer.Context, verb: str, program: int = 0) -> tuple[str, ...]:
    """`slurmtorch VERB ...` as typed, less the flags that change nothing submitted; the
    last `program` words (SCRIPT and its arguments) are kept as they are."""
    argv = list((ctx.obj or {}).get("argv") or [])
    head, tail = argv[:len(argv) - program], argv[len(argv) - program:]
    out, passthrough = [], False
    for token in head:
        if token == "--":
            passthrough = True
        if passthrough or token not in _NOT_IN_PROVENANCE:
            out.append(token)
    out.extend(tail)
    if not out or out[0] != verb:
        out.insert(0, verb)
    return ("slurmtorch", *out)
