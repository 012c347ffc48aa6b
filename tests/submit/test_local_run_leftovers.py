"""A local run ends with nothing of its own left, as a Slurm step does (issue 24, item 8).

Slurm's proctrack ends every process a step's tasks started when the step ends. Here the
guard (slurmtorch/guard.py) is the subreaper of the launch: what the ranks leave behind, even
a double-forked daemon or a child in a session of its own, becomes its child when its
parent ends, and is ended once the launch has. Real mpirun, real ranks, real processes;
the `sleep 317` they start is ours by its argument.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmtorch import Distributor

REPO = Path(__file__).resolve().parents[2]
MARK = "317"  # `sleep 317`: the processes these tests start, told from anyone else's


def spawn_leftovers(folder):
    """Every rank starts three `sleep`s that outlive it: a plain child, a child in a session of
    its own (setsid), and a daemon (double fork: its parent exits, it is nobody's child)."""
    rank = os.environ.get("RANK", "0")
    pids = [subprocess.Popen(["sleep", MARK]).pid,
            subprocess.Popen(["sleep", MARK], start_new_session=True).pid]
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the daemon's parent: fork, tell, leave
        grandchild = os.fork()
        if grandchild == 0:
            os.setsid()
            os.execvp("sleep", ["sleep", MARK])
        os.write(write, f"{grandchild}\n".encode())
        os._exit(0)
    os.waitpid(child, 0)
    pids.append(int(os.read(read, 64)))
    Path(folder, f"rank-{rank}").write_text(" ".join(map(str, pids)))
    return rank


def ours_alive(pid: int) -> bool:
    """Still running (zombies have ended), and still our `sleep` (not a reused pid)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return state not in ("Z", "X") and cmdline[:2] == [b"sleep", MARK.encode()]


def left(folder: Path, ranks: int) -> list[int]:
    files = sorted(folder.glob("rank-*"))
    assert len(files) == ranks, files
    pids = [int(p) for f in files for p in f.read_text().split()]
    assert len(pids) == 3 * ranks
    return [p for p in pids if ours_alive(p)]


def end(pids: list[int]) -> None:
    """The old code leaves them for 317 s: end them so they burden no later test."""
    for pid in pids:
        if ours_alive(pid):
            os.kill(pid, 9)


@pytest.mark.timeout(120)
def test_a_distributor_run_leaves_no_process_of_its_own(mpi_env, has_torch, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path / "home"))
    for key in ("PATH", "OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_btl"):
        monkeypatch.setenv(key, mpi_env[key])
    assert Distributor(num_processes=2, local_mode=True, timeout=60, progress=False).run(
        spawn_leftovers, str(tmp_path)) == "0"
    leftovers = left(tmp_path, 2)
    end(leftovers)
    assert leftovers == []


@pytest.mark.timeout(120)
def test_slurmtorch_mpirun_leaves_no_process_of_its_own(mpi_env, has_torch, tmp_path):
    script = tmp_path / "spawn.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                      "from test_local_run_leftovers import spawn_leftovers\nspawn_leftovers(sys.argv[1])\n")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.cli.main", "mpirun", "-n", "2",
                           str(script), str(tmp_path)], env=dict(mpi_env, SLURMTORCH_HOME=str(tmp_path / "home")),
                          cwd=REPO, capture_output=True, text=True,
                          timeout=90)
    assert proc.returncode == 0, proc.stderr
    leftovers = left(tmp_path, 2)
    end(leftovers)
    assert leftovers == []
    assert time.monotonic() - t0 < 60
