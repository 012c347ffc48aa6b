"""The command a job was submitted with, as its script's `# Run with:` comment says it: every
--env value left out (the export lines carry them, often secrets), the names kept."""

from __future__ import annotations


def redact_env(command: tuple[str, ...] | list[str], script_args: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
    """The command line for script.sh's `# Run with:` comment, --env values out (`--env NAME=...`).

    The export lines already carry the values, and they are often secrets (tokens, keys):
    written a second time, a comment is one more copy to leak in a pasted script. The
    names stay, so the line still says what was set. The script's own arguments are kept
    as typed: those after `--`, and `script_args` where the command ends with them.
    """
    keep = len(script_args)
    if not 0 < keep <= len(command) or tuple(command[len(command) - keep:]) != tuple(script_args):
        keep = 0
    out: list[str] = []
    tokens = iter(command[:len(command) - keep])
    for token in tokens:
        if token == "--":
            out.append(token)
            out.extend(tokens)
            break
        if token == "--env":
            out.append(token)
            value = next(tokens, None)
            if value is not None:
                out.append(_redacted(value))
        elif token.startswith("--env="):
            out.append("--env=" + _redacted(token[len("--env="):]))
        else:
            out.append(token)
    return (*out, *command[len(command) - keep:])


def _redacted(item: str) -> str:
    name, eq, _ = item.partition("=")
    return f"{name}=..." if eq else item
