"""What a path the user typed (SCRIPT, --site, extends:) actually is, said in one line.

"does not exist" for a directory, a FIFO or /dev/null sends people looking in the wrong
place; and a FIFO opened to be read would block the CLI forever.
"""

from __future__ import annotations

import os
import stat


def file_problem(path: str | os.PathLike) -> str | None:
    """Pure but for one stat: why `path` cannot be read as a file, or None when it can."""
    text = os.fspath(path)
    if "\n" in text or "\r" in text:
        return "contains a newline"
    try:
        mode = os.stat(text).st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    if not stat.S_ISREG(mode):
        return "is not a regular file"
    return None
