"""Wait until other ranks have printed their JSON line into the job folder (rank-R.out).

A rank that ends a step (a failing rank under srun --kill-on-bad-exit, or the last training
rank of a role job, which stops the ps) kills peers that are still starting. A probe whose
peers must print first waits here, so the test's outcome does not depend on which process
got the CPU first. Imported by probes in this folder (their sys.path[0]).
"""
import os
import time


def wait_until_printed(ranks, timeout=90.0):
    """Return once each rank's rank-R.out in $SLURMTORCH_JOB_DIR holds a closing brace, or after timeout."""
    folder = os.environ["SLURMTORCH_JOB_DIR"]
    deadline = time.monotonic() + timeout
    for r in ranks:
        path = os.path.join(folder, f"rank-{r}.out")
        while not _printed(path) and time.monotonic() < deadline:
            time.sleep(0.2)


def _printed(path):
    try:
        with open(path) as f:
            return "}" in f.read()
    except FileNotFoundError:
        return False
