"""`slurmtorch`: compose the verbs and own the one error boundary.

Every SlurmtorchError (and every usage error) becomes `error: ...` (+ `tip: ...`)
on stderr and a non-zero exit, never a traceback. Anything else is a bug, but still
one `error:` line (+ a tip) and exit 70 (EX_SOFTWARE); SLURMTORCH_DEBUG=1 adds the
traceback. Rich tracebacks show no locals: a site's environment may hold secrets.
Nothing heavy is imported here, so `slurmtorch --help` stays fast; verbs import
what they need when they run.
"""

from __future__ import annotations

import os
import importlib
import sys
import traceback

import typer

try:  # typer >= 0.2x vendors click; its usage errors derive from TyperException
    from typer import TyperException as _UsageError  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older typer depends on click
    from click import ClickException as _UsageError

try:  # click >= 8.2 raises this for no_args_is_help instead of printing the help itself
    from click.exceptions import NoArgsIsHelpError as _NoArgsIsHelp
except ImportError:  # pragma: no cover
    _NoArgsIsHelp = ()  # type: ignore[misc,assignment]

from slurmtorch import __version__
from slurmtorch.cli._common import GroupedCommand, ProgramCommand
from slurmtorch.errors import SlurmtorchError

# With rich installed, typer < 0.20 escapes the `[required]` of an argument's help for
# rich's markup even when rich formats nothing (rich_markup_mode=None): help showed a
# literal `\\[required]`. Plain click formatting is what we use, so typer is told so.
typer.core.HAS_RICH = False

# verb -> (module in slurmtorch.cli, attribute, whether it runs a program). A call builds
# only the verb it runs: importing and wiring every verb's module (and typer's command
# objects for each) was a quarter of a dry run's own start-up. A verb that runs a program
# takes everything after SCRIPT (or -m MODULE) as the program's (_common.ProgramCommand).
_VERBS = {
    "sbatch": ("sbatch", "sbatch", True),
    "mpirun": ("mpirun", "mpirun", True),
    "chain": ("chain", "chain", False),
    "alloc": ("alloc", "alloc", False),
    "run": ("alloc", "run", True),
    "status": ("jobs", "status", False),
    "logs": ("jobs", "logs", False),
    "cancel": ("jobs", "cancel", False),
    "stacks": ("jobs", "stacks", False),
    "top": ("jobs", "top", False),
    "pull": ("pull", "pull", False),
    "clean": ("clean", "clean", False),
    "doctor": ("doctor", "doctor", False),
    "site": ("site", "app", False),
}


def build_app(verbs=None) -> typer.Typer:
    """The `slurmtorch` command with the given verbs (all of them by default)."""
    app = typer.Typer(
        name="slurmtorch",
        help="Launch PyTorch distributed training on Slurm and MPI clusters.",
        no_args_is_help=True,
        add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
        pretty_exceptions_show_locals=False,
        rich_markup_mode=None,
    )

    # A callback keeps `slurmtorch VERB ...` a group even when one verb is registered
    # (typer would otherwise run a lone command as the program itself).
    @app.callback()
    def _group(
        version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                     help="print slurmtorch's version and exit"),
    ) -> None:
        pass

    for verb in verbs or _VERBS:
        module, attr, runs_program = _VERBS[verb]
        target = getattr(importlib.import_module(f"{__package__}.{module}"), attr)
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=verb)
        else:
            app.command(verb, cls=ProgramCommand if runs_program else GroupedCommand)(target)
    return app


def _print_version(value: bool) -> None:
    if value:
        print(f"slurmtorch {__version__}")
        raise typer.Exit(0)


def _app_for(argv: list[str]) -> typer.Typer:
    """Only the verb in argv[0], if it is one; everything for --help or a typo."""
    return build_app([argv[0]] if argv and argv[0] in _VERBS else None)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run one verb and exit with its code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        rv = _app_for(argv)(args=argv, prog_name="slurmtorch", standalone_mode=False, obj={"argv": argv})
    except SlurmtorchError as e:
        print(e.render(), file=sys.stderr)
        sys.exit(e.exit_code)
    except _NoArgsIsHelp as e:  # bare `slurmtorch` (or `slurmtorch site`): the help, not an error line
        print(e.format_message(), file=sys.stderr)
        sys.exit(getattr(e, "exit_code", 2))
    except _UsageError as e:
        print(f"error: {e.format_message()}", file=sys.stderr)
        ctx = getattr(e, "ctx", None)
        if ctx is not None:
            print(f"tip: see '{ctx.command_path} --help'", file=sys.stderr)
        sys.exit(getattr(e, "exit_code", 2))
    except (typer.Abort, KeyboardInterrupt):
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - the last line of defence: no traceback for users
        sys.exit(_unexpected(e))
    sys.exit(rv if isinstance(rv, int) else 0)


EX_SOFTWARE = 70


def _unexpected(e: Exception) -> int:
    debug = os.environ.get("SLURMTORCH_DEBUG", "") not in ("", "0")
    if debug:
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
    detail = " ".join(str(e).split())  # one line, whatever the message holds
    print(f"error: unexpected {type(e).__name__}" + (f": {detail}" if detail else ""), file=sys.stderr)
    if not debug:
        print("tip: this is a slurmtorch bug; rerun with SLURMTORCH_DEBUG=1 for the traceback and report it",
              file=sys.stderr)
    return EX_SOFTWARE


if __name__ == "__main__":
    main()
