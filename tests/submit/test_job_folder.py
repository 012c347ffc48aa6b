"""A real job's folder on the 4-node testbed: private to its owner, and shown safely.

Real `slurmtorch sbatch --wait`, `status` and `logs` against real sbatch/srun; the
ranks are `python -m slurmtorch.bootstrap` running the small scripts below. Every wait
is bounded (the CLI's own timeouts and the pytest timeout).
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.testbed, pytest.mark.torch]

WAIT_S = 180  # the testbed is shared: a job may queue behind someone else's
SECRET = "hf_s3cr3t-token"
# What a hostile (or careless) rank prints: a window title, OSC 52 (writes the user's
# clipboard), clear-screen, a backspace, and the 8-bit CSI.
HOSTILE = "title \x1b]0;pwned\x07 clip \x1b]52;c;cHduZWQ=\x07 clear \x1b[2J back\x08 csi \u009b2J end"
CONTROLS = ("\x1b", "\x07", "\x08", "\u009b")


def slurmtorch(testbed, home: Path, *argv, umask: int | None = None) -> subprocess.CompletedProcess:
    """The real CLI, under `umask` when given (as a user's shell would have it)."""
    code = "import os, sys; from slurmtorch.cli.main import main; "
    if umask is not None:
        code += f"os.umask({umask:#o}); "
    code += "sys.exit(main(sys.argv[1:]))"
    return testbed.run([testbed.python, "-c", code, *map(str, argv)], env={"SLURMTORCH_HOME": str(home)},
                       timeout=WAIT_S)


@pytest.mark.timeout(WAIT_S + 60)
def test_a_job_folder_is_private_under_umask_022_and_its_env_values_are_written_once(testbed, has_torch, tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("import os\nprint('token length', len(os.environ['HF_TOKEN']), flush=True)\n")
    home = tmp_path / "home"
    proc = slurmtorch(testbed, home, "sbatch", "--site", "testbed", "-N", "2", "-t", "3",
                      "--env", f"HF_TOKEN={SECRET}", "--wait", script, umask=0o022)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.splitlines()[0]
    folder = home / "jobs" / job_id
    assert (folder / "rank-1.out").read_text() == f"token length {len(SECRET)}\n"
    # Only the owner can enter the folder or read script.sh (its export line holds the value);
    # what srun and the batch script wrote there is behind the folder's 0700.
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "script.sh").stat().st_mode) == 0o600
    for p in folder.iterdir():
        assert not p.stat().st_mode & stat.S_IWOTH, p
    text = (folder / "script.sh").read_text()
    assert text.count(SECRET) == 1 and f"export HF_TOKEN={SECRET}\n" in text
    assert "--env HF_TOKEN=... " in text.splitlines()[2]  # the `# Run with:` line keeps the name


@pytest.mark.timeout(WAIT_S + 60)
def test_logs_status_and_wait_show_a_ranks_escape_sequences_instead_of_obeying_them(testbed, has_torch, tmp_path):
    script = tmp_path / "hostile.py"
    script.write_text("import sys\n"
                      f"print({HOSTILE!r}, flush=True)\n"
                      f"print('err ' + {HOSTILE!r}, file=sys.stderr, flush=True)\n"
                      f"raise ValueError({HOSTILE!r})\n")
    home = tmp_path / "home"
    wait = slurmtorch(testbed, home, "sbatch", "--site", "testbed", "-N", "1", "-t", "3", "--wait", script)
    assert wait.returncode != 0, wait.stderr
    job_id = wait.stdout.splitlines()[0]
    logs = slurmtorch(testbed, home, "logs", job_id)
    status = slurmtorch(testbed, home, "status", job_id)
    assert logs.returncode == 0 and status.returncode == 0, (logs.stderr, status.stderr)
    shown = "title \\x1b]0;pwned\\x07 clip \\x1b]52;c;cHduZWQ=\\x07 clear \\x1b[2J back\\x08 csi \\x9b2J end"
    assert logs.stdout == shown + "\n"
    assert f"err {shown}\n" in logs.stderr
    assert f"slurmtorch: failed: rank 0 on node1: ValueError: {shown}" in logs.stderr, logs.stderr
    assert f"failed: rank 0 on node1: ValueError: {shown}" in status.stdout, status.stdout
    assert f"err {shown}\n" in wait.stderr  # --wait streams rank 0's logs as they grow
    for out in (wait.stdout, wait.stderr, logs.stdout, logs.stderr, status.stdout, status.stderr):
        assert not any(c in out for c in CONTROLS), repr(out)
    # The log itself keeps what the rank wrote, byte for byte.
    assert (home / "jobs" / job_id / "rank-0.out").read_text() == HOSTILE + "\n"


def test_a_submission_refuses_a_home_another_user_made_first_and_queues_nothing(testbed, tmp_path):
    """SLURMTORCH_HOME on shared scratch, made first by another user: its owner could swap
    script.sh before the job starts. The real CLI against real sbatch: refused, no job."""
    script = tmp_path / "ok.py"
    script.write_text("print('ran')\n")
    home = tmp_path / "scratch-home"
    home.mkdir(mode=0o755)
    os.chown(home, pwd.getpwnam("nobody").pw_uid, -1)
    before = testbed.run(["squeue", "-h", "-o", "%i"]).stdout.split()
    proc = slurmtorch(testbed, home, "sbatch", "--site", "testbed", script)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr.startswith(f"error: {home} (SLURMTORCH_HOME) belongs to nobody (uid ")
    assert proc.stderr.count("\n") == 2 and "\ntip: set SLURMTORCH_HOME to a folder of your own" in proc.stderr
    assert testbed.run(["squeue", "-h", "-o", "%i"]).stdout.split() == before
    assert list(home.iterdir()) == []
