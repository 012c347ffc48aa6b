"""Issue 45 on the real testbed: one record per job, and every front end telling the story from it.

A requeued job (`scontrol requeue`, as an operator would) says so where the user looks
(`--wait`, `status ID`, `status --json`), and its end line spans both starts; Slurm's word on
it outlives Slurm's memory of it; `clean` leaves a tombstone that `status` and `logs` name. A
failing job's headline is the same in `--wait`, `logs --follow`, `status ID` and a
Distributor's RemoteError; Ctrl-C during `Distributor.run()` cancels the job in one line.
Few jobs: one requeued job serves the first three tests, a failing one and a Distributor's
run of the same function the fourth, a sleeping Distributor run the fifth.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from helpers import read, st, wait_for

# Rank 0 prints its steps; the first start runs long enough to be requeued mid-way, the second
# (SLURM_RESTART_COUNT=1) takes 20 optimizer steps and ends.
TRAIN = """\
import os, time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
restart = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
model = DDP(torch.nn.Linear(8, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(3000 if restart == 0 else 20):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
    time.sleep(0.1)
    if dist.get_rank() == 0 and step % 5 == 0:
        print(f"restart {restart} step {step}", flush=True)
"""

# The same failing code for a batch job (run as a script) and a Distributor (its function):
# rank 1 raises, rank 0 waits in a collective until the step is ended for it.
FAILS = """\
import sys, time


def fail(how="raise"):
    import torch, torch.distributed as dist
    dist.all_reduce(torch.ones(1))
    if dist.get_rank() == 1:
        raise ValueError("bad batch")
    dist.all_reduce(torch.ones(1))


def sleep():
    print("sleeping", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    fail(*sys.argv[1:])
"""

# A Distributor run of `fails.NAME` on the testbed, its function sent by value (as a notebook's
# would be): the RemoteError's job and report lines on stdout as JSON.
DRIVER = """\
import json, sys
sys.path.insert(0, sys.argv[1])
import cloudpickle, fails
cloudpickle.register_pickle_by_value(fails)
from slurmtorch import Distributor
from slurmtorch.api.job import RemoteError
try:
    Distributor(num_processes=2, nodes=2, site="testbed", timeout=60, time="5").run(getattr(fails, sys.argv[2]))
except RemoteError as e:
    print(json.dumps({"job": e.job_id, "report": list(e.report)}), flush=True)
"""

FORGOTTEN = "987650"  # a job id this testbed never reaches: Slurm knows no such job


def live_signals() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="module")
def requeued(testbed, tmp_path_factory):
    """A 2-node job followed by `--wait --json`, requeued by `scontrol requeue` once rank 0
    trained a while, ended after its second start: (job id, home, the waiter's stdout: its
    end as JSON, and stderr: its lines)."""
    tmp = tmp_path_factory.mktemp("requeued")
    home = tmp / "home"
    script = tmp / "train.py"
    script.write_text(TRAIN)
    waiter = subprocess.Popen([testbed.python, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed", "-N", "2",
                               "--requeue", "-t", "5", "--wait", "--json", str(script)],
                              env={**testbed.env, "SLURMTORCH_HOME": str(home), "SLURMTORCH_LIVE_S": "1"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job_id = ""
    try:
        first = waiter.stderr.readline()  # --json: stdout holds the end alone
        job_id = re.fullmatch(r"submitted job (\d+); folder .*\n", first).group(1)
        rank0 = home / "jobs" / job_id / "rank-0.out"
        wait_for(lambda: "restart 0 step 30" in read(rank0), "rank 0's 30th step", 120)
        done = testbed.run(["scontrol", "requeue", job_id])
        assert done.returncode == 0, done.stderr
        out, err = waiter.communicate(timeout=240)
    finally:
        if waiter.poll() is None:
            waiter.kill()
        if job_id.isdigit():
            testbed.run(["scancel", job_id])
    assert waiter.returncode == 0, err
    return job_id, home, out, first + err


def record(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]


REQUEUE_LINE = re.compile(r"requeued \(by Slurm or an operator: scontrol requeue, preemption\); started again on "
                          r"node\S+ \(Slurm's restart 1\)")


@pytest.mark.timeout(420)
@pytest.mark.slurm_versions
def test_a_requeued_job_says_so_alike_in_wait_status_and_json_and_its_end_line_spans_both_starts(requeued, testbed):
    job_id, home, out, err = requeued
    folder = home / "jobs" / job_id
    said = [ln.removeprefix("slurmtorch: ") for ln in err.splitlines() if REQUEUE_LINE.search(ln)]
    assert len(said) == 1 and REQUEUE_LINE.fullmatch(said[0]), err  # as it happened, once
    status = st(testbed, home, ["status", job_id])
    assert status.returncode == 0 and status.stdout.splitlines()[1:2] == said, status.stdout
    (data,) = json.loads(st(testbed, home, ["status", job_id, "--json"]).stdout)
    assert (data["version"], data["restarts"], data["story"]["lines"]) == (1, 1, said), data
    ended = json.loads(out)  # --wait --json: its end, from the same report
    assert (ended["version"], ended["job_id"], ended["restarts"], ended["story"]["lines"]) == (1, job_id, 1, said)
    logs = json.loads(st(testbed, home, ["logs", job_id, "--json"]).stdout)
    assert logs["version"] == 1 and logs["logs"][0]["path"] == str(folder / "rank-0.out") and logs["restarts"] == 1
    # Both starts of the batch script, in the record: the first killed by the requeue (no code).
    events = record(folder)
    starts = [e for e in events if e["ev"] == "started"]
    ends = [e for e in events if e["ev"] == "ended"]
    assert [(e["attempt"], e.get("code")) for e in ends] == [(0, None), (1, 0)], events
    assert [e["attempt"] for e in starts] == [0, 1] and all(e["nodes"] for e in starts), events
    hours = sum((end["t"] - start["t"]) * 2 for start, end in zip(starts, ends)) / 3600
    end = next(ln for ln in err.splitlines() if ln.startswith("slurmtorch: run: "))
    assert end.endswith(f" over 2 starts = {hours:.3g} node-hours"), (end, events)
    assert ended["run"] == end.removeprefix("slurmtorch: ")
    top = json.loads(st(testbed, home, ["top", job_id, "--json"]).stdout)
    assert top["version"] == 1 and top["lines"][1:] == [ended["run"]], top  # the same end line
    # Every step of both starts: the first start's last sample (a second's lag behind its 30
    # steps and more), and the second's 20.
    first = max(json.loads(p.read_text())["steps"] for p in (folder / ".live" / "start-0").glob("rank-*.json"))
    assert first > 0 and f" over {first + 20} steps" in end, (end, first)


@pytest.mark.timeout(420)
def test_a_job_slurm_no_longer_knows_keeps_its_state_elapsed_and_nodes(requeued, testbed):
    """MinJobAge is 600 s here: waiting for Slurm to forget the job would cost ten minutes. Its
    folder copied under an id this testbed never reached is a job Slurm does not know, with
    the record the real one wrote (the batch script's starts and ends, and Slurm's word that
    `--wait` kept as it ended): what `status` finds once squeue forgets a job, both ways."""
    job_id, home, _, _ = requeued
    jobs = home / "jobs"
    assert any(e["ev"] == "settled" and e["state"] == "COMPLETED" for e in record(jobs / job_id))
    shutil.copytree(jobs / job_id, jobs / FORGOTTEN, symlinks=True)
    assert testbed.run(["squeue", "-h", "-t", "all", "-j", FORGOTTEN]).stdout.strip() == ""
    lines = st(testbed, home, ["status", FORGOTTEN]).stdout.splitlines()
    assert re.fullmatch(rf"job={FORGOTTEN} state=COMPLETED exit_code=0 nodes=node\S+ source=job folder code=\S+",
                        lines[0]), lines
    assert REQUEUE_LINE.fullmatch(lines[1]), lines
    table = st(testbed, home, ["status"]).stdout.splitlines()
    row = next(ln.split() for ln in table if ln.startswith(f"{FORGOTTEN} "))
    real = next(ln.split() for ln in table if ln.startswith(f"{job_id} "))
    assert row[1:] == real[1:] and row[2] == "COMPLETED" and re.fullmatch(r"\d+:\d\d", row[3]), table
    assert row[4:6] == ["0", "1"] and row[6].startswith("node"), table  # exit 0, one restart, its nodes


@pytest.mark.timeout(420)
def test_clean_leaves_a_tombstone_that_status_and_logs_name(requeued, testbed):
    job_id, home, _, _ = requeued
    done = st(testbed, home, ["clean", "--older-than", "0"])
    assert done.returncode == 0, done.stderr
    folder = home / "jobs" / job_id
    assert os.listdir(folder) == ["events.jsonl"], os.listdir(folder)
    lines = st(testbed, home, ["status", job_id]).stdout.splitlines()
    assert lines[0].startswith(f"job={job_id} state=COMPLETED exit_code=0 nodes=node") and " code=" not in lines[0]
    assert lines[-1].startswith("its folder was cleaned at ") and lines[-1].endswith(
        " (slurmtorch clean): its logs and files are gone"), lines
    logs = st(testbed, home, ["logs", job_id])
    assert logs.returncode == 1 and logs.stderr.splitlines()[0] == f"error: job {job_id}: {lines[-1]}", logs.stderr
    again = st(testbed, home, ["clean", "--older-than", "0"])
    assert again.stdout == "" and os.listdir(folder) == ["events.jsonl"], again  # never cleaned again


def headline(lines: list[str], job_id: str) -> list[str]:
    """The failure's headline and whole-log lines, the job's id and the failed rank's host made
    plain (the two jobs are two ids, and Slurm may place them on other nodes)."""
    kept = [ln.removeprefix("slurmtorch: ") for ln in lines]
    kept = [ln for ln in kept if ln.startswith("failed: ") or "'s whole log: " in ln]
    return [re.sub(r"\bnode\d+\b", "NODE", ln.replace(f" logs {job_id} ", " logs JOB ")) for ln in kept]


@pytest.mark.timeout(480)
def test_one_failure_reads_the_same_in_wait_logs_follow_status_and_the_distributors_remote_error(
        testbed, has_torch, tmp_path):
    home = tmp_path / "home"
    (tmp_path / "fails.py").write_text(FAILS)
    env = {"SLURMTORCH_HOME": str(home)}
    wait = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "2", "--wait", str(tmp_path / "fails.py")],
              timeout=200)
    assert wait.returncode == 1, wait.stderr
    job_id = wait.stdout.split()[0]
    want = headline(wait.stderr.splitlines(), job_id)
    assert len(want) == 2 and want[0].startswith("failed: rank 1 on NODE: ValueError: bad batch (at "), wait.stderr
    assert f"job {job_id} FAILED (exit 1 from rank 1" in wait.stderr
    follow = st(testbed, home, ["logs", job_id, "--follow"])
    assert headline(follow.stderr.splitlines(), job_id) == want, follow.stderr
    assert headline(st(testbed, home, ["status", job_id]).stdout.splitlines(), job_id) == want
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    run = testbed.run([testbed.python, str(driver), str(tmp_path), "fail"], env=env, timeout=300, cwd=str(tmp_path))
    assert run.returncode == 0 and run.stdout.strip(), run.stderr
    error = json.loads(run.stdout.strip().splitlines()[-1])
    assert headline(error["report"], error["job"]) == want, (error, want)
    assert f"slurmtorch: job {error['job']} FAILED (exit 1 from rank 1; the step exited " in run.stderr, run.stderr


@pytest.mark.timeout(300)
def test_ctrl_c_during_distributor_run_cancels_the_job_in_one_line(testbed, has_torch, tmp_path):
    """Issue 45: Ctrl-C during run() printed a bare KeyboardInterrupt traceback, and nothing
    said the job was cancelled."""
    (tmp_path / "fails.py").write_text(FAILS)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.Popen([testbed.python, str(driver), str(tmp_path), "sleep"], cwd=str(tmp_path),
                            env={**testbed.env, "SLURMTORCH_HOME": str(tmp_path / "home")}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=live_signals)
    try:
        assert proc.stdout.readline() == "sleeping\n"  # rank 0 runs: its output streams here
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    job_id = re.search(r"slurmtorch: job (\d+): ", err).group(1)
    last = err.rstrip("\n").splitlines()[-1]
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert last == f"slurmtorch: job {job_id} cancelled: Ctrl-C during run() (it was running)", err
    wait_for(lambda: testbed.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"]).stdout.strip()
             == "CANCELLED", "the job cancelled", 60)
