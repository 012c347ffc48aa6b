"""salloc: `slurmtorch alloc`'s interactive allocation, a shell in the foreground."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from slurmtorch import protocol
from slurmtorch.errors import SubmitError
from slurmtorch.submit.edge.runner import not_found_tip
from slurmtorch.submit.interrupts import Forwarding, Interrupted
from slurmtorch.submit.jobfolder import jobdir


def allocate(setup: str, argv_for: Callable[[str], list[str]]) -> int:
    """`salloc ... bash --rcfile SETUP -i` in the foreground (`argv_for(SETUP)`, SETUP a private
    temporary file holding `setup`); the shell's exit code, which salloc returns.

    salloc owns the terminal: it makes itself, then the shell, the foreground process group,
    so no Ctrl-C reaches us. One while the request waits is salloc's alone: it withdraws the
    request ("Job aborted due to signal") and exits 1 (tested on the testbed). A
    TERM/HUP to us goes to salloc, which ends the shell and gives the allocation back. When
    the shell exits, salloc relinquishes the allocation (salloc(1)), and Slurm ends every
    step still running in it.
    """
    with tempfile.TemporaryDirectory(prefix="slurmtorch-alloc-") as folder:
        path = Path(folder) / "setup.sh"
        jobdir.write_new(path, setup)
        argv = argv_for(str(path))
        with Forwarding("salloc withdrew the request, or ended the shell and gave the allocation back") as forwarding:
            try:
                # The shell is the cluster's own, also through `alloc --cluster`: what is typed
                # there (and the tips it prints) needs no --cluster.
                proc = subprocess.Popen(argv, env={k: v for k, v in os.environ.items() if k != protocol.ON_CLUSTER})
            except FileNotFoundError:
                raise SubmitError(f"{argv[0]} not found on PATH",
                                  tip=f"{not_found_tip('salloc')}; --dry-run prints the command",
                                  argv=argv) from None
            try:
                forwarding.attach(proc.pid)
                return proc.wait()
            except Interrupted:
                proc.wait()  # salloc ends what it started before it exits
                raise
