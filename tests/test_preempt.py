"""slurmtorch.bootstrap.preempt without a cluster: ids, restart counts, the handler's order of events."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from slurmtorch.bootstrap import preempt
from slurmtorch.errors import BootstrapError


def test_requeue_target_is_array_aware():
    assert preempt.requeue_target({"SLURM_JOB_ID": "42"}) == "42"
    assert preempt.requeue_target({"SLURM_JOB_ID": "43", "SLURM_ARRAY_JOB_ID": "40",
                                   "SLURM_ARRAY_TASK_ID": "3"}) == "40_3"
    with pytest.raises(BootstrapError, match="not inside a Slurm job"):
        preempt.requeue_target({})


def test_restart_count_reads_slurm_restart_count():
    assert preempt.restart_count({}) == 0
    assert preempt.restart_count({"SLURM_RESTART_COUNT": "2"}) == 2
    assert preempt.restart_count({"SLURM_RESTART_COUNT": "junk"}) == 0


@pytest.mark.parametrize("text, sig", [("USR1", signal.SIGUSR1), ("SIGUSR2@90", signal.SIGUSR2),
                                       ("R:TERM@5", signal.SIGTERM), ("10", signal.Signals(10))])
def test_preempt_signal_parses_slurm_forms(text, sig):
    assert preempt.preempt_signal(text) == sig


def test_install_without_a_signal_does_nothing():
    assert preempt.install(environ={}) is None


HANDLER = textwrap.dedent("""
    import os, signal, sys, time
    from slurmtorch.bootstrap import preempt
    calls = []
    def runner(argv, **kw):
        calls.append(argv)
        print("RAN", " ".join(argv), flush=True)
    @preempt.on_preempt
    def first():
        print("HOOK first", flush=True)
    @preempt.on_preempt
    def broken():
        raise RuntimeError("disk full")
    preempt.on_preempt(lambda: print("HOOK third", flush=True))
    who = dict(kv.split("=") for kv in sys.argv[1].split(",") if kv)  # e.g. SLURMTORCH_JOB_RANK=1
    env = dict(who, SLURM_JOB_ID="77", SLURM_ARRAY_JOB_ID="70", SLURM_ARRAY_TASK_ID="7",
               SLURMTORCH_PREEMPT_SIGNAL="USR1", SLURMTORCH_PREEMPT_REQUEUE=sys.argv[2])
    preempt.WAIT_FOR_RANK0_S = 0.5
    assert preempt.install(runner=runner, environ=env) == signal.SIGUSR1
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.2)
    print("CARRIED ON", flush=True)
    time.sleep(float(sys.argv[3]))  # training goes on; a fallback requeue would end it here
""")


def run_handler(who, requeue="1", train_s="0"):
    return subprocess.run([sys.executable, "-c", HANDLER, who, requeue, train_s], capture_output=True, text=True,
                          timeout=30)


def test_job_rank_0_runs_every_hook_then_requeues_the_array_task_and_exits():
    proc = run_handler("SLURMTORCH_JOB_RANK=0,RANK=0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["HOOK first", "HOOK third", "RAN scontrol requeue 70_7"]
    assert "preemption hook 'broken' failed" in proc.stderr and "RuntimeError: disk full" in proc.stderr
    assert "rank 0 on " in proc.stderr and "requeued job 70_7; it restarts as restart 1" in proc.stderr


@pytest.mark.parametrize("who", [
    "SLURMTORCH_JOB_RANK=1,RANK=1",
    "SLURMTORCH_JOB_RANK=4,SLURM_PROCID=0",  # a ps: no RANK, first of its own step
    "SLURM_PROCID=0",                        # job rank unknown: never guessed as 0
])
def test_other_ranks_run_their_hooks_return_at_once_and_requeue_only_if_rank_0_never_does(who):
    proc = run_handler(who, train_s="10")
    assert proc.returncode == 0, proc.stderr
    # Back to training right after the hooks (rank 0 may be waiting for this rank in a
    # collective); the fallback requeue comes 0.5 s later, because nobody else did.
    assert proc.stdout.splitlines() == ["HOOK first", "HOOK third", "CARRIED ON", "RAN scontrol requeue 70_7"]
    assert "job rank 0 did not requeue within 0.5 s; requeueing" in proc.stderr
    assert "requeued job 70_7" in proc.stderr


def test_job_rank_comes_from_the_bootstrap_or_a_job_wide_rank_only():
    assert preempt.job_rank({"SLURMTORCH_JOB_RANK": "3", "RANK": "0"}) == 3
    assert preempt.job_rank({"RANK": "0"}) == 0  # torchrun/env:// outside the bootstrap
    assert preempt.job_rank({"SLURM_PROCID": "0", "PMIX_RANK": "0"}) is None


def test_without_requeue_the_hooks_run_and_training_carries_on():
    proc = run_handler("SLURMTORCH_JOB_RANK=0", requeue="0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["HOOK first", "HOOK third", "CARRIED ON"]


def test_a_failed_requeue_is_one_clear_error_and_a_non_zero_exit():
    code = HANDLER.replace("calls.append(argv)",
                           "from slurmtorch.errors import SubmitError; raise SubmitError('scontrol failed (exit 1): "
                           "Requested operation is presently disabled')")
    proc = subprocess.run([sys.executable, "-c", code, "SLURMTORCH_JOB_RANK=0", "1", "0"], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 1
    assert "requeue failed:\nerror: scontrol failed (exit 1): Requested operation is presently disabled" in proc.stderr


def test_preempt_imports_nothing_heavy():
    code = "import sys, slurmtorch.bootstrap.preempt; print([m for m in ('torch', 'mpi4py', 'subprocess') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ)).stdout
    assert "torch" not in out and "mpi4py" not in out
