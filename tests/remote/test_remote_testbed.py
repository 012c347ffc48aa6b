"""`--cluster` from the testbed's laptop (no Slurm command, no Slurm or munge configuration)
to its login host (a real sshd, key login, host key pinned): the code synced with rsync and
the job running what was submitted, whatever the laptop edits later, through a requeue too;
--wait, Ctrl-C, logs, status and cancel over one connection; a Distributor's call and its
error coming back; and each failure of the connection or of the cluster side in one line."""

from __future__ import annotations

import json
import os
import re
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
if mode == "linger":
    time.sleep(20)
if mode == "requeue" and n == 0:
    time.sleep(600)  # the test requeues the job now
if mode == "raise":
    raise ValueError("bad step")
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
    assert f"job {job} is still running; slurmtorch cancel {job} --cluster testbed stops it" in stderr  # as typed here
    status = st(laptop, ["status", "--cluster", "testbed", job]).stdout
    assert "state=RUNNING" in status
    cancel = st(laptop, ["cancel", "--cluster", "testbed", job])
    assert cancel.returncode == 0 and f"job {job} cancelled (it was running)" in cancel.stderr


@pytest.mark.timeout(300)
def test_a_failed_job_over_ssh_ends_with_the_report_and_its_command_as_typed_on_the_laptop(cluster, project, has_torch):
    """Issue 36: the report's command names `--cluster`, and it shows the rank's whole log."""
    root, out = project
    laptop = cluster
    proc = st(laptop, ["sbatch", "--cluster", "testbed", "-N", "1", "-t", "5", "--wait", "train.py", str(out), "raise"],
              cwd=root, timeout=200)
    assert proc.returncode == 1, proc.stderr
    job = proc.stdout.split()[0]
    lines = proc.stderr.splitlines()
    # Where it raised: the laptop's own file, which the user's editor opens (not the cluster's copy).
    assert any(re.fullmatch(rf"slurmtorch: failed: rank 0 on node\d: ValueError: bad step \(at {re.escape(str(root))}/"
                            r"train\.py:\d+, exit 1\)", ln) for ln in lines), proc.stderr
    assert lines[-1] == f"slurmtorch: rank 0's whole log: slurmtorch logs {job} --rank 0 --cluster testbed", proc.stderr
    whole = st(laptop, ["logs", job, "--rank", "0", "--cluster", "testbed"])
    assert 'raise ValueError("bad step")' in whole.stderr, whole.stderr


@pytest.mark.timeout(300)
def test_a_connection_lost_while_waiting_says_the_job_goes_on_and_how_to_follow_it_again(cluster, project, has_torch):
    """sshd gone while `--wait` followed the job: exit 255 and nothing said, while the job ran
    on to COMPLETED. Now one line says so, the job is named with the command that follows it
    again, and the exit code is ssh's own (255), documented."""
    root, out = project
    laptop = cluster
    proc = subprocess.Popen([str(TESTBED), "laptop", "slurmtorch", "sbatch", "--cluster", "testbed",
                             "-N", "1", "--wait", "train.py", str(out), "linger"],
                            cwd=root, env=laptop.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: "version v1\n" in lines, "rank 0's output on the laptop", 120)
        laptop.login("stop")
        proc.wait(timeout=60)
        stderr = proc.stderr.read()
    finally:
        proc.kill()
        laptop.login("start")
    reader.join(10)
    job = "".join(lines).split()[0]
    assert proc.returncode == 255, stderr
    assert f"error: lost the connection to cluster testbed; job {job} goes on there" in stderr
    assert f"tip: slurmtorch logs {job} --follow --cluster testbed follows it again" in stderr
    assert "Traceback" not in stderr
    folder = job_folder(laptop, job)
    wait_for(lambda: (folder / "exit-code").exists(), "the job to end", 120)
    assert read(folder / "exit-code").strip() == "0", read(folder / "batch.out")


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
            print("log", str(e).splitlines()[-1].endswith(" --rank 0 --cluster testbed"))
    ''')
    done = laptop.run(["python", "-c", code], cwd=tmp_path, timeout=200)
    assert done.returncode == 0, done.stderr
    # the report's command for the rank's whole log is the one typed on the laptop (issue 36)
    assert done.stdout.splitlines() == ["answer [0, 2, 0.5]", "raised RemoteError True", "log True"], done.stdout


@pytest.mark.timeout(300)
def test_a_laptop_submits_without_waiting_and_a_new_python_attaches_by_id(cluster, has_torch, tmp_path):
    """Issue 38: the laptop's Python may end while its job runs; a new one finds it by id.
    Issue 44: with answer="json" on both, the answer comes as JSON and the laptop unpickles
    nothing (cloudpickle's loaders fail here if called)."""
    laptop = cluster
    first = textwrap.dedent('''
        from slurmtorch import Distributor
        def world(lr):
            import torch.distributed as dist
            print("rank", dist.get_rank())
            return [dist.get_world_size(), lr]
        job = Distributor(num_processes=2, nodes=2, cluster="testbed", progress=False, answer="json").submit(world, 0.5)
        print(type(job).__name__, job.job_id)
    ''')
    done = laptop.run(["python", "-c", first], cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    kind, job_id = done.stdout.split()
    assert kind == "ClusterJob"
    second = textwrap.dedent(f'''
        import cloudpickle, pickle
        def refuse(*args, **kwargs):
            raise AssertionError("unpickled on the laptop")
        cloudpickle.loads = cloudpickle.load = pickle.loads = pickle.load = refuse
        from slurmtorch import Job
        job = Job.attach({job_id!r}, cluster="testbed", answer="json")
        print("answer", job.result(timeout=180, stream=False))
        print("state", job.state())
        print("logs", job.logs(1, "out").strip())
    ''')
    done = laptop.run(["python", "-c", second], cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["answer [2, 0.5]", "state COMPLETED", "logs rank 1"], done.stdout


def run_once_in_alloc_over_ssh(laptop, root: Path, out: Path, leave: str) -> int:
    """`alloc --cluster testbed` from `root`, `run train.py OUT once` in its shell (it must exit 0),
    then `leave` (e.g. `exit 3`); the shell's exit code."""
    term = Terminal([str(TESTBED), "laptop", "slurmtorch", "alloc", "--cluster", "testbed", "--nodes", "2",
                     "--time", "10"], dict(laptop.env, TERM="dumb"), str(root))
    try:
        term.command(f"slurmtorch run train.py {out} once; echo run-ended rc=$?")
        assert term.expect(r"run-ended rc=(\d+)", 180).group(1) == "0", term.before
        term.command(leave)
        return term.exit_code(60)
    except BaseException:
        term.close()
        raise


@pytest.mark.timeout(240)
def test_alloc_over_ssh_opens_its_shell_in_the_synced_code_and_exit_ends_the_allocation(cluster, project, has_torch):
    root, out = project
    laptop = cluster
    assert run_once_in_alloc_over_ssh(laptop, root, out, "exit 3") == 3
    lines = starts(out)  # a rank on each node, running the synced copy in the mirror (in place, as alloc runs)
    assert len(lines) == 2 and {(v, p.startswith(str(laptop.workdir / "sync"))) for _, v, p in lines} == {("v1", True)}
    assert laptop.run(["ssh", laptop.login_host, "squeue", "-h"]).stdout == ""  # the allocation is gone


@pytest.mark.timeout(240)
def test_alloc_over_ssh_from_a_folder_outside_git_sends_its_code_and_run_finds_the_script(cluster, tmp_path,
                                                                                           has_torch):
    """Issue 36: outside git, alloc --cluster sent nothing and said nothing, and `run train.py`
    failed in the shell with "SCRIPT does not exist"."""
    root, out = tmp_path / "plain", tmp_path / "out"
    write_tree(root, "p1")
    out.mkdir()
    out.chmod(0o777)
    laptop = cluster
    assert run_once_in_alloc_over_ssh(laptop, root, out, "exit") == 0
    lines = starts(out)
    assert len(lines) == 2 and {(v, p.startswith(str(laptop.workdir / "sync"))) for _, v, p in lines} == {("p1", True)}


WRITES = """\
import os
os.makedirs("outputs", exist_ok=True)
with open("outputs/result.txt", "w") as f:
    f.write("accuracy 0.9\\n")
with open("ckpt.pt", "w") as f:
    f.write("weights\\n")
with open("helper.py", "w") as f:  # a code file rewritten on the cluster: the laptop's own copy wins
    f.write("VERSION = 'changed on the cluster'\\n")
print("wrote", os.getcwd(), flush=True)
"""


@pytest.mark.timeout(300)
def test_pull_brings_what_the_job_wrote_back_into_the_laptop_folder_but_never_the_code(cluster, project, tmp_path,
                                                                                        has_torch):
    """Issue 36: from a laptop, a job's outputs come back over the same connection."""
    root, _ = project
    (root / "writes.py").write_text(WRITES)
    git(root, "add", "writes.py")
    git(root, "commit", "-qm", "writes")
    laptop = cluster
    sub = st(laptop, ["sbatch", "--cluster", "testbed", "-N", "1", "-t", "5", "--wait", "writes.py"], cwd=root,
             timeout=200)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.split()[0]
    assert not (root / "outputs").exists()  # written on the cluster, in the mirror's copy of this folder
    pulled = st(laptop, ["pull", job, "--cluster", "testbed"], cwd=tmp_path, timeout=120)  # from anywhere
    assert pulled.returncode == 0, pulled.stderr
    assert (root / "outputs" / "result.txt").read_text() == "accuracy 0.9\n"  # into the folder it came from
    assert (root / "ckpt.pt").read_text() == "weights\n"
    assert (root / "helper.py").read_text() == "VERSION = 'v1'\n"  # the code: never pulled over the laptop's
    assert pulled.stderr.strip().startswith("slurmtorch: pulled 2 files of job"), pulled.stderr
    again = st(laptop, ["pull", job, "--cluster", "testbed"], cwd=root, timeout=120)  # only what changed
    assert again.returncode == 0 and "pulled 0 files" in again.stderr, again.stderr
    elsewhere = tmp_path / "here"
    some = st(laptop, ["pull", job, "outputs", "--to", str(elsewhere), "--cluster", "testbed"], cwd=root, timeout=120)
    assert some.returncode == 0, some.stderr
    assert sorted(p.relative_to(elsewhere).as_posix() for p in elsewhere.rglob("*")) == ["outputs",
                                                                                           "outputs/result.txt"]
    outside = st(laptop, ["pull", job, "../..", "--cluster", "testbed"], cwd=root, timeout=60)
    assert outside.returncode != 0 and outside.stderr.startswith("error: PATH '../..' is not inside"), outside.stderr
    here = st(laptop, ["pull", job], cwd=root, timeout=60)  # not from a cluster: one line, the fix
    assert here.returncode != 0 and "give --cluster NAME" in here.stderr, here.stderr


def test_the_laptop_reaches_the_clusters_sites_and_doctor(cluster):
    sites = st(cluster, ["site", "show", "testbed", "--cluster", "testbed"])
    assert sites.returncode == 0 and "partitions:" in sites.stdout, sites.stderr
    doctor = st(cluster, ["doctor", "--cluster", "testbed"], timeout=180)  # the cluster's site, checked there
    assert doctor.stdout.startswith("slurmtorch doctor: site 'testbed' ("), doctor.stdout + doctor.stderr
    assert "node login:" in doctor.stdout and "Traceback" not in doctor.stderr
    # Issue 36: the login host has no ib0 (a compute node's): no failure of the site's for it.
    assert "login is a login node" in doctor.stdout and doctor.returncode == 0, doctor.stdout


def test_site_init_over_ssh_writes_the_clusters_site_from_its_login_host(cluster):
    """`site init --cluster`: the cluster's login host asks its Slurm; the site comes back on stdout."""
    r = st(cluster, ["site", "init", "--cluster", "testbed"], timeout=120)
    assert r.returncode == 0, r.stderr
    # node3 and node4 have one feature more (fat, their own partition too): a node type of their own.
    assert "  # node[1-2]: 2 nodes;" in r.stdout and "  # node[3-4]: 2 nodes;" in r.stdout, r.stdout
    assert "\nsrun_mpi: pmix\n" in r.stdout, r.stdout
    assert "site file above: site 'site', 2 partitions, 2 node types;" in r.stderr, r.stderr


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


@pytest.mark.timeout(300)
def test_a_workdir_another_user_made_first_gets_no_file_of_the_laptops(cluster, project, tmp_path):
    """Check first, send after (issue 34): was, the code rsynced into it (every name and size
    theirs to see), then the cluster's sbatch refused the workdir."""
    root, out = project
    laptop = cluster
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, -1)  # nobody: another user made the shared workdir first
    write_clusters(laptop, python=laptop.python, workdir=str(theirs))
    sub = st(laptop, ["sbatch", "--cluster", "testbed", "-N", "1", "-t", "5", "train.py", str(out), "once"], cwd=root)
    assert sub.returncode == 1 and sub.stdout == "", sub.stderr
    assert sub.stderr.startswith(f"error: {theirs} (SLURMTORCH_HOME) belongs to nobody (uid 65534), not to you")
    assert "code synced" not in sub.stderr and "Traceback" not in sub.stderr
    assert list(theirs.iterdir()) == []
    assert laptop.run(["ssh", laptop.login_host, "squeue", "-h"]).stdout == ""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("absolute", [False, True])
def test_a_script_named_through_a_linked_folder_runs_its_copy_and_nothing_is_written_outside(cluster, tmp_path,
                                                                                            has_torch, absolute):
    """`sbatch --cluster testbed ld/s.py`, ld -> d (issue 34): was, the cluster's copy wrote
    through the link it had just made, outside the job folder, and the file stayed."""
    laptop = cluster
    root, out = tmp_path / "proj", tmp_path / "out"
    (root / "d").mkdir(parents=True)
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    (root / "d" / "s.py").write_text("import sys\nfrom pathlib import Path\n"
                                     "(Path(sys.argv[1]) / 'ran').write_text(__file__)\n")
    os.symlink(root / "d" if absolute else "d", root / "ld")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "v1")
    sub = st(laptop, ["sbatch", "--cluster", "testbed", "-N", "1", "-t", "5", "--timeout", "60", "ld/s.py", str(out)],
             cwd=root, timeout=120)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.split()[0]
    folder = job_folder(laptop, job)
    wait_for(lambda: (folder / "exit-code").exists(), "the job to end", 180)
    assert read(folder / "exit-code").strip() == "0", read(folder / "batch.out") + read(folder / "rank-0.err")
    assert read(out / "ran") == str(folder / "code" / "d" / "s.py")
    assert os.readlink(folder / "code" / "ld") == (str(root / "d") if absolute else "d")
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".git" not in p.parts) == ["d", "d/s.py", "ld"]
    mirror = Path(sub.stderr.split("code synced to testbed:")[1].split(" ")[0])
    assert sorted(str(p.relative_to(mirror)) for p in mirror.rglob("*")) == ["d", "d/s.py"]


@pytest.mark.timeout(300)
def test_a_secret_the_trees_gitignore_ignores_in_a_nested_clone_never_reaches_the_cluster(cluster, project, tmp_path,
                                                                                         has_torch):
    """Was (issue 34): vendor/lib, an untracked clone, listed its own secret.txt, synced and read by a rank."""
    root, out = project
    laptop = cluster
    lib = tmp_path / "lib"
    write_tree(lib, "lib")
    (lib / "secret.txt").write_text("TOKEN\n")
    git(lib, "init", "-q")
    git(lib, "add", "-A")
    git(lib, "commit", "-qm", "lib")
    git(root, "clone", "-q", str(lib), "vendor/lib")
    (root / ".gitignore").write_text("vendor/lib/secret.txt\n")
    (root / "peek.py").write_text("import sys, os\nfrom pathlib import Path\n"
                                  "(Path(sys.argv[1]) / 'peek').write_text(str(os.path.exists('vendor/lib/secret.txt')))\n")
    sub = st(laptop, ["sbatch", "--cluster", "testbed", "-N", "1", "-t", "5", "--timeout", "60", "peek.py", str(out)],
             cwd=root, timeout=120)
    assert sub.returncode == 0, sub.stderr
    assert ("slurmtorch: snapshot: vendor/lib is a git repository of its own (clone): taken as its own .gitignore "
            "and the tree's say; 1 file they ignore left out") in sub.stderr
    folder = job_folder(laptop, sub.stdout.split()[0])
    wait_for(lambda: (folder / "exit-code").exists(), "the job to end", 180)
    assert read(out / "peek") == "False"
    mirror = Path(sub.stderr.split("code synced to testbed:")[1].split(" ")[0])
    assert not (mirror / "vendor" / "lib" / "secret.txt").exists() and (mirror / "vendor" / "lib" / "helper.py").exists()
