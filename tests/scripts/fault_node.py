"""Lose a testbed node the hard way, and bring the testbed back.

`lose(n)` SIGKILLs every process in the node's network namespace (its slurmd, the
slurmstepds and the ranks: `ip netns pids slurmtorch-nodeN`), as a power cut would.
`restore()` is `scripts/testbed up 4`, which restarts dead slurmds and resumes nodes.
Shared by tests/submit/test_failures.py and benchmarks/faults.py.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def namespace_pids(n: int) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", f"slurmtorch-node{n}"], capture_output=True, text=True,
                         timeout=10, check=True).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def lose(n: int) -> float:
    """Kill node n; returns the time.time() of the kill."""
    t = time.time()
    for pid in namespace_pids(n):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return t


def restore(env: dict[str, str] | None = None, timeout: float = 120) -> None:
    """`scripts/testbed up 4`, then wait (bounded) until no node is down or not responding."""
    subprocess.run([str(REPO / "scripts" / "testbed"), "up", "4"], capture_output=True, text=True,
                   timeout=timeout, check=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, env=env,
                                timeout=30).stdout.split()
        if states and not any(s.endswith("*") or s.startswith(("down", "drain", "fail")) for s in states):
            return
        subprocess.run(["scontrol", "update", "NodeName=node[1-4]", "State=RESUME"], capture_output=True,
                       env=env, timeout=30)
        time.sleep(1)
    raise RuntimeError(f"testbed nodes did not come back within {timeout} s: {states}")
