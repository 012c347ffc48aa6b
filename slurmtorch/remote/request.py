"""What the laptop asks of the cluster side, each part beside its reader (pure).

The command ssh runs there (`command`) is POSIX shell text built from quoted words only: the
cluster's environment (`SLURMTORCH_HOME`, modules), the folder to run in, then `python -c BOOT`,
which names the two common set-up faults in one line each before anything else runs (no
slurmtorch for that python; another version of it than the laptop's) and hands the verb to
`serve`. Its stdin carries one header line (JSON: the code's sync record, or nothing) and then
the names of the signals the laptop got (INT, TERM, HUP), which serve raises there.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from slurmtorch import shell

if TYPE_CHECKING:  # the cluster side (serve) reads no clusters file: it need not load PyYAML for a type
    from slurmtorch.remote.clusters import Cluster

EX_UNAVAILABLE = 69  # the cluster side is not set up: no python, no slurmtorch, another version, a module
SIGNALS = {"INT": signal.SIGINT, "TERM": signal.SIGTERM, "HUP": signal.SIGHUP}
MIRROR = "--mirror"  # serve's word for: make (or refuse) the code's mirror NAME, before rsync sends into it
WHERE = "--where"  # serve's word for: the folder a pull of job JOBID reads, checked, and what it leaves out (pullsource)
LISTING = "--listing"  # serve's word for: the size and time of files in that folder, after a pull's transfer

# Run by the cluster's python as `-c`, with argv: cluster name, the laptop's version, serve's own.
# It must run on any slurmtorch (or none), so it uses nothing of it but `__version__`.
BOOT = """\
import sys
name, want = sys.argv[1:3]
try:
    import slurmtorch
except ImportError:
    sys.stderr.write("error: no slurmtorch for %s on cluster %s\\ntip: install slurmtorch %s there "
                     "(pip install slurmtorch==%s), or point venv: or python: in the clusters file at it\\n"
                     % (sys.executable, name, want, want))
    sys.exit(69)
have = getattr(slurmtorch, "__version__", "unknown")
if have != want:
    sys.stderr.write("error: slurmtorch %s on cluster %s (%s), %s here: both sides must run the same version\\n"
                     "tip: install slurmtorch %s there (pip install slurmtorch==%s), or %s here\\n"
                     % (have, name, sys.executable, want, want, want, have))
    sys.exit(69)
from slurmtorch.cli.serve import main
main(sys.argv[3:], name)
"""


def path_word(path: str) -> str:
    """A cluster path as one shell word: `~/x` is the cluster's home ("$HOME"/'x'), the rest quoted."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shell.quote(path[2:], "path")
    return shell.quote(path, "path")


def command(cluster: Cluster, version: str, args: Sequence[str], *, cwd: str | None = None,
            tty: bool = False) -> str:
    """The shell text ssh runs on the cluster for `slurmtorch ARGS` (run in `cwd`, else the home)."""
    python = path_word(cluster.python) if "/" in cluster.python else shell.quote(cluster.python, "python")
    lines = []
    if cluster.workdir:
        lines.append(f"SLURMTORCH_HOME={path_word(cluster.workdir)}; export SLURMTORCH_HOME")
    if cwd:
        lines.append(f"cd {path_word(cwd)} || exit {EX_UNAVAILABLE}")
    missing = (f"error: no {cluster.python} on cluster {cluster.name}",
               f"tip: set venv: or python: of {cluster.name} in {cluster.source} to where slurmtorch is installed there")
    lines.append(f"command -v {python} >/dev/null 2>&1 || {{ printf '%s\\n' {shell.join(missing)} >&2; "
                 f"exit {EX_UNAVAILABLE}; }}")
    serve = ["--tty"] if tty else []
    lines.append(f"exec {python} -c {shell.quote(BOOT)} {shell.join([cluster.name, version, *serve, '--', *args])}")
    text = "\n".join(lines)
    if not cluster.modules:
        return text
    # Lmod and Environment Modules define `module` for login shells (/etc/profile.d).
    load = f"module load {shell.join(cluster.modules)} || exit {EX_UNAVAILABLE}\n"
    return f"bash -l -c {shell.quote(load + text)}"


def header(sync: Mapping | None, call: Mapping | None = None) -> str:
    """The request's first stdin line: the code's sync record, or a Distributor's call (distribute)."""
    return json.dumps({"sync": sync, "call": call}, separators=(",", ":"))


def read_header(line: str) -> tuple[dict | None, dict | None]:
    """The sync record and the call sent with the request (each None when absent); a line
    that is no header is refused."""
    try:
        value = json.loads(line) if line.strip() else {}
    except ValueError:
        raise ValueError(f"not a slurmtorch request header: {line[:80]!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"not a slurmtorch request header: {line[:80]!r}")
    sync, call = value.get("sync"), value.get("call")
    return (sync if isinstance(sync, dict) else None), (call if isinstance(call, dict) else None)


def signal_line(signum: int) -> bytes:
    """The line that asks the cluster side to raise `signum` (one of SIGNALS)."""
    name = next(n for n, s in SIGNALS.items() if s == signum)
    return f"{name}\n".encode()


def read_signal(line: str) -> int | None:
    return SIGNALS.get(line.strip())
