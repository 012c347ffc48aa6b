"""`--cluster` from the testbed's laptop (no Slurm command, no Slurm or munge configuration)
to its login host (a real sshd, key login, host key pinned): the code synced with rsync and
the job running what was submitted, whatever the laptop edits later, through a requeue too;
--wait, Ctrl-C, logs, status and cancel over one connection; a Distributor's call and its
error coming back; and each failure of the connection or of the cluster side in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import threading
from pathlib import Path

import pytest

from conftest import TESTBED
from helpers import read, wait_for
from terminal import Terminal

pytestmark = pytest.mark.testbed

TRAIN = '''\
import os, sys, time
from pathlib import Path
from helper import VERSION
out, mode = Path(sys.argv[1]), sys.argv[2]
log = out / "starts.log"
n = len(log.read_text().splitlines()) if log.exists() else 0
with open(log, "a") as f:
    f.write(f"{n} {VERSION} {__file__}\\n")
print(f"version {VERSION}", flush=True)
if mode == "sleep":
    time.sleep(600)
if mode == "requeue" and n == 0:
    time.sleep(600)  # the test requeues the job now
'''


def write_tree(root: Path, version: str, extra: int = 0) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(TRAIN)
    (root / "helper.py").write_text(f"VERSION = {version!r}\n")
    for i in range(extra):
        (root / "pkg").mkdir(exist_ok=True)
        (root / "pkg" / f"m{i}.py").write_text(f"X = {i}\n")


def git(root: Path, *argv: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.email=t@example.invalid", "-c", "user.name=t", *argv],
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def cluster(laptop, tmp_path):
    """The laptop's clusters file naming the login host `testbed`; yields the laptop."""
    write_clusters(laptop, python=laptop.python)
    yield laptop
    for line in laptop.run(["ssh", laptop.login_host, "squeue", "-h", "-o", "%i"]).stdout.split():
        laptop.testbed.run(["scancel", line])


def write_clusters(laptop, **entry) -> None:
    conf = laptop.home / ".config" / "slurmtorch"
    conf.mkdir(parents=True, exist_ok=True)
    values = {"host": laptop.login_host, "site": "testbed", "workdir": str(laptop.workdir), **entry}
    (conf / "clusters.yaml").write_text("testbed:\n" + "".join(f"  {k}: {v}\n" for k, v in values.items()))


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "proj"
    write_tree(root, "v1", extra=20)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "v1")
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)
    return root, out


def st(laptop, argv, **kw) -> subprocess.CompletedProcess:
    return laptop.run(["slurmtorch", *argv], **kw)


def submit(laptop, root: Path, out: Path, mode: str, *opts: str) -> str:
    sub = st(laptop, ["sbatch", "--cluster", "testbed", "-N", "1", "-t", "5", "--timeout", "60", *opts,
                      "train.py", str(out), mode], cwd=root, timeout=120)
    assert sub.returncode == 0, sub.stderr
    return sub.stdout.split()[0]


def starts(out: Path) -> list[list[str]]:
    return [line.split(" ") for line in read(out / "starts.log").splitlines()]


def job_folder(laptop, job: str) -> Path:
    return laptop.workdir / "jobs" / job


@pytest.mark.timeout(300)
def test_a_job_runs_the_code_as_the_laptop_submitted_it_whatever_is_synced_later(cluster, project, has_torch):
    root, out = project
    laptop = cluster
    job = submit(laptop, root, out, "once", "--begin", "now+5")  # the edit and the sync below come first
    before = (root / "helper.py").stat()
    (root / "helper.py").write_text("VERSION = 'v2'\n")  # one file edited: the same size,
    os.utime(root / "helper.py", ns=(before.st_atime_ns, before.st_mtime_ns))  # and time, as within a second
    dry = st(laptop, ["sbatch", "--cluster", "testbed", "--dry-run", "train.py", str(out), "once"], cwd=root)
    assert dry.returncode == 0, dry.stderr
    assert "(22 files, 1 sent)" in dry.stderr  # the edit alone crossed
    mirror = Path(dry.stderr.split("code synced to testbed:")[1].split(" ")[0])
    assert read(mirror / "helper.py") == "VERSION = 'v2'\n"  # the mirror has the edit; the job must not
    folder = job_folder(laptop, job)
    wait_for(lambda: (folder / "exit-code").exists(), "the job to end", 180)
    assert read(folder / "exit-code").strip() == "0", read(folder / "batch.out") + read(folder / "rank-0.err")
    ((n, version, path),) = starts(out)
    assert (version, path) == ("v1", str(folder / "code" / "train.py"))

    status = st(laptop, ["status", "--cluster", "testbed", job])
    assert status.returncode == 0, status.stderr
    commit = git(root, "rev-parse", "HEAD").strip()
    assert status.stdout.endswith(f" code={commit[:12]}\n")  # the laptop's commit, clean when submitted
    (record,) = json.loads(st(laptop, ["status", "--cluster", "testbed", "--json", job]).stdout)
    assert record["code"]["root"].endswith(f":{root}") and record["code"]["files"] == 22
    logs = st(laptop, ["logs", "--cluster", "testbed", job])
    assert logs.stdout == "version v1\n"
    # private on the cluster: the mirror and the job folder
    for place in (mirror, folder, laptop.workdir / "sync"):
        assert place.stat().st_mode & 0o077 == 0, place


@pytest.mark.timeout(300)
def test_a_requeued_job_runs_the_submitted_code_after_the_laptop_synced_an_edit(cluster, project, has_torch):
    root, out = project
    laptop = cluster
    job = submit(laptop, root, out, "requeue", "--requeue")
    folder = job_folder(laptop, job)
    wait_for(lambda: len(starts(out)) == 1, "the first start", 120)
    write_tree(root, "v2")
    synced = st(laptop, ["sbatch", "--cluster", "testbed", "--dry-run", "train.py", str(out), "x"], cwd=root)
    assert synced.returncode == 0, synced.stderr
    requeue = laptop.testbed.run(["scontrol", "requeue", job])
    assert requeue.returncode == 0, requeue.stderr
    wait_for(lambda: len(starts(out)) == 2, "the requeued start", 150)
    wait_for(lambda: read(folder / "exit-code").strip() == "0", "the requeued job to end", 60)
    assert [line[1:] for line in starts(out)] == [["v1", str(folder / "code" / "train.py")]] * 2


@pytest.mark.timeout(240)
def test_wait_follows_over_ssh_and_ctrl_c_leaves_the_job_running_as_on_the_login_host(cluster, project, has_torch):
    root, out = project
    laptop = cluster
    proc = subprocess.Popen([str(TESTBED), "laptop", "slurmtorch", "sbatch", "--cluster", "testbed",
                             "-N", "1", "--wait", "train.py", str(out), "sleep"],
                            cwd=root, env=laptop.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        # rank 0's output came through while it waited (at the cluster side's polling pace)
        wait_for(lambda: "version v1\n" in lines, "rank 0's output on the laptop", 120)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        stderr = proc.stderr.read()
    finally:
        proc.kill()
    reader.join(10)
    stdout = "".join(lines)
    job = stdout.split()[0]
    assert proc.returncode == 130, stderr
    assert f"job {job} is still running" in stderr
    status = st(laptop, ["status", "--cluster", "testbed", job]).stdout
    assert "state=RUNNING" in status
    cancel = st(laptop, ["cancel", "--cluster", "testbed", job])
    assert cancel.returncode == 0 and f"job {job} cancelled (it was running)" in cancel.stderr


@pytest.mark.timeout(240)
def test_a_distributor_on_the_laptop_gets_rank_0s_answer_and_a_ranks_error(cluster, has_torch, tmp_path):
    laptop = cluster
    code = textwrap.dedent('''
        from slurmtorch import Distributor
        def world(lr):
            import torch.distributed as dist
            return [dist.get_rank(), dist.get_world_size(), lr]
        def boom():
            raise ValueError("bad lr")
        print("answer", Distributor(num_processes=2, nodes=2, cluster="testbed", progress=False).run(world, 0.5))
        try:
            Distributor(num_processes=1, progress=False, cluster="testbed").run(boom)
        except Exception as e:
            print("raised", type(e).__name__, "ValueError: bad lr" in str(e))
    ''')
    done = laptop.run(["python", "-c", code], cwd=tmp_path, timeout=200)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["answer [0, 2, 0.5]", "raised RemoteError True"]


@pytest.mark.timeout(240)
def test_alloc_over_ssh_opens_its_shell_in_the_synced_code_and_exit_ends_the_allocation(cluster, project, has_torch):
    root, out = project
    laptop = cluster
    term = Terminal([str(TESTBED), "laptop", "slurmtorch", "alloc", "--cluster", "testbed", "--nodes", "2",
                     "--time", "10"], dict(laptop.env, TERM="dumb"), str(root))
    try:
        term.command(f"slurmtorch run train.py {out} once; echo run-ended rc=$?")
        assert term.expect(r"run-ended rc=(\d+)", 180).group(1) == "0", term.before
        term.command("exit 3")
        assert term.exit_code(60) == 3
    except BaseException:
        term.close()
        raise
    lines = starts(out)  # a rank on each node, running the synced copy in the mirror (in place, as alloc runs)
    assert len(lines) == 2 and {(v, p.startswith(str(laptop.workdir / "sync"))) for _, v, p in lines} == {("v1", True)}
    assert laptop.run(["ssh", laptop.login_host, "squeue", "-h"]).stdout == ""  # the allocation is gone


def test_the_laptop_reaches_the_clusters_sites_and_doctor(cluster):
    sites = st(cluster, ["site", "show", "testbed", "--cluster", "testbed"])
    assert sites.returncode == 0 and "partitions:" in sites.stdout, sites.stderr
    doctor = st(cluster, ["doctor", "--cluster", "testbed"], timeout=180)  # the cluster's site, checked there
    assert doctor.stdout.startswith("slurmtorch doctor: site 'testbed' ("), doctor.stdout + doctor.stderr
    assert "node login:" in doctor.stdout and "Traceback" not in doctor.stderr


def test_sshd_stopped_is_one_line_with_the_fix(cluster):
    cluster.login("stop")
    done = st(cluster, ["status", "--cluster", "testbed"])
    assert done.returncode == 2
    assert done.stderr.splitlines()[0].startswith("error: cluster testbed (login, ")
    assert "nothing answers ssh there (connection refused)" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_refused_key_is_one_line_with_the_fix(laptop):
    write_clusters(laptop, host="login-refused", python=laptop.python)
    done = st(laptop, ["status", "--cluster", "testbed"])
    assert done.returncode == 2
    assert "refused the login" in done.stderr and "Permission denied (publickey)" in done.stderr
    assert "tip: check the key or user in ~/.ssh/config" in done.stderr


def test_another_slurmtorch_version_on_the_cluster_is_named_with_the_fix(laptop, tmp_path):
    fake = tmp_path / "old" / "slurmtorch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("__version__ = '0.0.1'\n")
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={fake.parent} exec {laptop.python} \"$@\"\n")
    python.chmod(0o755)
    write_clusters(laptop, python=str(python))
    done = st(laptop, ["status", "--cluster", "testbed"])
    assert done.returncode == 69
    assert "error: slurmtorch 0.0.1 on cluster testbed" in done.stderr
    assert "both sides must run the same version" in done.stderr and "pip install slurmtorch==" in done.stderr


def test_no_slurmtorch_on_the_cluster_is_one_line_with_the_fix(laptop):
    write_clusters(laptop, venv="/nonexistent/venv")
    done = st(laptop, ["status", "--cluster", "testbed"])
    assert done.returncode == 69
    assert done.stderr.startswith("error: no /nonexistent/venv/bin/python on cluster testbed\ntip: set venv:")


def test_the_laptop_has_no_slurm_so_every_scheduler_call_crossed_ssh(laptop):
    done = laptop.run(["sh", "-c", "command -v sbatch squeue scontrol || echo none; ls /etc/slurm | wc -l"])
    assert done.stdout.split() == ["none", "0"]
    assert "SLURM_CONF=" not in laptop.run(["env"]).stdout
