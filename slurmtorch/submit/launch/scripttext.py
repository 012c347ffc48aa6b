"""The filters that put values into a script's text: quoted, never spliced.

`script_quote` is `shell.quote` (the one audited quoting path) with bash's `$'...'` for
control characters, plus the few expansions a script must leave to the job: the job's folder
(`containers.InJobFolder`), its copy of the code (`InCode`), a site's `$NAME` in an image path
or `env:` value (`shell.JobTimeWord`), a variable the script exported (`ExportedValue`), the
job's python named once (`Interpreter`), and the script's own words (`ShellWord`).
`composed_path` writes a `prepend_path`/`append_path` over a variable's own value; `comment_quote`
keeps an argument on its comment line. The renderer's Jinja filters.
"""

from __future__ import annotations

import re

from slurmtorch import protocol, shell
from slurmtorch.submit.launch.containers import InJobFolder


class InCode(str):
    """A path inside the job's snapshot: the script prints it as "$SLURMTORCH_CODE"/'path',
    the snapshot's place (the job folder) known only once the job has an id."""


class Interpreter(str):
    """The job's python on the host: the script names it once (`python=...`) and its steps run
    "$python" (launchplan.Launch.python)."""


class ShellWord(str):
    """A word of ours that the script's shell expands (`"$ray_head"`, `--nodes="$SLURM_JOB_NUM_NODES"`),
    written as it is: only constants of this package, never a value a user or a site gave."""


class ExportedValue(str):
    """`NAME=` the value the script exported above, for a launcher's `--env NAME=VALUE` (Cray PALS):
    printed as NAME="$NAME", so a composed path (prepend_path) reaches it as the job composed it."""

    def __new__(cls, name: str) -> ExportedValue:
        return super().__new__(cls, shell.env_name(name))


def comment_quote(argv: str | tuple[str, ...] | list[str]) -> str:
    """Quote argv (or one word) for a comment: copy-pasteable, and never a second line.

    shell.quote keeps a newline literally, which inside a comment would end it and
    turn the rest into a script line; such arguments use bash's $'...' instead.
    """
    if isinstance(argv, str):
        argv = [argv]
    parts = []
    for arg in argv:
        quoted = shell.quote(arg)  # the audited path: refuses NUL and text that is not UTF-8
        if re.search(r"[\x00-\x1f\x7f]", arg):
            parts.append("$'" + "".join(_ansi_c_char(c) for c in arg) + "'")
        else:
            parts.append(quoted)
    return " ".join(parts)


def script_quote(value: object) -> str:
    """`shell.quote`, except that a value with control characters uses bash's `$'...'`.

    A raw CR before a newline makes sbatch refuse the whole script ("DOS line breaks"),
    and a raw ESC or newline in a script is a trap for whoever reads it; `$'...'` keeps
    every command on one line and reads back byte for byte. Our scripts are bash.
    """
    if isinstance(value, shell.JobTimeWord):  # a site's image path or env value with $NAME: expanded on the node
        return shell.with_variables(value, what="job-time value")
    if isinstance(value, InCode):
        return f'"${protocol.CODE}"/' + script_quote(str(value))
    if isinstance(value, Interpreter):
        return '"$python"'
    if isinstance(value, ShellWord):  # ours, constant: see the class
        return str(value)
    if isinstance(value, ExportedValue):  # the name was checked (shell.env_name): a plain word
        return f'{value}="${value}"'
    if isinstance(value, InJobFolder):  # the one expansion: the job's folder, known when it runs
        return (script_quote(value.prefix) if value.prefix else "") + '"$SLURMTORCH_JOB_DIR"/' + \
            script_quote(value.name)
    text = str(value)
    quoted = shell.quote(text)  # the audited path; refuses NUL
    return comment_quote([text]) if re.search(r"[\x00-\x1f\x7f]", text) else quoted


def script_join(argv) -> str:
    return " ".join(script_quote(a) for a in argv)


def _ansi_c_char(c: str) -> str:
    special = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    if c in special:
        return special[c]
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\x{ord(c):02x}"
    return c


def composed_path(edit: tuple[str, tuple[str, ...], tuple[str, ...]]) -> str:
    """The value of `export NAME=...` for a path composition that keeps NAME's value.

    `front:$NAME:back`, the ':' beside $NAME only when NAME is set and not empty. The folders
    (admin text) are quoted by the one quoting path; the expansion is ours, written from the
    checked name alone, and double-quoted so that no shell splits or globs it.
    """
    name, front, back = edit
    shell.env_name(name)
    text = script_quote(":".join(front)) if front else ""
    if front:
        text += f'"${{{name}:+:${name}}}"'
    else:
        text += f'"${{{name}:+${name}:}}"'
    if back:
        text += script_quote((":" if front else "") + ":".join(back))
    return text
