"""git, for a snapshot's listing (codecopy): the one place the login node runs it."""

from __future__ import annotations

import os
import subprocess

from slurmtorch.errors import SubmitError


def git(folder: str, *args: str, timeout: float = 120, input: bytes | None = None) -> tuple[int, bytes, str]:
    """`git -C folder ARGS` for a snapshot (codecopy): its exit code, stdout as bytes (file
    names need not be UTF-8) and the last line of stderr (git's refusal, which the caller says).
    No terminal prompt; stdin is `input` (check-ignore --stdin), else nothing.
    GIT_OPTIONAL_LOCKS=0: `git status` would otherwise take the index lock to refresh it, and a
    `git commit` the user runs meanwhile would fail on index.lock (git's git.txt, --no-optional-locks;
    git commit 27344d6 "git: add --no-optional-locks option")."""
    argv = ["git", "-C", folder, *args]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, start_new_session=True, input=input,
                              stdin=None if input is not None else subprocess.DEVNULL,
                              env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"})
    except FileNotFoundError:
        raise SubmitError("git not found on PATH, and the script is in a git work tree",
                          tip="put git on PATH, or --no-snapshot to run the code in place", argv=argv) from None
    except subprocess.TimeoutExpired:
        raise SubmitError(f"git did not answer within {timeout:g} s in {folder}", tip="--no-snapshot runs in place",
                          argv=argv) from None
    said = proc.stderr.decode(errors="replace").strip().splitlines()
    return proc.returncode, proc.stdout, said[-1] if said else ""
