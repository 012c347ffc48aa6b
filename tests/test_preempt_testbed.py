"""Preemption on the testbed: signal mid-run, checkpoint hook, requeue, resume, right total.

`slurmtorch sbatch --signal USR1@60` renders `--signal=USR1@60 --requeue`; the ranks'
handler (slurmtorch.bootstrap.preempt) runs the on_preempt hooks, rank 0 requeues with
`scontrol requeue`, Slurm restarts the job (SLURM_RESTART_COUNT=1) and the script
resumes from its checkpoint. The signal comes from `scancel --signal=USR1 JOBID`, which
is what Slurm's own `--signal` delivery does (every task of every step, not the batch
shell) without waiting for the time limit. Slurm holds a requeued job back for
`cred_expire` seconds (BeginTime; 2 minutes by default, 30 s on the testbed) so that the
new run's steps cannot meet the old run's leftovers: forcing it to start sooner
(`scontrol update StartTime=now`) can make the new step fail to launch (its PMIx socket
is still taken), which test_faults_testbed covers.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

COUNTER = Path(__file__).resolve().parent / "scripts" / "preempt_counter.py"

pytestmark = [pytest.mark.testbed, pytest.mark.torch]


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_signalled_job_checkpoints_requeues_and_finishes_with_the_right_total(testbed, has_torch, tmp_path):
    home, ckpt, total = tmp_path / "home", tmp_path / "counter.json", 30
    env = dict(testbed.env, SLURMTORCH_HOME=str(home))
    waiter = subprocess.Popen(
        [testbed.python, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed", "--preset", "preemptible",
         "-N", "2", "-t", "5", str(COUNTER), "--wait", "--", str(ckpt), str(total)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job_id = waiter.stdout.readline().strip()
        folder = home / "jobs" / job_id
        script = (folder / "script.sh").read_text()
        assert "#SBATCH --signal=USR1@60\n" in script and "#SBATCH --requeue\n" in script

        rank0 = folder / "rank-0.out"
        wait_for(lambda: rank0.exists() and "step 8\n" in rank0.read_text(), 60, "step 8")
        sig = testbed.run(["scancel", "--signal=USR1", job_id])
        assert sig.returncode == 0, sig.stderr
        # Requeued: pending again, with the same id.
        wait_for(lambda: testbed.run(["squeue", "-h", "-j", job_id, "-o", "%T"]).stdout.strip() == "PENDING",
                 60, "the requeue")
        out, err = waiter.communicate(timeout=120)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            testbed.run(["scancel", job_id])
    assert waiter.returncode == 0, err
    text = rank0.read_text()  # --open-mode=append: both runs are in it
    saved = json.loads(ckpt.read_text())
    assert 8 <= saved["step"] < total and saved["value"] == 2 * saved["step"]
    assert "rank 0 restart 0 resuming at step 0 value 0\n" in text
    assert f"rank 0 restart 1 resuming at step {saved['step']} value {saved['value']}\n" in text
    assert text.rstrip().endswith(f"final value {2 * total} steps {total} restart 1")
    assert "SIGUSR1 received (restart 0); running 1 preemption hook(s)" in err
    assert f"requeued job {job_id}; it restarts as restart 1" in err
    assert f"job {job_id} COMPLETED (exit 0)" in err
    # Rank 1 ran its (no-op) hook too and was ended by the requeue.
    assert re.search(r"rank 1 on node\d+: SIGUSR1 received", (folder / "rank-1.err").read_text())
    assert "Restarts=1" in testbed.run(["scontrol", "-o", "show", "job", job_id]).stdout
