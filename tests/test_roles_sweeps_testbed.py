"""Role jobs and sweeps on the real 4-node Slurm testbed (real sbatch/srun, real gloo)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from test_cli_testbed import st

pytestmark = pytest.mark.testbed
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def test_role_job_gives_every_rank_the_cluster_and_only_training_ranks_all_reduce(testbed, tmp_path):
    home = tmp_path / "home"
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "--role", "master=1", "--role", "worker=2",
                              "--role", "ps=1", "--wait", str(SCRIPTS / "role_probe.py")], timeout=120)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.splitlines()[0]
    folder = home / "jobs" / job_id
    ranks = [json.loads((folder / f"rank-{r}.out").read_text()) for r in range(4)]
    port = int(ranks[0]["MASTER_PORT"])
    cluster = {"master": [f"node1:{port}"], "worker": [f"node2:{port + 1}", f"node3:{port + 2}"],
               "ps": [f"node4:{port + 3}"]}
    for r, (rank, role, index) in enumerate([(0, "master", 0), (1, "worker", 0), (2, "worker", 1), (3, "ps", 0)]):
        got = ranks[r]
        assert got["host"] == f"node{r + 1}"
        assert got["cluster_spec"] == {"cluster": cluster, "task": {"type": role, "index": index}}
        tf_role = "chief" if role == "master" else role
        assert got["tf_config"]["task"] == {"type": tf_role, "index": index}
        assert got["tf_config"]["cluster"]["chief"] == cluster["master"]
        assert (got["MASTER_ADDR"], got["WORLD_SIZE"]) == ("node1", "3")
    for r in range(3):
        assert ranks[r]["in_group"] and ranks[r]["group_size"] == 3 and ranks[r]["all_reduce"] == 6
        assert ranks[r]["RANK"] == str(r)
    assert ranks[3]["in_group"] is False and ranks[3]["RANK"] is None


def test_sweep_runs_a_2x2_grid_of_two_node_jobs_as_one_array(testbed, tmp_path):
    home = tmp_path / "home"
    argv = ["sbatch", "--site", "testbed", "-N", "2", "--sweep", "lr=1e-3,it's $x", "--sweep", "bs=32,64",
            "--array", "%2", "--env", "FAIL_TRIAL=3", "--wait", str(SCRIPTS / "sweep_probe.py"), "--", "--fixed", "1"]
    proc = st(testbed, home, argv, timeout=120)
    assert proc.returncode == 1, proc.stderr  # trial 3 fails on purpose
    job_id = proc.stdout.splitlines()[0]
    assert "job %s: 3 of 4 trials succeeded; failed: 3" % job_id in proc.stderr
    folder = home / "jobs" / job_id
    grid = [("1e-3", "32"), ("1e-3", "64"), ("it's $x", "32"), ("it's $x", "64")]
    for trial, (lr, bs) in enumerate(grid):
        for rank in range(2):
            got = json.loads((folder / f"trial-{trial}" / f"rank-{rank}.out").read_text())
            assert got["trial"] == got["spec_trial"] == got["array_task"] == str(trial)
            assert (got["rank"], got["world"]) == (str(rank), "2")
            assert got["params"] == {"lr": lr, "bs": bs}
            assert got["env"] == {"SLURMTORCH_SWEEP_LR": lr, "SLURMTORCH_SWEEP_BS": bs}
            assert got["argv"] == ["--fixed", "1", "--lr", lr, "--bs", bs]

    status = st(testbed, home, ["status", job_id])
    lines = [ln for ln in status.stdout.splitlines() if ln.startswith("trial=")]
    assert [ln.split()[0] for ln in lines] == ["trial=0", "trial=1", "trial=2", "trial=3"]
    assert "state=COMPLETED exit_code=0" in lines[0] and "params=lr=1e-3,bs=32" in lines[0]
    assert "state=FAILED exit_code=1" in lines[3]

    logs = st(testbed, home, ["logs", job_id, "--trial", "2", "--rank", "1"])
    assert logs.returncode == 0, logs.stderr
    assert json.loads(logs.stdout)["params"] == {"lr": "it's $x", "bs": "32"}
    no_trial = st(testbed, home, ["logs", job_id])
    assert no_trial.returncode != 0 and no_trial.stderr.startswith(f"error: job {job_id} is an array of 4 trials")


def test_a_failed_role_step_stops_the_others_and_is_named(testbed, tmp_path):
    """Each role is its own srun step: without the batch script's `wait -n` loop a failed
    worker would leave the ps step (and the master) running to the time limit. `st`'s
    timeout is the hang guard."""
    home = tmp_path / "home"
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "--role", "master=1", "--role", "worker=1",
                              "--role", "ps=1", "--wait", str(SCRIPTS / "role_fail.py")], timeout=150)
    assert proc.returncode != 0, proc.stderr
    job_id = proc.stdout.splitlines()[0]
    batch = (home / "jobs" / job_id / "batch.out").read_text()
    assert "slurmtorch: role worker exited with 4; stopping the other roles" in batch, batch
    assert re.search(r"rank 1 on node\d+ failed:", (home / "jobs" / job_id / "rank-1.err").read_text())
