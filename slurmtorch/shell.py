"""The one audited place where values meet a shell or a batch directive.

Everything a user types (script arguments, env values, job names, paths) goes
through `quote` before it is written into a script. Values that a directive
cannot carry at all (newlines, NUL) are refused, not passed on, and so is text
that is not UTF-8 (a lone surrogate, from a non-UTF-8 byte in argv or a file name:
the script could not even be written).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from slurmtorch.errors import ShellSafetyError

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def quote(value: object, what: str = "value") -> str:
    """Quote one value so a POSIX shell reads it back byte for byte. A leading `=` (NCCL's
    exact-name prefix) is quoted too: bash reads `export X==ib0` as X='=ib0', shellcheck as a
    mistyped comparison (SC1097), and a reader may well agree with shellcheck."""
    text = _utf8(value, what)
    if "\x00" in text:
        raise ShellSafetyError(f"{what} {text!r} contains a NUL byte, which no shell can carry")
    return "'" + text + "'" if text.startswith("=") and shlex.quote(text) == text else shlex.quote(text)


def _utf8(value: object, what: str) -> str:
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ShellSafetyError(
            f"{what} {text!r} is not UTF-8 text ({text[e.start]!r} at index {e.start})",
            tip="a byte that is not UTF-8 came from the command line or a file name; use UTF-8 names",
        ) from None
    return text


# $NAME or ${NAME}: the only expansion a site may put in an apptainer image path.
JOB_TIME_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


class JobTimeWord(str):
    """An argv word whose `$NAME`/`${NAME}` expand when the job runs (a site's image path, IDRIS's
    $SINGULARITY_ALLOWED_DIR/x.sif); `quote` writes everything else of it literally."""


def with_variables(text: str, what: str = "value") -> str:
    """One shell word: each `$NAME`/`${NAME}` of `text` as "${NAME}", the rest quoted; any other
    `$` is refused (it would be shell code, not a variable)."""
    parts, pos = [], 0
    for m in JOB_TIME_VAR.finditer(text):
        if m.start() > pos:
            parts.append(quote(text[pos:m.start()], what))
        parts.append('"${%s}"' % (m.group(1) or m.group(2)))
        pos = m.end()
    if pos < len(text):
        parts.append(quote(text[pos:], what))
    if "$" in JOB_TIME_VAR.sub("", text) or not parts:
        raise ShellSafetyError(f"{what} {text!r}: a '$' that is not $NAME or ${{NAME}}")
    return "".join(parts)


def join(argv: Iterable[object]) -> str:
    """Quote and join an argument vector."""
    return " ".join(quote(a) for a in argv)


def env_name(name: str) -> str:
    """Check an environment variable name; names are never quoted, so they must be plain."""
    if not _ENV_NAME.match(name):
        raise ShellSafetyError(
            f"invalid environment variable name {name!r}",
            tip="names are letters, digits and '_', not starting with a digit",
        )
    return name


def directive_value(value: object, what: str = "value") -> str:
    """Check a value for an `#SBATCH --opt=VALUE` line and quote it when needed.

    sbatch reads directives with its own parser, not a shell: a newline would end
    the directive and start a new script line, so it is refused.
    """
    text = _utf8(value, what)
    if any(c in text for c in "\n\r\x00"):
        raise ShellSafetyError(
            f"{what} {text!r} contains a newline or NUL, which an #SBATCH directive cannot carry"
        )
    if text and re.fullmatch(r"[A-Za-z0-9_.,:/@%+=\-\[\]]+", text):
        return text
    return shlex.quote(text)
