"""One rank goes wrong on the 4-node testbed: the job ends fast and says who, where and why.

Real ranks under `slurmtorch sbatch --wait` (srun --kill-on-bad-exit, gloo over eth0,
`--timeout 20` for the process group). Rank 2 runs on node3. Each case runs once here;
benchmarks/faults.py repeats them and measures the time to end (RELIABILITY.md); these
tests assert no times. Every wait is bounded: a run that does not end fails the test
instead of hanging it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent / "scripts"
FAULT = SCRIPTS / "fault_rank.py"
sys.path.insert(0, str(SCRIPTS))
import fault_node  # noqa: E402

pytestmark = [pytest.mark.testbed, pytest.mark.torch]

# Hang guard, not a speed claim: every job below has Slurm's 5-minute limit (-t 5), and
# `--wait` must return well inside it, so a job that only Slurm's time limit ended fails
# the test. What ends it instead (srun --kill-on-bad-exit, the process-group --timeout 20,
# slurmctld's SlurmdTimeout=20) is shown by what the job says, not by how fast it says it:
# benchmarks/faults.py measures that. Generous because the testbed is shared and a job
# may queue behind someone else's first.
WAIT_GUARD_S = 240


def slurmtorch(testbed, home, *argv, timeout=120, **kw):
    return testbed.run([testbed.python, "-m", "slurmtorch.cli.main", *map(str, argv)],
                       env={"SLURMTORCH_HOME": str(home)}, timeout=timeout, **kw)


def submit_fault(testbed, home, mode):
    return slurmtorch(testbed, home, "sbatch", "--site", "testbed", "-N", "4", "--timeout", "20", "-t", "5",
                      FAULT, "--wait", "--", mode, "2", timeout=WAIT_GUARD_S)


CASES = [
    # mode, what --wait/status/logs must say about rank 2
    ("exit", "rank 2 on node3: exited with code 3"),
    ("kill", "rank 2 on node3: killed by a signal"),
    ("raise", "rank 2 on node3: ValueError: bad batch at step 3"),
    # Ended by the process-group --timeout: the peers report timing out, rank 2 nothing.
    ("hang", "rank 2 on node3: hung: reported nothing while ranks 0, 1, 3 timed out"),
    # Its script returned (exit 0, so srun says nothing) while the others still all_reduce:
    # its rank-2.exit says so, not a guess at a lost node named by a peer's address.
    ("return", "rank 2 on node3: its script returned while the others still needed it (exit 0)"),
]


@pytest.mark.timeout(WAIT_GUARD_S + 120)
@pytest.mark.parametrize("mode, named", CASES, ids=[c[0] for c in CASES])
def test_a_failing_rank_ends_the_job_and_is_named_everywhere(testbed, has_torch, tmp_path, mode, named):
    home = tmp_path / "home"
    proc = submit_fault(testbed, home, mode)
    assert proc.returncode != 0, proc.stderr
    job_id = proc.stdout.splitlines()[0]
    assert f"job {job_id} FAILED" in proc.stderr
    # --wait names the root cause first, then any peers that failed because of it. Whether a
    # peer reports at all is a race (srun's --kill-on-bad-exit may end it before it notices
    # the closed connection), so secondary lines are optional, but never come first.
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("slurmtorch: ")]
    assert lines and lines[0].startswith(f"slurmtorch: failed: {named}"), proc.stderr
    assert all(ln.startswith("slurmtorch: then failed: ranks ") for ln in lines[1:]), proc.stderr

    status = slurmtorch(testbed, home, "status", job_id)
    assert status.returncode == 0, status.stderr
    assert "state=FAILED" in status.stdout and "exit_code=0" not in status.stdout
    assert status.stdout.splitlines()[1].startswith(f"failed: {named}"), status.stdout

    logs = slurmtorch(testbed, home, "logs", job_id, "--rank", "2")
    assert logs.returncode == 0, logs.stderr
    assert f"slurmtorch: failed: {named}" in logs.stderr
    if mode in ("exit", "raise"):
        assert "rank 2 on node3 failed:" in logs.stderr  # the rank's own report, traceback included


@pytest.mark.timeout(WAIT_GUARD_S + 180)
def test_a_lost_node_ends_the_job_with_node_fail_and_names_it(testbed, has_torch, tmp_path):
    """node3's slurmd, slurmstepd and rank are SIGKILLed mid-job; the testbed is restored after."""
    home = tmp_path / "home"
    env = dict(testbed.env, SLURMTORCH_HOME=str(home))
    waiter = subprocess.Popen(
        [testbed.python, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed", "-N", "4", "--timeout", "20",
         "-t", "5", str(FAULT), "--wait", "--", "none", "0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job_id = waiter.stdout.readline().strip()
        out = home / "jobs" / job_id / "rank-2.out"
        deadline = time.monotonic() + 60
        while not (out.exists() and "started" in out.read_text()):
            assert time.monotonic() < deadline and waiter.poll() is None, "job never started"
            time.sleep(0.2)
        time.sleep(1)
        fault_node.lose(3)
        _, err = waiter.communicate(timeout=WAIT_GUARD_S)  # the hang guard above
        # Before the restore: `scripts/testbed up` may restart slurmctld, which forgets jobs.
        status = slurmtorch(testbed, home, "status", job_id)
        shown = testbed.run(["scontrol", "-o", "show", "job", job_id]).stdout
    finally:
        if waiter.poll() is None:
            waiter.kill()
        fault_node.restore(testbed.env)
    assert waiter.returncode != 0, err
    assert f"job {job_id} NODE_FAIL" in err, err
    assert "slurmtorch: failed: rank 2 on node3: lost with its node (srun: Node failure on node3)" in err, err
    assert "state=NODE_FAIL" in status.stdout, status.stdout
    assert "failed: rank 2 on node3: lost with its node" in status.stdout, status.stdout
    # --no-requeue (the default without --requeue): Slurm did not silently rerun it.
    assert "Restarts=0" in shown and "Requeue=0" in shown, shown


@pytest.mark.timeout(WAIT_GUARD_S + 60)
def test_a_step_that_never_launches_fails_the_job_and_says_so(testbed, has_torch, tmp_path):
    """srun exits 0 when slurmstepd cannot set its step up (Slurm 22.05). Here a file where
    the step's PMIx socket goes (stepd.slurm.pmix.JOB.0, made by the site's prologue)
    makes that happen, as it does when a requeued job restarts within a second or two."""
    site = tmp_path / "blocked.yaml"
    spools = shlex.quote(str(testbed.state_dir / "nodes"))
    site.write_text("extends: testbed\nprologue:\n  - " + json.dumps(
        f'for d in {spools}/*/spool; do : >"$d/stepd.slurm.pmix.$SLURM_JOB_ID.0"; done') + "\n")
    home = tmp_path / "home"
    proc = slurmtorch(testbed, home, "sbatch", "--site", site, "-N", "2", "-t", "5", FAULT, "--wait",
                      "--", "none", "0", timeout=WAIT_GUARD_S)
    job_id = proc.stdout.splitlines()[0]
    try:
        assert proc.returncode != 0, proc.stderr
        assert f"job {job_id} FAILED (exit 1)" in proc.stderr, proc.stderr
        never = "failed: rank 0: never started: the step failed to launch (Unspecified error)"
        assert f"slurmtorch: {never}" in proc.stderr, proc.stderr
        batch = (home / "jobs" / job_id / "batch.out").read_text()
        assert "launch failed" in batch, batch  # srun's own words, and yet it exited 0
        assert "slurmtorch: error: srun exited 0 but no rank started" in batch, batch
        assert (home / "jobs" / job_id / "exit-code").read_text() == "1\n"
        status = slurmtorch(testbed, home, "status", job_id)
        assert "state=FAILED" in status.stdout and never in status.stdout, status.stdout
    finally:
        for blocker in (testbed.state_dir / "nodes").glob(f"*/spool/stepd.slurm.pmix.{job_id}.0"):
            blocker.unlink(missing_ok=True)

