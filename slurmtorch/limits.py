"""Limits of the machine that both sides respect: what one environment string may hold.

execve(2) refuses a program whose environment holds a "NAME=value" string longer than
MAX_ARG_STRLEN (32 pages, 128 KiB), failing with E2BIG before the program runs. Site
validation refuses such a value; a rank leaves out a contract map that would be one
(every subprocess it starts would fail).
"""

MAX_ENV_STRING = 131071  # bytes of NAME=value, without the NUL


def fits_env(name: str, value: str) -> bool:
    """Whether `NAME=value` can be passed through execve."""
    return len(name.encode()) + 1 + len(value.encode()) <= MAX_ENV_STRING
