"""slurmtorch.bootstrap.preempt: without a cluster (ids, restart counts, the handler's order of
events), then preemption for real on the testbed (signal, checkpoint, requeue, resume)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import read
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


def test_the_bootstrap_sets_the_handler_when_the_job_names_a_signal():
    # The runner imports `preempt` only for a job submitted with --signal: it reads the same name.
    from slurmtorch import protocol
    from slurmtorch.bootstrap import runner

    assert preempt.ENV_SIGNAL == protocol.PREEMPT_SIGNAL
    assert "os.environ.get(protocol.PREEMPT_SIGNAL)" in Path(runner.__file__).read_text()


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
    assert "rank 0 on " in proc.stderr and "requeueing job 70_7; it restarts as restart 1" in proc.stderr


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
    assert "requeueing job 70_7" in proc.stderr


WAITING_RANK0 = textwrap.dedent("""
    import os, signal, sys, time
    from slurmtorch.bootstrap import preempt
    def runner(argv, **kw):
        print("RAN", " ".join(argv), flush=True)
    preempt.on_preempt(lambda: print("HOOK", flush=True))
    env = dict(SLURMTORCH_JOB_RANK="0", RANK="0", WORLD_SIZE="3", SLURM_JOB_ID="77", SLURMTORCH_JOB_DIR=sys.argv[1],
               SLURMTORCH_PREEMPT_SIGNAL="USR1", SLURMTORCH_PREEMPT_REQUEUE="1")
    preempt.WAIT_FOR_RANKS_S = float(sys.argv[2])
    preempt.install(runner=runner, environ=env)
    os.kill(os.getpid(), signal.SIGUSR1)
    print("CARRIED ON", flush=True)  # rank 0 trains on while it waits for the others' hooks
    marks = os.path.join(sys.argv[1], ".preempted", "start-0")
    for rank in sys.argv[3:]:
        time.sleep(0.5)
        print("RANK", rank, "DONE", flush=True)
        open(os.path.join(marks, "rank-" + rank), "w").close()
    time.sleep(30)
""")


def test_job_rank_0_trains_on_and_requeues_once_every_rank_ran_its_hooks(tmp_path):
    # A rank waiting for rank 0 inside a collective runs its handler only once rank 0 meets it
    # there: requeueing at once ended rank 1 before its hooks ran (CI on a loaded machine).
    proc = subprocess.run([sys.executable, "-c", WAITING_RANK0, str(tmp_path), "20", "1", "2"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["HOOK", "CARRIED ON", "RANK 1 DONE", "RANK 2 DONE", "RAN scontrol requeue 77"]
    assert "did not finish" not in proc.stderr


def test_job_rank_0_requeues_anyway_naming_the_ranks_whose_hooks_never_ended(tmp_path):
    proc = subprocess.run([sys.executable, "-c", WAITING_RANK0, str(tmp_path), "4", "2"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["HOOK", "CARRIED ON", "RANK 2 DONE", "RAN scontrol requeue 77"]
    assert "rank 0: rank(s) 1 did not finish their preemption hooks within 4 s; requeueing anyway" in proc.stderr


def test_missing_ranks_are_those_without_a_mark():
    assert preempt.missing_ranks({"rank-0", "rank-2"}, 4) == [1, 3]
    assert preempt.missing_ranks(set(), 1) == [0]


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


# ------------------------------------------------------------------ on the testbed
# Preemption on the testbed: signal mid-run, checkpoint hook, requeue, resume, right total.
#
# `slurmtorch sbatch --signal USR1@60` renders `--signal=USR1@60 --requeue`; the ranks'
# handler (slurmtorch.bootstrap.preempt) runs the on_preempt hooks, rank 0 requeues with
# `scontrol requeue`, Slurm restarts the job (SLURM_RESTART_COUNT=1) and the script
# resumes from its checkpoint. The signal comes from `scancel --signal=USR1 JOBID`, which
# is what Slurm's own `--signal` delivery does (every task of every step, not the batch
# shell) without waiting for the time limit. Slurm holds a requeued job back for
# `cred_expire` seconds (BeginTime; 2 minutes by default, 10 s on the testbed) so that the
# new run's steps cannot meet the old run's leftovers: forcing it to start sooner
# (`scontrol update StartTime=now`) can make the new step fail to launch (its PMIx socket
# is still taken), which tests/submit/test_failures.py covers.


COUNTER = Path(__file__).resolve().parents[1] / "scripts" / "preempt_counter.py"


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def preempted_job(testbed, home, options, script_args, ready, timeout=120):
    """Submit with --preset preemptible --wait, `scancel --signal=USR1` once rank 0's output holds
    `ready`, see the job requeued (pending again, same id) and wait for the end:
    (job_id, the job's folder, the waiter's returncode, stdout, stderr)."""
    waiter = subprocess.Popen(
        [testbed.python, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed", "--preset", "preemptible",
         *options, "-t", "5", "--wait", *script_args],
        env=dict(testbed.env, SLURMTORCH_HOME=str(home)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job_id = waiter.stdout.readline().strip()
        folder = home / "jobs" / job_id
        script = (folder / "script.sh").read_text()
        assert "#SBATCH --signal=USR1@60\n" in script and "#SBATCH --requeue\n" in script
        rank0 = folder / "rank-0.out"
        wait_for(lambda: rank0.exists() and ready in rank0.read_text(), 120, ready)
        sig = testbed.run(["scancel", "--signal=USR1", job_id])
        assert sig.returncode == 0, sig.stderr
        wait_for(lambda: testbed.run(["squeue", "-h", "-j", job_id, "-o", "%T"]).stdout.strip() == "PENDING",
                 60, "the requeue")
        out, err = waiter.communicate(timeout=timeout)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            testbed.run(["scancel", job_id])
    return job_id, folder, waiter.returncode, out, err


@pytest.mark.slurm_versions
def test_signalled_job_checkpoints_requeues_and_finishes_with_the_right_total(testbed, has_torch, tmp_path):
    ckpt, total = tmp_path / "counter.json", 30
    job_id, folder, code, out, err = preempted_job(testbed, tmp_path / "home", ["-N", "2"],
                                                   [str(COUNTER), str(ckpt), str(total)], "step 8\n")
    rank0 = folder / "rank-0.out"
    assert code == 0, err
    text = rank0.read_text()  # --open-mode=append: both runs are in it
    saved = json.loads(ckpt.read_text())
    assert 8 <= saved["step"] < total and saved["value"] == 2 * saved["step"]
    assert "rank 0 restart 0 resuming at step 0 value 0\n" in text
    assert f"rank 0 restart 1 resuming at step {saved['step']} value {saved['value']}\n" in text
    assert text.rstrip().endswith(f"final value {2 * total} steps {total} restart 1")
    assert "SIGUSR1 received (restart 0); running 1 preemption hook(s)" in err
    assert f"requeueing job {job_id}; it restarts as restart 1" in err
    assert f"job {job_id} COMPLETED (exit 0)" in err
    # Rank 1 ran its (no-op) hook too and was ended by the requeue.
    assert re.search(r"rank 1 on node\d+: SIGUSR1 received", (folder / "rank-1.err").read_text())
    assert "Restarts=1" in testbed.run(["scontrol", "-o", "show", "job", job_id]).stdout


# ------------------------------------------------------------------ a framework's own handler
LIGHTNING_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "lightning_preempt.py"


def test_lightnings_own_usr1_handler_runs_saves_hpc_ckpt_and_requeues_once(tmp_path):
    # A real Lightning Trainer under the bootstrap as srun's one task of a --signal job. Our handler
    # is set first; Lightning sets its own only where `getsignal` shows none, so it used to skip it
    # (while logging "SLURM auto-requeueing enabled"): no hpc_ckpt, and our requeue instead.
    pytest.importorskip("lightning")
    bin_dir, log, root = tmp_path / "bin", tmp_path / "scontrol.log", tmp_path / "root"
    bin_dir.mkdir()
    # Lightning runs `scontrol requeue JOBID` from PATH: this one writes down each call.
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "scontrol").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "OMPI_", "PMI", "RANK", "WORLD_SIZE"))}
    env.update(PATH=f"{bin_dir}:{os.path.dirname(sys.executable)}:{env['PATH']}", SLURM_JOB_ID="123",
               SLURM_JOB_NAME="train", SLURM_NTASKS="1", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0",
               SLURM_NNODES="1", SLURMTORCH_PREEMPT_SIGNAL="USR1", SLURMTORCH_PREEMPT_REQUEUE="1")
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.bootstrap", str(LIGHTNING_SCRIPT), str(root)],
                          capture_output=True, text=True, env=env, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "LIGHTNING cluster_env SLURMEnvironment" in out
    assert "then the script's own handler (_HandlersCompose)" in out
    assert (root / "hpc_ckpt_1.ckpt").is_file(), out
    assert "LIGHTNING done step 8" in out  # Lightning requeues and carries on until Slurm ends it
    assert log.read_text().splitlines() == ["requeue 123"], out  # Lightning's requeue, not a second one
    assert "requeueing job 123" not in out


def test_a_script_handler_is_chained_and_giving_it_back_restores_ours():
    code = textwrap.dedent("""
        import os, signal
        from slurmtorch.bootstrap import preempt
        preempt.on_preempt(lambda: print("HOOK", flush=True))
        preempt.install(runner=lambda argv, **kw: print("RAN", *argv, flush=True),
                        environ={"SLURMTORCH_PREEMPT_SIGNAL": "USR1", "SLURMTORCH_JOB_RANK": "0", "SLURM_JOB_ID": "5"})
        assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
        def theirs(signum, frame):
            print("THEIRS", signum, flush=True)
        assert signal.signal(signal.SIGUSR1, theirs) is signal.SIG_DFL
        assert signal.getsignal(signal.SIGUSR1) is theirs
        os.kill(os.getpid(), signal.SIGUSR1)
        print("CARRIED ON", flush=True)
        assert signal.signal(signal.SIGUSR1, signal.SIG_DFL) is theirs  # the framework's teardown
        assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL  # other signals are untouched
        os.kill(os.getpid(), signal.SIGUSR1)  # ours again: rank 0 requeues and exits
        print("NOT REACHED", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["HOOK", "THEIRS 10", "CARRIED ON", "HOOK", "RAN scontrol requeue 5"]


@pytest.mark.parametrize("theirs", [False, True], ids=["hooks-only", "script-handler"])
def test_a_signal_in_a_job_that_cannot_be_requeued_says_so(theirs):
    """--signal with --no-requeue: the hooks run, and nothing will requeue the job; a script's own
    handler (Lightning's auto-requeue) asks Slurm to, is refused, and its fit ends as if done."""
    code = textwrap.dedent(f"""
        import os, signal
        from slurmtorch.bootstrap import preempt
        preempt.on_preempt(lambda: print("HOOK", flush=True))
        preempt.install(environ={{"SLURMTORCH_PREEMPT_SIGNAL": "USR1", "SLURMTORCH_PREEMPT_REQUEUE": "0",
                                  "SLURMTORCH_JOB_RANK": "0", "SLURM_JOB_ID": "5"}})
        def theirs(signum, frame):
            print("THEIRS", flush=True)
        if {theirs}:
            signal.signal(signal.SIGUSR1, theirs)
        os.kill(os.getpid(), signal.SIGUSR1)
        print("CARRIED ON", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["HOOK", *(["THEIRS"] if theirs else []), "CARRIED ON"]
    said = " ".join(proc.stderr.split())
    assert "SIGUSR1 received (restart 0)" in said and "this job cannot be requeued (--no-requeue)" in said, said
    if theirs:
        assert "then the script's own handler (theirs); this job cannot be requeued (--no-requeue)" in said, said
        assert "a requeue it asks for (Lightning's auto-requeue) is refused" in said, said
    else:
        assert "it runs on until Slurm ends it at its time limit" in said, said


def test_lightning_job_preempted_by_scancel_saves_hpc_ckpt_requeues_once_and_resumes(testbed, has_torch, tmp_path):
    # The same Lightning script, submitted with --signal, signalled by a real `scancel --signal=USR1`:
    # Lightning's handler saves hpc_ckpt_1.ckpt and requeues (once); the second run resumes from it.
    pytest.importorskip("lightning")
    root = tmp_path / "root"
    job_id, folder, code, out, err = preempted_job(testbed, tmp_path / "home", ["-N", "1", "-n", "1"],
                                                   [str(LIGHTNING_SCRIPT), str(root), "-1", "0.5", "120"],
                                                   "LIGHTNING step 5\n", timeout=240)
    assert code == 0, err
    assert (root / "hpc_ckpt_1.ckpt").is_file()
    text = (folder / "rank-0.out").read_text() + (folder / "rank-0.err").read_text()
    assert "then the script's own handler (_HandlersCompose)" in text
    assert text.count("Handling auto-requeue signal") == 1 and "requeueing job" not in text
    assert "Restarts=1" in testbed.run(["scontrol", "-o", "show", "job", job_id]).stdout
    assert "LIGHTNING done step 120" in text


# A script with its own handler for the signal that asks Slurm to requeue the job, as Lightning's
# SLURMEnvironment does (`scontrol requeue $SLURM_JOB_ID`), without Lightning's start-up time.
OWN_REQUEUE = """\
import os, signal, subprocess, time

asked = []


def requeue(signum, frame):
    said = subprocess.run(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]], capture_output=True, text=True)
    print("REQUEUE", said.returncode, said.stderr.strip(), flush=True)
    asked.append(signum)


signal.signal(signal.SIGUSR1, requeue)
print("READY", flush=True)
while not asked:
    time.sleep(0.1)
"""


def test_a_scripts_own_requeue_in_a_job_that_cannot_be_requeued_is_not_silent(testbed, has_torch, tmp_path):
    # Issue 44: `--signal` with `--no-requeue`: Lightning's auto-requeue saves, asks Slurm to requeue, is
    # refused (`Requested operation is presently disabled`), and its fit carries on until the time
    # limit ends it, never resumed. The signal is a real `scancel --signal=USR1`; the rank says so.
    home, script = tmp_path / "home", tmp_path / "own_requeue.py"
    script.write_text(OWN_REQUEUE)
    waiter = subprocess.Popen(
        [testbed.python, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed", "-N", "1", "-n", "1",
         "--signal", "USR1@60", "--no-requeue", "-t", "5", "--wait", str(script)],
        env=dict(testbed.env, SLURMTORCH_HOME=str(home)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job_id = ""
    try:
        job_id = waiter.stdout.readline().strip()
        folder = home / "jobs" / job_id
        wait_for(lambda: "READY\n" in read(folder / "rank-0.out"), 120, "the script's handler")
        sig = testbed.run(["scancel", "--signal=USR1", job_id])
        assert sig.returncode == 0, sig.stderr
        waiter.communicate(timeout=120)
    finally:
        if waiter.poll() is None:
            waiter.kill()
        if job_id.isdigit():
            testbed.run(["scancel", job_id])
    out, said = read(folder / "rank-0.out"), " ".join(read(folder / "rank-0.err").split())
    assert "REQUEUE 1 " in out and "presently disabled" in out, out  # Slurm refused the script's requeue
    assert ("SIGUSR1 received (restart 0); running 0 preemption hook(s), then the script's own handler (requeue); "
            "this job cannot be requeued (--no-requeue): a requeue it asks for (Lightning's auto-requeue) is refused, "
            "and the job runs on until Slurm ends it at its time limit") in said, said
    assert "Restarts=0" in testbed.run(["scontrol", "-o", "show", "job", job_id]).stdout

