"""`Job.attach`: a Distributor's job found again by its id from another process (a notebook
whose kernel died), on the Slurm testbed; and what there is nothing to attach to, in one line.

The remote half (`Job.attach(..., cluster=)`, `Distributor(cluster=).submit`) runs through the
test ground's login host in tests/remote/test_remote_testbed.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from slurmtorch import Job
from slurmtorch.api.clusterjob import ClusterJob
from slurmtorch.api.job import RemoteError
from slurmtorch.errors import SlurmtorchError, SpecError, SubmitError

SLURM_WAIT_S = 180  # the testbed is shared: a job may queue behind someone else's


@pytest.fixture
def home(tmp_path, monkeypatch):
    path = tmp_path / "st home"
    monkeypatch.setenv("SLURMTORCH_HOME", str(path))
    monkeypatch.delenv("SLURMTORCH_CLUSTER", raising=False)
    return path


@pytest.mark.testbed
@pytest.mark.torch
@pytest.mark.timeout(2 * SLURM_WAIT_S + 60)
def test_a_job_whose_submitting_process_ended_is_attached_by_id_and_answers_once(testbed, has_torch, home,
                                                                                  monkeypatch):
    for key in ("SLURM_CONF", "PATH"):
        monkeypatch.setenv(key, testbed.env[key])
    code = textwrap.dedent('''
        from slurmtorch import Distributor
        def double(x):
            import torch.distributed as dist
            return [x * 2, dist.get_world_size()]
        def boom():
            raise ValueError("attach sees this")
        d = Distributor(num_processes=2, nodes=2, site="testbed", time="3", timeout=60, progress=False)
        print(d.submit(double, 21).job_id, d.submit(boom).job_id)
    ''')
    submitted = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert submitted.returncode == 0, submitted.stderr
    good, bad = submitted.stdout.split()
    try:
        job = Job.attach(good)
        assert (job.job_id, job.name, job.ntasks) == (good, "double", 2)
        assert job.result(timeout=SLURM_WAIT_S) == [42, 2]
        assert job.state() == "COMPLETED"
        with pytest.raises(SlurmtorchError, match=f"job {good} completed, and its result was read already"):
            Job.attach(good).result()
        assert Job.attach(bad).wait(timeout=SLURM_WAIT_S) == "FAILED"  # ended; its answer not read yet
        cleaned = subprocess.run([sys.executable, "-m", "slurmtorch", "clean", "--older-than", "0"],
                                 capture_output=True, text=True, timeout=60)
        lines = cleaned.stdout.splitlines()  # one line: the folder of the job whose answer was read
        assert len(lines) == 1 and lines[0].startswith(f"removed {home / 'jobs' / good} ("), cleaned
        assert cleaned.stderr.endswith("; kept: 1 with a Distributor answer never read\n"), cleaned.stderr
        with pytest.raises(RemoteError) as e:
            Job.attach(int(bad)).result(timeout=SLURM_WAIT_S)
        assert e.value.job_id == bad and "ValueError: attach sees this" in e.value.traceback_text
    finally:
        subprocess.run(["scancel", good, bad], env=testbed.env, capture_output=True, timeout=30)


def a_job_folder(home, job_id: str, record: dict) -> None:
    folder = home / "jobs" / job_id
    folder.mkdir(parents=True, mode=0o700)
    for level in (home, home / "jobs"):
        level.chmod(0o700)
    (folder / "job.json").write_text(json.dumps(record))


def test_an_id_with_no_job_folder_is_one_line_naming_where_it_looked(home):
    with pytest.raises(SpecError, match=f"no job 4242 in {home / 'jobs'}"):
        Job.attach("4242")
    with pytest.raises(SpecError, match="invalid job id 'x; rm'"):
        Job.attach("x; rm")


def test_a_job_no_distributor_submitted_has_no_answer_and_the_tip_follows_it(home):
    a_job_folder(home, "77", {"launcher": "srun", "nodes": 1, "ntasks": 1, "ntasks_per_node": 1})
    with pytest.raises(SpecError, match="job 77 was not submitted by a Distributor") as e:
        Job.attach("77")
    assert "slurmtorch status 77" in e.value.tip


def test_a_pruned_run_folder_is_one_line(home):
    a_job_folder(home, "78", {"launcher": "srun", "nodes": 1, "ntasks": 2, "ntasks_per_node": 2,
                              "run_folder": str(home / "distributor" / "gone")})
    with pytest.raises(SubmitError, match="job 78's run folder .* is gone or unreadable"):
        Job.attach("78")


def test_attaching_with_a_cluster_asks_that_cluster_and_here_it_is_local(home, monkeypatch):
    job = Job.attach(5, cluster="alps")
    assert isinstance(job, ClusterJob) and (job.job_id, job.cluster) == ("5", "alps")
    monkeypatch.setenv("SLURMTORCH_CLUSTER", "alps")
    assert isinstance(Job.attach("5"), ClusterJob)
    monkeypatch.setenv("SLURMTORCH_ON_CLUSTER", "alps")  # the cluster's side of the relay
    with pytest.raises(SpecError, match="no job 5 in"):
        Job.attach("5")


def test_attaching_with_answer_json_refuses_a_pickled_answer_before_reading_it(home):
    """Issue 44: answer="json" takes JSON only; a job submitted without it keeps its pickled
    answer (unread) and says so in one line; the choice is the attaching side's own."""
    run = home / "distributor" / "r1"
    run.mkdir(parents=True, mode=0o700)
    (run / "meta.json").write_text(json.dumps({"kind": "function", "name": "train"}))
    (run / "result.pkl").write_bytes(b"never read")
    a_job_folder(home, "79", {"launcher": "srun", "nodes": 1, "ntasks": 1, "ntasks_per_node": 1,
                              "run_folder": str(run)})
    with pytest.raises(SpecError, match="job 79 was submitted without answer='json': its answer is pickled"):
        Job.attach("79", answer="json").result()
    assert (run / "result.pkl").read_bytes() == b"never read" and not (run / "ended").exists()
    with pytest.raises(SpecError, match="answer must be 'pickle' or 'json', got 'yaml'"):
        Job.attach("79", answer="yaml")
    job = Job.attach(6, cluster="alps", answer="json")
    assert isinstance(job, ClusterJob) and job.answer == "json"
    assert repr(job) == "ClusterJob('6', cluster='alps', answer='json')"
