"""Recovery without a human, on the real testbed (issue 17): a lost node, a killed rank and a
hung rank are replaced by a spare and training resumes from its checkpoint with the same
final weights as an uninterrupted run; a bug in the script is retried once and ends the job
with its cause; with no spare left the job is requeued without the node and still finishes.

Each job trains tests/scripts/resume_train.py (2 ranks, one per node, deterministic gloo DDP,
a checkpoint after every step) with --max-restarts; the fault comes after its first
checkpoint. The uninterrupted reference is the same script under mpirun on this host: gloo
sums two ranks' gradients exactly, so the weights' hash must match bit for bit.
The times from fault to resumed training are printed (`-s` shows them), never asserted.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import helpers
from helpers import read, st

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "tests" / "scripts" / "resume_train.py"
TESTBED = REPO / "scripts" / "testbed"
STEPS = "14"
GUARD_S = 300  # every job here ends well within this; a hang fails the test instead


@pytest.fixture(scope="module")
def reference(mpi_env, has_torch, tmp_path_factory) -> str:
    """The final weights' hash of an uninterrupted run (2 ranks under mpirun, here)."""
    folder = tmp_path_factory.mktemp("reference")
    proc = subprocess.run(["mpirun", "-n", "2", "--oversubscribe", sys.executable, "-m", "slurmtorch.bootstrap",
                           str(TRAIN), STEPS], env={**mpi_env, "SLURMTORCH_CHECKPOINT_DIR": str(folder)},
                          capture_output=True, text=True, timeout=GUARD_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return re.search(r"^final (\w+)$", proc.stdout, re.MULTILINE).group(1)


def submit(testbed, home: Path, *opts: str, fault: str = "none:0:0", env: dict | None = None) -> str:
    """A 2-rank training job with --max-restarts 3: on 2 nodes, or on the roles `opts` name."""
    nodes = () if "--role" in opts else ("--nodes", "2")
    out = st(testbed, home, ["sbatch", "--site", "testbed", *nodes, "--timeout", "60", "-t", "10",
                             "--max-restarts", "3", *opts, str(TRAIN), STEPS, fault], timeout=60, env=env or {})
    assert out.returncode == 0, out.stderr
    return out.stdout.split()[0]


def wait_for(predicate, what: str, timeout: float = GUARD_S):
    return helpers.wait_for(predicate, what, timeout)


def rank_1(folder: Path) -> tuple[int, str]:
    """(pid, host) of rank 1's first start, from its first line."""
    m = wait_for(lambda: re.search(r"^rank 1 pid (\d+) on (\S+) start 0$", read(folder / "rank-1.out"),
                                   re.MULTILINE), "rank 1 to start")
    wait_for(lambda: (folder / "checkpoints" / "state.pt").exists(), "the first checkpoint")
    return int(m.group(1)), m.group(2)


def finished(testbed, job: str) -> bool:
    out = testbed.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip()
    return out in ("", "COMPLETED", "FAILED", "CANCELLED")


def resumed_at(folder: Path) -> float:
    m = wait_for(lambda: re.search(r"^resumed at step \d+ \(start \d+\) on \S+ at ([\d.]+)$",
                                   read(folder / "rank-0.out"), re.MULTILINE), "training to resume")
    return float(m.group(1))


def final_hash(testbed, job: str, folder: Path) -> str:
    wait_for(lambda: finished(testbed, job), f"job {job} to end")
    m = re.search(r"^final (\w+)$", read(folder / "rank-0.out"), re.MULTILINE)
    assert m, read(folder / "batch.out") + read(folder / "rank-0.out")
    return m.group(1)


@pytest.fixture
def lose_node(testbed):
    """Fail a node the hard way (scripts/testbed fail-node); it is restored afterwards, whatever happened."""
    lost = []

    def lose(node: str) -> float:
        lost.append(node)
        t = time.time()
        subprocess.run([str(TESTBED), "fail-node", node], check=True, capture_output=True, timeout=60)
        return t

    yield lose
    for node in lost:
        subprocess.run([str(TESTBED), "restore-node", node], check=True, capture_output=True, timeout=120,
                       env=testbed.env)


@pytest.mark.timeout(GUARD_S + 120)
@pytest.mark.slurm_versions
def test_a_lost_node_is_replaced_by_the_spare_and_training_ends_as_if_uninterrupted(testbed, reference, lose_node,
                                                                                     tmp_path):
    home = tmp_path / "home"
    job = submit(testbed, home, "--spare-nodes", "1")
    folder = home / "jobs" / job
    _, host = rank_1(folder)
    t = lose_node(host)
    print(f"\nlost node {host}: fault -> resumed {resumed_at(folder) - t:.1f} s")
    assert final_hash(testbed, job, folder) == reference
    status = st(testbed, home, ["status", job]).stdout
    assert "restarts: 1 of 3; excluded: " + host in status, status
    assert f"start 0 failed: rank 1 on {host}: lost with its node (srun: Node failure on {host})" in status, status
    assert testbed.run(["scontrol", "-o", "show", "job", job]).stdout.count("Restarts=0") == 1  # not requeued


@pytest.mark.timeout(GUARD_S + 120)
def test_a_killed_rank_is_restarted_on_the_spare_and_its_node_named(testbed, reference, tmp_path):
    home = tmp_path / "home"
    job = submit(testbed, home, "--spare-nodes", "1")
    folder = home / "jobs" / job
    pid, host = rank_1(folder)
    t = time.time()
    subprocess.run(["kill", "-9", str(pid)], check=True)
    print(f"\nkill -9 of rank 1 on {host}: fault -> resumed {resumed_at(folder) - t:.1f} s")
    assert final_hash(testbed, job, folder) == reference
    status = st(testbed, home, ["status", job]).stdout
    assert f"start 0 failed: rank 1 on {host}: killed by a signal" in status and f"{host} excluded" in status, status


def killed_worker_restarts(testbed, reference, home: Path, *opts: str) -> str:
    """A role job (master=1 and a worker: the reference's 2-rank world) whose worker kills
    itself at step 3, run to its end with the same weights as the reference: `status`'s text,
    which names the worker's role and its excluded node."""
    job = submit(testbed, home, "--role", "master=1", *opts, fault="kill:1:3")
    folder = home / "jobs" / job
    _, host = rank_1(folder)
    assert final_hash(testbed, job, folder) == reference
    status = st(testbed, home, ["status", job]).stdout
    assert f"start 0 failed: rank 1 (worker 0) on {host}: killed by a signal" in status, status
    assert f"{host} excluded" in status and "state=COMPLETED" in status, status
    return status


@pytest.mark.timeout(GUARD_S + 120)
def test_a_killed_worker_of_a_role_job_is_restarted_on_the_spare_with_its_role_named(testbed, reference, tmp_path):
    """Issue 38: --max-restarts and --spare-nodes for a role job."""
    killed_worker_restarts(testbed, reference, tmp_path / "home", "--role", "worker=1", "--spare-nodes", "1")


@pytest.mark.timeout(GUARD_S + 120)
@pytest.mark.slurm_versions
def test_a_killed_worker_of_a_heterogeneous_job_is_restarted_on_a_spare_of_its_own_kind(testbed, reference,
                                                                                       tmp_path):
    """Issue 38: the worker on the `fat` node type (its own component) holds a spare of that
    kind: the restart puts the worker there, and the master stays where it was."""
    status = killed_worker_restarts(testbed, reference, tmp_path / "home", "--role", "worker=1:partition=fat:spare=1")
    restart = re.search(r"killed by a signal.*; (\S+) excluded; restarted on (\S+),(\S+)", status)
    assert restart and restart.group(3) in ("node3", "node4") and restart.group(3) != restart.group(1), status


def supervisor_pid(job: str) -> int:
    """The restart supervisor of `job` (the testbed's nodes share this machine's process table)."""
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"slurmtorch." in a and a.endswith(b".supervisor") for a in cmd) and f"SLURM_JOB_ID={job}".encode() in env:
            return int(proc.name)
    raise AssertionError(f"no restart supervisor of job {job} running")


@pytest.mark.timeout(GUARD_S + 120)
def test_a_killed_supervisor_ends_the_job_and_the_report_says_so(testbed, has_torch, tmp_path):
    """kill -9 of the restart supervisor ended the job, but no line said why."""
    home = tmp_path / "home"
    job = submit(testbed, home, "--spare-nodes", "1")
    folder = home / "jobs" / job
    rank_1(folder)
    os.kill(supervisor_pid(job), signal.SIGKILL)
    wait_for(lambda: finished(testbed, job) and (folder / "exit-code").exists(), f"job {job} to end")
    assert "slurmtorch: error: the restart supervisor was killed by SIGKILL (exit 137)" in read(folder / "batch.out")
    status = st(testbed, home, ["status", job]).stdout
    assert ("failed: the restart supervisor on the batch node was killed by SIGKILL (exit 137); the job ended with it, "
            "and nothing restarted it") in status, status


@pytest.mark.timeout(GUARD_S + 120)
def test_a_hung_rank_is_found_by_its_heartbeat_and_the_step_restarted(testbed, reference, tmp_path):
    home = tmp_path / "home"
    job = submit(testbed, home, "--spare-nodes", "1", "--hang-timeout", "15", fault="hang:1:4")
    folder = home / "jobs" / job
    _, host = rank_1(folder)
    fault = float(wait_for(lambda: re.search(r"^FAULT hang at ([\d.]+)$", read(folder / "rank-1.err"), re.MULTILINE),
                           "the hang").group(1))
    print(f"\nrank 1 hangs on {host}: fault -> resumed {resumed_at(folder) - fault:.1f} s (--hang-timeout 15)")
    assert final_hash(testbed, job, folder) == reference
    status = st(testbed, home, ["status", job]).stdout
    assert f"start 0 failed: rank 1 on {host}: hung: stuck in its own code" in status, status
    assert "while rank 0 waited for it" in status and f"{host} excluded" in status, status


@pytest.mark.timeout(GUARD_S + 120)
def test_a_rank_slower_than_the_other_has_its_node_replaced_by_the_spare(testbed, reference, tmp_path):
    """Issue 37: --replace-straggler hands a slow rank's node to the spare-node path (samples every 1 s)."""
    home = tmp_path / "home"
    job = submit(testbed, home, "--spare-nodes", "1", "--replace-straggler", "0.2", fault="slow:1:1",
                 env={"SLURMTORCH_LIVE_S": "1"})
    folder = home / "jobs" / job
    _, host = rank_1(folder)
    fault = float(wait_for(lambda: re.search(r"^FAULT slow at ([\d.]+)$", read(folder / "rank-1.err"), re.MULTILINE),
                           "the slow steps").group(1))
    print(f"\nrank 1 slow on {host}: slow -> resumed on the spare {resumed_at(folder) - fault:.1f} s "
          "(--replace-straggler 0.2, a sample every 1 s)")
    assert final_hash(testbed, job, folder) == reference
    status = st(testbed, home, ["status", job]).stdout
    assert f"start 0 failed: rank 1 on {host}: a straggler: " in status, status
    assert f"{host} excluded" in status, status
    assert f"ending the step to replace {host} (--replace-straggler)" in read(folder / "batch.out")


@pytest.mark.timeout(GUARD_S + 120)
def test_a_bug_in_the_script_is_retried_once_and_ends_the_job_with_its_cause(testbed, has_torch, tmp_path):
    home = tmp_path / "home"
    out = st(testbed, home, ["sbatch", "--site", "testbed", "--nodes", "2", "--timeout", "60", "-t", "10",
                             "--max-restarts", "3", "--spare-nodes", "1", "--wait", str(TRAIN), STEPS, "raise-all:0:2"],
             timeout=GUARD_S)
    assert out.returncode == 1, out.stderr
    job = out.stdout.split()[0]
    assert "slurmtorch: restarts: 1 of 3" in out.stderr, out.stderr
    assert "ValueError: bad batch at step 2; restarted on " in out.stderr, out.stderr
    assert "not restarted" in out.stderr and "failed: rank 0 on" in out.stderr, out.stderr
    batch = read(home / "jobs" / job / "batch.out")
    assert batch.count("slurmtorch: start ") == 1 + 2, batch  # one restart line, two failed starts
    assert "it failed again after a restart: the script's failure, not the machine's" in batch, batch


@pytest.mark.timeout(GUARD_S + 180)
def test_with_no_spare_left_the_job_is_requeued_without_the_node_and_finishes(testbed, reference, lose_node,
                                                                              tmp_path):
    home = tmp_path / "home"
    job = submit(testbed, home)
    folder = home / "jobs" / job
    _, host = rank_1(folder)
    t = lose_node(host)
    print(f"\nlost node {host}, no spare: fault -> resumed after requeue {resumed_at(folder) - t:.1f} s")
    assert final_hash(testbed, job, folder) == reference
    shown = testbed.run(["scontrol", "-o", "show", "job", job]).stdout
    assert f"ExcNodeList={host}" in shown and "Restarts=1" in shown, shown
    assert host not in re.search(r" NodeList=(\S+)", shown).group(1), shown
    status = st(testbed, home, ["status", job]).stdout
    assert f"requeued without {host}" in status, status


def job_field(testbed, job: str, key: str) -> str:
    shown = testbed.run(["scontrol", "-o", "show", "job", job]).stdout
    m = re.search(rf"(?:^| ){key}=(\S*)", shown)
    return m.group(1) if m else ""


def job_nodes(testbed, job: str) -> list[str]:
    return testbed.run(["scontrol", "show", "hostnames", job_field(testbed, job, "NodeList")]).stdout.split()


@pytest.mark.timeout(GUARD_S + 240)
@pytest.mark.slurm_versions
def test_losing_the_batch_node_requeues_the_job_without_it_and_training_resumes(testbed, reference, lose_node,
                                                                                tmp_path):
    """Issue 24, item 3: the batch node (rank 0's, and the supervisor's) is lost. Slurm keeps a
    --no-kill job running on the survivors with no batch script; the watcher on another node
    requeues it without the node within about SlurmdTimeout, and training resumes."""
    home = tmp_path / "home"
    waiter = subprocess.Popen([testbed.python, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed",
                               "--nodes", "2", "--timeout", "60", "-t", "10", "--max-restarts", "3",
                               "--spare-nodes", "1", "--wait", str(TRAIN), STEPS],
                              env={**testbed.env, "SLURMTORCH_HOME": str(home)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        folder = wait_for(lambda: next((home / "jobs").glob("[0-9]*"), None), "the job folder")
        job = folder.name
        rank_1(folder)
        batch = job_field(testbed, job, "BatchHost")
        t = lose_node(batch)
        wait_for(lambda: job_field(testbed, job, "Restarts") == "1", "the job to be requeued", timeout=60)
        print(f"\nlost batch node {batch}: fault -> requeued {time.time() - t:.1f} s, "
              f"-> resumed {resumed_at(folder) - t:.1f} s")
        out, err = waiter.communicate(timeout=GUARD_S)
    finally:
        if waiter.poll() is None:
            waiter.kill()
    assert waiter.returncode == 0, err
    assert final_hash(testbed, job, folder) == reference
    assert batch not in job_nodes(testbed, job)
    status = st(testbed, home, ["status", job]).stdout
    lost = f"start 0 failed: the batch node {batch} was lost (and the restart supervisor with it)"
    assert f"restarts: 1 of 3; excluded: {batch}" in status and lost in status, status
    assert f"requeued without {batch}" in status, status
    assert f"after: {lost.removeprefix('start 0 failed: ')}" in err and lost in err, err  # --wait says it too


@pytest.mark.timeout(GUARD_S + 240)
def test_two_nodes_lost_at_once_are_both_excluded_and_training_resumes(testbed, reference, lose_node, tmp_path):
    """Issue 24, item 4: rank 1's node and the spare are lost together. Both are excluded (the
    spare was not in the step: Slurm says it is gone), no start is tried on the dead spare, and
    the job is requeued on what is left and resumes."""
    home = tmp_path / "home"
    job = submit(testbed, home, "--spare-nodes", "1")
    folder = home / "jobs" / job
    _, host = rank_1(folder)
    spare = job_nodes(testbed, job)[2]  # the supervisor runs on the first two of the job's nodes
    t = lose_node(host)
    lose_node(spare)
    print(f"\nlost {host} and the spare {spare}: fault -> resumed {resumed_at(folder) - t:.1f} s")
    assert final_hash(testbed, job, folder) == reference
    lost = sorted([host, spare])
    assert not set(lost) & set(job_nodes(testbed, job))
    status = st(testbed, home, ["status", job]).stdout
    assert f"excluded: {','.join(lost)}" in status and "state=COMPLETED" in status, status
    assert "Requested node configuration is not available" not in read(folder / "batch.out")
