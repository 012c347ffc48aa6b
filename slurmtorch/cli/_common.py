"""Edge helpers shared by the verbs: options declared from `Options`, the program's
arguments as typed (everything after SCRIPT or -m MODULE), and the provenance argv."""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import fields
from typing import Any, List, Optional

import typer
from typer.core import TyperCommand

try:  # click >= 8.2: the value of an option typed without one (flag_value with is_flag=False)
    from click._utils import FLAG_NEEDS_VALUE
except ImportError:  # pragma: no cover - click 8.0/8.1
    from click.parser import _flag_needs_value as FLAG_NEEDS_VALUE  # type: ignore[no-redef]

from slurmtorch import protocol
from slurmtorch.errors import SpecError
from slurmtorch.options import Options

_FIELDS = {f.name: f for f in fields(Options)}

# Flags that change what happens, not what is submitted: they are left out of the
# `# Run with:` line so that a dry run prints exactly what a submission sends.
_NOT_IN_PROVENANCE = {"--dry-run", "--wait", "--cancel-on-interrupt", "--parsable"}


def option(name: str, help: str | None = None) -> Any:
    """The typer option for `Options.<name>`: its flags and help live beside the field (`help`:
    a verb's own, where the field's would say something untrue of it).

    Its CLI default is None ("not given"): the field's default applies in `Options.given`.
    """
    meta = _FIELDS[name].metadata
    return typer.Option(None, *meta["flags"], help=help or meta["help"], metavar=meta["metavar"])


# An Options field's type (a string: the module uses postponed annotations) -> its CLI type.
_CLI_TYPES = {"int | None": Optional[int], "float | None": Optional[float], "str | None": Optional[str],
              "bool | None": Optional[bool],
              "tuple[str, ...]": Optional[List[str]]}


def cli_type(name: str) -> Any:
    """The CLI type of the option `Options.<name>`; a field that is no option, or whose type
    the table lacks, is refused here, when a verb is declared, by name and with the fix."""
    f = _FIELDS.get(name)
    if f is None or "flags" not in f.metadata:
        raise TypeError(f"Options.{name} is not a CLI option: declare it in options.py with _flag(...)")
    if f.type not in _CLI_TYPES:
        raise TypeError(f"Options.{name} is {f.type!r}, which has no CLI type: add it to _CLI_TYPES in "
                        f"{__name__} (known: {', '.join(_CLI_TYPES)})")
    return _CLI_TYPES[f.type]


def with_options(*names: str, helps: Mapping[str, str] | None = None):
    """Give a verb the option of each `Options` field in `names` (typer reads the signature);
    `helps`: the verb's own help for some of them (alloc has no SCRIPT to name its job after).

    They come after the verb's SCRIPT argument and before its own options; the verb takes
    them as `**given` and hands `ctx.params` to `options`. Their types are real objects,
    not strings: typer would otherwise evaluate each annotation on every call.
    """
    def wrap(verb):
        sig = inspect.signature(verb)
        params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
        lead = [p for p in params if p.name in ("ctx", "script_and_args")]
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=cli_type(name),
                                   default=option(name, (helps or {}).get(name))) for name in names]
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params if p not in lead]
        verb.__signature__ = sig.replace(parameters=[*lead, *added, *own])
        verb.__annotations__ = {**verb.__annotations__, **{p.name: p.annotation for p in added}}
        return verb
    return wrap


def options(params: Mapping[str, Any], verb_only: tuple[str, ...], **edge: Any) -> Options:
    """`Options` from a verb's parsed parameters, less the verb's own (`verb_only`), with
    the values the verb resolved at the edge (`edge`)."""
    return Options.given({k: v for k, v in params.items() if k not in verb_only}, **edge)


# `--help` in groups, as sbatch(1) groups its options; an option not named here is in OTHER.
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Where and how big", ("site", "preset", "partition", "nodes", "ntasks", "ntasks_per_node", "gpus_per_node",
                           "cpus_per_task", "mem", "mem_per_cpu", "mem_per_gpu", "exclusive", "constraint", "gres",
                           "nodelist", "exclude", "hostfile", "reservation", "time", "account", "qos")),
    ("What runs", ("module", "launcher", "backend", "timeout", "placement", "env", "local_rank_arg", "init_args",
                   "no_init", "cluster_spec", "container_image", "container_runtime", "roles", "role_images", "ray", "snapshot")),
    ("Sweeps, restarts and signals", ("array", "sweep", "max_restarts", "spare_nodes", "hang_timeout",
                                      "replace_straggler", "requeue", "signal")),
    ("When and who is told", ("job_name", "dependency", "begin", "mail_type", "mail_user", "comment")),
    ("Following it", ("dry_run", "wait", "cancel_on_interrupt", "parsable", "cluster")),
    ("Passed on as typed", ("sbatch_args", "srun_args", "mpirun_args")),
)
OTHER = "Other options"
# The options that say what slurmtorch does with the job rather than what the job is
# (print it, follow it, where to submit it): refused after the program without a `--`.
ACTING = frozenset(dict(SECTIONS)["Following it"])


def sections(names: Sequence[str]) -> list[tuple[str, list[str]]]:
    """`names` (a verb's options) in SECTIONS' groups and order, those in none last in their
    own order, empty groups left out (pure)."""
    given = set(names)
    out = [(title, [n for n in members if n in given]) for title, members in SECTIONS]
    placed = {n for _, members in SECTIONS for n in members}
    out.append((OTHER, [n for n in names if n not in placed]))
    return [(title, members) for title, members in out if members]


class GroupedCommand(TyperCommand):
    """A verb whose `--help` lists its options in SECTIONS' groups, when it has enough of them
    to need it (sbatch's ~50 in one list were hard to read). An option with a value of its own
    when typed alone (`Options` field metadata `bare`) gets it here: typer < 0.20 passes no
    `flag_value` on to click."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            bare = _FIELDS[param.name].metadata.get("bare") if param.name in _FIELDS else None
            if bare:
                param.flag_value, param._flag_needs_value = bare[0], True  # type: ignore[attr-defined]

    def format_options(self, ctx, formatter) -> None:
        records = [(p, record) for p in self.get_params(ctx) if (record := p.get_help_record(ctx)) is not None]
        options = {p.name or "": record for p, record in records if p.param_type_name == "option"}
        if len(options) < 12:
            return super().format_options(ctx, formatter)
        arguments = [record for p, record in records if p.param_type_name == "argument"]
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        for title, names in sections(list(options)):
            with formatter.section(title):
                formatter.write_dl([options[name] for name in names])


class ProgramCommand(GroupedCommand):
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
        bare = {name: _FIELDS[name].metadata["bare"][1] for name in _FIELDS if _FIELDS[name].metadata.get("bare")}
        parser._get_value_from_state = _value_only_if(bare, parser._get_value_from_state)  # type: ignore[method-assign]
        return parser


def _ends_options(process):
    def process_then_stop(value, state):
        process(value, state)
        state.largs.extend(state.rargs)  # the rest is the module's, as typed
        del state.rargs[:]
    return process_then_stop


def _value_only_if(accepts: Mapping[str, Any], get_value):
    """click's reading of an option's value from the words that follow (`--opt VALUE`; the
    `--opt=VALUE` form never asks it), where an option of `accepts` takes the next word only
    when that word is one of its values: else it stands alone (its flag value), and the word
    stays, SCRIPT as typed."""
    def value_from_state(option_name, option, state):
        accepted = accepts.get(option.dest)
        if accepted is not None and state.rargs and not accepted(state.rargs[0]):
            return FLAG_NEEDS_VALUE
        return get_value(option_name, option, state)
    return value_from_state


def program_args(ctx: typer.Context, script_and_args: list[str] | None) -> list[str]:
    """SCRIPT and its arguments (or MODULE's arguments) as typed; slurmtorch's own options
    among them are refused before a later `--` and otherwise named in one warning.

    `slurmtorch sbatch train.py --nodes 2 -- --lr 1` once gave --nodes to slurmtorch and
    --lr to the script; now both go to the script, which is almost never meant. Without
    the `--`, `train.py --nodes 2` is kept (the script may have its own --nodes) but said:
    the job would otherwise run on one node without a word. Ours that say what slurmtorch
    does rather than what the job is (ACTING: `train.py --dry-run` submitted a real job) are
    refused there too: nothing typed after the program may make slurmtorch act as it was not
    asked. A `--` right after the program says its arguments are its own, and silences all.
    """
    items = list(script_and_args or [])
    module = ctx.params.get("module")
    rest = items[1:] if module is None else items
    if rest[:1] == ["--"]:
        return items
    params = [p for p in ctx.command.params if p.name]
    ours = {flag for p in params for flag in (*p.opts, *p.secondary_opts) if flag.startswith("-")}
    mine = stray_options(rest[:rest.index("--")] if "--" in rest else rest, ours)
    if not mine:
        return items
    where = "SCRIPT" if module is None else "-m MODULE"
    if "--" in rest:
        raise SpecError(f"slurmtorch option {mine[0]} after {where}, before a '--': everything after {where} "
                        "goes to the program, as with sbatch and torchrun",
                        tip=f"put slurmtorch's options before {where}; for the program's own {mine[0]}, start "
                            f"its arguments with '--' ({where} -- {mine[0]} ...)")
    program = "script" if module is None else "module"
    shown = items[0] if module is None else f"-m {module}"
    acting = {flag for p in params if p.name in ACTING for flag in (*p.opts, *p.secondary_opts)}
    refused = [flag for flag in mine if flag in acting]
    if refused:
        flags, verb = " ".join(refused), ctx.info_name or "sbatch"
        raise SpecError(f"{', '.join(refused)} after {shown} would go to the {program}, and slurmtorch would go on "
                        f"without {'it' if len(refused) == 1 else 'them'}: refused, nothing "
                        f"{'submitted' if verb == 'sbatch' else 'run'}",
                        tip=f"for slurmtorch, before it: slurmtorch {verb} {flags} {shown} ...; for the {program}, "
                            f"after a '--': {shown} -- {flags}")
    if not os.environ.get(protocol.ON_CLUSTER):  # a forwarded verb: the laptop's side said it
        print(f"warning: {', '.join(mine)} after {shown} "
              f"{'goes' if len(mine) == 1 else 'go'} to the {program}, not to slurmtorch (put slurmtorch's options "
              f"before the {program}; use -- before the {program}'s own to silence this)", file=sys.stderr)
    return items


def stray_options(words: Sequence[str], ours: Collection[str]) -> list[str]:
    """The flags of `ours` among `words` (`--nodes`, `-N`, `--env=K=V`), each named once and
    without its value, which may be a secret. `-N2` is left out: a script's `-data` reads so too."""
    named = [w.split("=", 1)[0] if w.startswith("--") else w for w in words]
    return list(dict.fromkeys(w for w in named if w in ours))


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
