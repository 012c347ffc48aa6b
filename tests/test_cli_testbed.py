"""The real thing: `slurmtorch sbatch/status/logs/cancel` against the local Slurm testbed."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.testbed

PROBE = """\
import json, os, socket, sys
print(json.dumps({"host": socket.gethostname(), "rank": os.environ.get("RANK"),
                  "world": os.environ.get("WORLD_SIZE"), "argv": sys.argv[1:],
                  "x": os.environ.get("X"), "path": bool(os.environ.get("PATH")),
                  "ifname": os.environ.get("GLOO_SOCKET_IFNAME")}), flush=True)
print("to stderr", file=sys.stderr)
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""
ODD_ARGS = ["a 0", "a'; echo foo", "a\n0", "$(hostname)", "%j %t"]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home with space %"


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    p = tmp_path / "probe.py"
    p.write_text(PROBE)
    return p


def st(testbed, home: Path, argv, **kw) -> subprocess.CompletedProcess:
    env = {"SLURMTORCH_HOME": str(home)}
    env.update(kw.pop("env", {}))
    return testbed.run([testbed.python, "-m", "slurmtorch.cli.main", *argv], env=env, **kw)


def job_dirs(home: Path) -> list[Path]:
    jobs = home / "jobs"
    return sorted(jobs.iterdir()) if jobs.exists() else []


def test_four_node_job_waits_streams_rank0_and_keeps_the_exact_script(testbed, home, probe, tmp_path):
    argv = ["sbatch", "--site", "testbed", "-N", "4", "--env", "X=it's $HOME", str(probe)]
    proc = st(testbed, home, [*argv, "--wait", "--", *ODD_ARGS], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job_id, rank0 = proc.stdout.splitlines()[0], json.loads(proc.stdout.splitlines()[1])
    assert re.fullmatch(r"[0-9]+", job_id)
    assert rank0 == {"host": "node1", "rank": "0", "world": "4", "argv": ODD_ARGS, "x": "it's $HOME",
                     "path": True, "ifname": "eth0"}
    assert "to stderr" in proc.stderr and f"job {job_id} COMPLETED (exit 0)" in proc.stderr

    folder = home / "jobs" / job_id
    assert job_dirs(home) == [folder]  # no temporary folder left
    hosts = {json.loads((folder / f"rank-{r}.out").read_text())["host"] for r in range(4)}
    assert hosts == {"node1", "node2", "node3", "node4"}
    assert (folder / "exit-code").read_text() == "0\n"
    for p in (folder, folder / "script.sh"):
        assert not p.stat().st_mode & stat.S_IWOTH

    # --dry-run in another position: the script must still be byte for byte the submitted one.
    dry = st(testbed, home, [*argv[:3], "--dry-run", *argv[3:], "--", *ODD_ARGS], cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == (folder / "script.sh").read_text()

    status = st(testbed, home, ["status", job_id])
    assert status.returncode == 0, status.stderr
    assert f"job={job_id} state=COMPLETED exit_code=0" in status.stdout

    logs = st(testbed, home, ["logs", job_id, "--rank", "2"])
    assert json.loads(logs.stdout)["rank"] == "2" and logs.stderr == "to stderr\n"


def test_wait_exits_with_the_job_exit_code(testbed, home, probe):
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "2", "--env", "EXIT_WITH=3", str(probe), "--wait"])
    assert proc.returncode == 3, proc.stderr
    job_id = proc.stdout.splitlines()[0]
    status = st(testbed, home, ["status", job_id])
    assert "state=FAILED exit_code=3" in status.stdout


def test_job_survives_sbatch_export_none(testbed, home, probe):
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "2", str(probe), "--wait"],
              env={"SBATCH_EXPORT": "NONE"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[1])["path"] is True


def test_a_launchers_variables_left_in_the_submitting_shell_do_not_reach_the_job(testbed, home, has_torch):
    """sbatch passes the shell's environment on: a local torchrun's leftovers must not win.
    MASTER_ADDR is the first node's address on the site's interface (eth0), not its name."""
    stale = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "RANK": "5", "WORLD_SIZE": "9", "LOCAL_RANK": "3",
             "NODE_RANK": "2", "TF_CONFIG": '{"task": {"type": "ps", "index": 7}}'}
    example = Path(__file__).resolve().parent.parent / "examples" / "probe.py"
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "2", "--ntasks-per-node", "2", str(example),
                              "--wait"], env=stale, timeout=180)
    assert proc.returncode == 0, proc.stderr
    folder = home / "jobs" / proc.stdout.split()[0]
    lines = [ln for r in range(4) for ln in (folder / f"rank-{r}.out").read_text().splitlines()]
    head = next(ln.split(":")[0] for ln in lines if " RANK=0 " in f" {ln.split(': ', 1)[1]}")
    address = f"198.18.0.{10 + int(head[len('node'):])}"  # scripts/testbed: nodeK is 198.18.0.1K
    assert len(lines) == 4 and sorted(re.search(r"\bRANK=(\d+)", ln)[1] for ln in lines) == ["0", "1", "2", "3"]
    assert all(f"WORLD_SIZE=4 " in ln and f"MASTER_ADDR={address} " in ln and "all_reduce=10 " in ln
               for ln in lines), lines


def test_cancel_a_running_job_ends_the_wait(testbed, home, tmp_path):
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\nprint('started', flush=True)\ntime.sleep(300)\n")
    env = dict(testbed.env, SLURMTORCH_HOME=str(home))
    waiter = subprocess.Popen(
        [testbed.python, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed", "-N", "1",
         str(sleeper), "--wait"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job_id = waiter.stdout.readline().strip()
        assert re.fullmatch(r"[0-9]+", job_id), waiter.stderr.read() if waiter.poll() is not None else job_id
        deadline = time.monotonic() + 60
        out = home / "jobs" / job_id / "rank-0.out"
        while not (out.exists() and "started" in out.read_text()):
            assert time.monotonic() < deadline, "job never started"
            time.sleep(0.2)
        assert "state=RUNNING" in st(testbed, home, ["status", job_id]).stdout
        follower = subprocess.Popen(
            [testbed.python, "-m", "slurmtorch.cli.main", "logs", job_id, "--follow"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        assert follower.poll() is None  # still following a running job
        cancel = st(testbed, home, ["cancel", job_id])
        assert cancel.returncode == 0, cancel.stderr
        rc = waiter.wait(timeout=60)
        assert rc != 0
        assert "CANCELLED" in waiter.stderr.read()
        followed, _ = follower.communicate(timeout=30)
        assert follower.returncode == 0 and followed == "started\n"
    finally:
        if waiter.poll() is None:
            waiter.kill()
    assert "state=CANCELLED" in st(testbed, home, ["status", job_id]).stdout


def test_rejected_submission_leaves_no_job_folder(testbed, home, tmp_path, probe):
    site = tmp_path / "wrong.yaml"
    site.write_text("extends: testbed\npartitions:\n  debug: {default: false}\n"
                    "  nosuch: {max_nodes: 1, max_time: '10', node_type: cpu, default: true}\n")
    proc = st(testbed, home, ["sbatch", "--site", str(site), str(probe)])
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: sbatch failed (exit 1): ") and "partition" in proc.stderr
    assert proc.stdout == ""
    assert job_dirs(home) == []


@pytest.mark.parametrize("launcher,per_node", [("torchrun", 1), ("mpirun", 2)])
def test_each_launcher_runs_a_two_node_world_that_agrees(testbed, has_torch, tmp_path, launcher, per_node):
    """srun is the main job's launcher; torchrun (c10d on the head node) and mpirun (Open MPI in
    the allocation) must give the same world."""
    probe = Path(__file__).resolve().parent.parent / "examples" / "probe.py"
    r = testbed.run([testbed.python, "-m", "slurmtorch.cli.main", "sbatch", str(probe), "--site", "testbed",
                     "--nodes", "2", "--ntasks-per-node", str(per_node), "--launcher", launcher, "--wait"],
                    env={"SLURMTORCH_HOME": str(tmp_path)}, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    folder = tmp_path / "jobs" / r.stdout.split()[0]
    text = "".join(p.read_text() for p in sorted(folder.glob("*.out")))
    world = 2 * per_node
    expected = world * (world + 1) // 2
    lines = [ln for ln in text.splitlines() if "all_reduce=" in ln]
    assert len(lines) >= 1 and all(f"WORLD_SIZE={world} " in ln and f"all_reduce={expected} " in ln for ln in lines), text


@pytest.mark.parametrize("launcher", ["torchrun", "srun", "mpirun"])
def test_script_arguments_arrive_byte_exact_under_every_launcher(testbed, has_torch, home, probe, tmp_path, launcher):
    """torchrun substitutes `${local_rank}`/`$$` in worker arguments: `'$$' '${local_rank}'
    '$local_rank'` used to arrive as `['$', '0', '0']` under --launcher torchrun."""
    odd = ["$$", "${local_rank}", "$local_rank", "$", "a$b$$c", *ODD_ARGS]
    elastic_before = set(Path("/tmp").glob("torchelastic_*"))  # /tmp is shared by the testbed's nodes
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "1", "--launcher", launcher, "--wait",
                              str(probe), "--", *odd], cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = home / "jobs" / proc.stdout.split()[0]
    records = [json.loads(line) for p in sorted(folder.glob("*.out")) for line in p.read_text().splitlines()
               if line.startswith("{")]
    assert records and all(r["argv"] == odd for r in records), records
    # torchrun's own log folder is the job's, not a /tmp/torchelastic_* left on every node.
    assert set(Path("/tmp").glob("torchelastic_*")) - elastic_before == set()
