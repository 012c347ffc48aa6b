"""Typed errors that render their own one-line message and an optional tip.

The CLI catches `SlurmtorchError` once, prints `error: <message>` (and
`tip: <tip>`) on stderr and exits non-zero; nothing user-facing is a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from slurmtorch import protocol


# Verbs whose words after SCRIPT are the script's: `--cluster NAME` goes before them.
_PROGRAM_VERBS = ("sbatch", "run", "mpirun")


def typed(words: str, cluster: str | None = None, env: Mapping[str, str] = os.environ) -> str:
    """`slurmtorch WORDS` as the user must type it where they read it: through `--cluster
    NAME` (`cluster`, or on the cluster's side of the relay $SLURMTORCH_ON_CLUSTER, which
    serve sets to the laptop's NAME), with `--cluster NAME`, where the verb reads it as its
    own. Every tip and report line that names a slurmtorch command is built here, so none
    names one that fails where it is typed (`slurmtorch cancel 44` on a laptop: no squeue)."""
    forwarded = env.get(protocol.ON_CLUSTER, "")
    cluster = cluster or (forwarded if forwarded != "1" else "")
    if not cluster:
        return f"slurmtorch {words}"
    verb, _, rest = words.partition(" ")
    if verb in _PROGRAM_VERBS:
        return f"slurmtorch {verb} --cluster {cluster} {rest}".rstrip()
    return f"slurmtorch {words} --cluster {cluster}"


class SlurmtorchError(Exception):
    """Base of every error a user can cause or fix."""

    exit_code = 2

    def __init__(self, message: str, tip: str | None = None):
        super().__init__(message)
        self.message = message
        self.tip = tip

    def render(self) -> str:
        text = f"error: {self.message}"
        if self.tip:
            text += f"\ntip: {self.tip}"
        return text


class SiteError(SlurmtorchError):
    """A site config that cannot be found, parsed or validated.

    Validation reports every problem of a file at once: `problems` holds each as
    (message, tip), the first being this error's own; `source` is the file to run
    `slurmtorch site validate` on for the rest (already quoted for a shell).
    """

    def __init__(self, message: str, tip: str | None = None,
                 problems: tuple[tuple[str, str | None], ...] = (), source: str | None = None):
        super().__init__(message, tip)
        self.problems = tuple(problems) or ((message, tip),)
        self.source = source

    def render(self) -> str:
        """The first problem; with more, where to see them all (`render_all`)."""
        more = len(self.problems) - 1
        if more and self.source:
            text = f"error: {self.message} (and {more} more: slurmtorch site validate {self.source})"
            return text + (f"\ntip: {self.tip}" if self.tip else "")
        return super().render()

    def render_all(self) -> str:
        """Every problem, each on its own `error:` line, its tip on the next."""
        lines = []
        for message, tip in self.problems:
            lines.append(f"error: {message}")
            if tip:
                lines.append(f"tip: {tip}")
        return "\n".join(lines)


class SpecError(SlurmtorchError):
    """Options that the site/partition/node type cannot satisfy."""


class LimitError(SpecError):
    """A batch job beyond its partition's (or QOS's) limits: each limit it breaks on a line of its
    own, the last with the site's entry that would take the job (or that none would), so that one
    run says all of it; `message` is the same on one line (the Python API's)."""

    def __init__(self, problems: tuple[str, ...], taker: str, tip: str | None = None):
        super().__init__("; ".join((*problems, taker)), tip)
        self.problems = problems
        self.taker = taker
        self._said = self.message

    def render(self) -> str:
        # Words a caller put before the message (a chain's `part 'ev': `) go before each line.
        if not self.message.endswith(self._said):
            return super().render()
        prefix = self.message[:len(self.message) - len(self._said)]
        lines = [f"error: {prefix}{p}" for p in self.problems]
        lines[-1] += f"; {self.taker}"
        return "\n".join(lines) + (f"\ntip: {self.tip}" if self.tip else "")


class ShellSafetyError(SpecError):
    """A value that a shell or a batch directive cannot carry safely."""


class TemplateError(SlurmtorchError):
    """A template that is missing or fails to render."""


class SubmitError(SlurmtorchError):
    """The scheduler or launcher refused or failed; carries argv and output."""

    exit_code = 1

    def __init__(self, message, tip=None, argv=None, returncode=None, stdout="", stderr=""):
        super().__init__(message, tip)
        self.argv = list(argv or [])
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


class BootstrapError(SlurmtorchError):
    """The in-rank world could not be derived or the process group not set up."""

    exit_code = 1


class ClusterError(SlurmtorchError):
    """A remote cluster (`--cluster NAME`) that is not configured right or cannot be reached:
    the clusters file, the SSH connection, the slurmtorch on the other side."""

    exit_code = 2
