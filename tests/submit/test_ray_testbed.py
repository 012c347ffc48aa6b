"""`--ray` on the real testbed: a 2-node Ray cluster in the allocation, the head on the
fabric (ib0, 198.18.0.128/25; the node names resolve to eth0, the management network), the
script its driver; a Ray worker killed ends the job naming its node; nothing of Ray outlives
the job on any node; the same in the charliecloud image (scripts/image installs its Ray). Ray
(CPU) is a test-only dependency (scripts/setup --tests)."""

from __future__ import annotations

import glob
import ipaddress
import json
import os
import re
import signal
from pathlib import Path

import pytest

from conftest import need
from helpers import read, st, wait_for
from test_containers import charliecloud_image, charliecloud_site  # noqa: F401 (a fixture)

FABRIC = ipaddress.ip_network("198.18.0.128/25")  # ib0 on every testbed node (docs/test-ground.md)

CLUSTER = '''\
"""Prints what the Ray driver sees: the cluster's resources and its nodes' addresses."""
import json, os, sys, time
import ray
ray.init()
nodes = [n for n in ray.nodes() if n["Alive"]]
print(json.dumps({"resources": ray.cluster_resources(), "addresses": [n["NodeManagerAddress"] for n in nodes],
                  "hosts": [n["NodeManagerHostname"] for n in nodes], "address": os.environ["RAY_ADDRESS"]}),
      flush=True)
if len(sys.argv) > 1:  # the test kills a worker's raylet now; the job must end without this script
    open(sys.argv[1], "w").close()
    time.sleep(300)
'''


@pytest.fixture(scope="module")
def has_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        need(False, "ray is not installed (scripts/setup --tests)")


def ray_processes(job: str | None = None) -> dict[int, str]:
    """Ray's processes on this machine (every testbed node's), pid -> command line; only those
    of `job`'s Ray folders where given (Ray's workers rename themselves `ray::...`)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = read_bytes(f"/proc/{pid}/comm").strip()
            cmdline = read_bytes(f"/proc/{pid}/cmdline").replace("\0", " ")
        except OSError:
            continue
        if comm in ("raylet", "gcs_server") or comm.startswith("ray::") or "ray/dashboard" in cmdline:
            if job is None or f"slurmtorch-ray-{job}-" in cmdline:
                found[int(pid)] = cmdline
    return found


def read_bytes(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode(errors="replace")


def job_nodes(testbed, job: str) -> list[str]:
    nodes = testbed.run(["squeue", "-h", "-j", job, "-o", "%N"]).stdout.strip()
    return testbed.run(["scontrol", "show", "hostnames", nodes]).stdout.split()


def ray_job(testbed, tmp_path, script: str, *opts: str) -> tuple[str, dict]:
    """A --ray job of `script` (as driver.py) that ends with 0: its id and what its driver printed."""
    (tmp_path / "driver.py").write_text(script)
    sub = st(testbed, tmp_path / "home", ["sbatch", "--site", "testbed", "-t", "5", "--ray", *opts, "--parsable",
                                          "driver.py"], cwd=str(tmp_path), timeout=60)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.split()[0]
    folder = tmp_path / "home" / "jobs" / job
    try:
        wait_for(lambda: (folder / "exit-code").exists(), "the job to end", 150)
    finally:
        testbed.run(["scancel", job])
    assert read(folder / "exit-code").strip() == "0", read(folder / "batch.out") + read(folder / "rank-0.err")
    return job, json.loads(read(folder / "rank-0.out"))


@pytest.mark.slurm_versions  # srun --overlap steps beside each other, and their signals, by Slurm's version
@pytest.mark.timeout(180)
def test_a_ray_job_on_two_nodes_sees_both_nodes_cpus_on_the_fabric_and_leaves_no_process(testbed, has_ray, tmp_path):
    home = tmp_path / "home"
    job, seen = ray_job(testbed, tmp_path, CLUSTER, "-N", "2")
    assert seen["resources"]["CPU"] == 4.0  # 2 per node (scripts/testbed), both nodes'
    addresses = [ipaddress.ip_address(a) for a in seen["addresses"]]
    assert len(set(addresses)) == 2 and all(a in FABRIC for a in addresses), seen
    head, _, port = seen["address"].rpartition(":")
    assert ipaddress.ip_address(head) in addresses and port.isdigit()
    wait_for(lambda: st(testbed, home, ["status", job]).stdout.startswith(f"job={job} state=COMPLETED exit_code=0 "),
             "the job to be COMPLETED", 30)
    assert ray_processes(job) == {}  # the job ended: every node's Ray was stopped before
    assert not [p for p in os.listdir("/tmp") if p.startswith(f"slurmtorch-ray-{job}-")]


ROLES = '''\
"""Places one task on a node of each role (raynode's role:ROLE resources) and prints where it ran."""
import json, socket
import ray
ray.init()
where = ray.remote(lambda: socket.gethostname())
print(json.dumps({"resources": ray.cluster_resources(),
                  "ran_on": {role: ray.get(where.options(resources={f"role:{role}": 0.5}).remote())
                             for role in ("master", "worker")}}), flush=True)
'''


@pytest.mark.slurm_versions
@pytest.mark.timeout(180)
def test_a_ray_job_over_two_node_types_places_work_on_each_roles_nodes(testbed, has_ray, tmp_path):
    """Issue 38: `--ray` with a role per node type (a heterogeneous job: the head on the
    master's `debug` node, the workers on `fat`), each Ray node with its role's resource."""
    job, seen = ray_job(testbed, tmp_path, ROLES, "--role", "master=1", "--role", "worker=2:partition=fat")
    assert seen["resources"]["CPU"] == 6.0 and seen["resources"]["role:worker"] == 2.0, seen
    assert seen["resources"]["role:master"] == 1.0, seen
    assert seen["ran_on"]["worker"] in ("node3", "node4") and seen["ran_on"]["master"] not in ("node3", "node4"), seen
    wait_for(lambda: not ray_processes(job), "no Ray process of the job left", 30)


@pytest.mark.timeout(300)
def test_a_killed_ray_worker_ends_the_job_naming_its_node(testbed, has_ray, tmp_path):
    (tmp_path / "cluster.py").write_text(CLUSTER)
    home, ready = tmp_path / "home", tmp_path / "ready"
    # The cluster's time to form: on a loaded machine (CI's) a worker may need a second start
    # (raynode.STARTS), and 60 s ran out once. The job's end after the kill is bound apart.
    hang, ends_within = 150, 60
    sub = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "2", "-t", "5", "--ray", "--hang-timeout",
                             str(hang), "--parsable", "cluster.py", str(ready)], cwd=str(tmp_path), timeout=60)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.split()[0]
    folder = home / "jobs" / job
    try:
        wait_for(lambda: ready.exists() or (folder / "exit-code").exists(), "the driver to see the cluster", hang + 30)
        assert ready.exists(), read(folder / "batch.out") + read(folder / "rank-0.err")
        worker = job_nodes(testbed, job)[1]
        (raylet,) = [pid for pid, cmd in ray_processes(job).items()
                     if cmd.split()[0].endswith("/raylet") and f"slurmtorch-ray-{job}-{worker}/" in cmd]
        os.kill(raylet, signal.SIGKILL)
        wait_for(lambda: (folder / "exit-code").exists(), f"the job to end within {ends_within} s of the kill",
                 ends_within)
    finally:
        testbed.run(["scancel", job])
    batch = read(folder / "batch.out")
    assert read(folder / "exit-code").strip() == "1", batch
    assert f"slurmtorch: error: Ray worker on {worker} died: its raylet ended" in batch, batch
    # What the user is told is the Ray node's death, not its step's exit as a rank's.
    status = st(testbed, home, ["status", job], timeout=60)
    assert f"failed: Ray worker on {worker} died: its raylet ended" in status.stdout + status.stderr, status
    assert "rank 0" not in status.stdout + status.stderr, status
    wait_for(lambda: not ray_processes(job), "no Ray process of the job left", 30)


@pytest.mark.timeout(180)
def test_a_ray_job_whose_nodes_have_no_ray_says_so(testbed, tmp_path):
    """Issue 44: it said `rank 0 ... exited without reporting a cause`, the cause only in
    ray-NODE.out. The nodes' python here is the site's `python:`, one with slurmtorch and no Ray
    (the checkout's .venv-lint, scripts/setup's): the testbed's own .venv, which has Ray, is left
    as every other test finds it."""
    python = Path(__file__).resolve().parents[2] / ".venv-lint" / "bin" / "python"
    need(python.exists(), "no .venv-lint (scripts/setup)")
    site = tmp_path / "no-ray.yaml"
    site.write_text(json.dumps({"extends": "testbed", "python": str(python)}))
    (tmp_path / "driver.py").write_text(CLUSTER)
    home = tmp_path / "home"
    proc = st(testbed, home, ["sbatch", "--site", str(site), "-N", "1", "-t", "5", "--ray", "--wait", "driver.py"],
              cwd=str(tmp_path), timeout=150)
    assert proc.returncode != 0, proc.stderr
    job = proc.stdout.split()[0]
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("slurmtorch: failed: ")]
    assert said and re.fullmatch(rf"slurmtorch: failed: Ray head on node\d did not start: its python \({re.escape(str(python))}\) "
                                 r"has no ray \(No module named 'ray'\)", said[0]), proc.stderr
    status = st(testbed, home, ["status", job], timeout=60)
    assert status.stdout.splitlines()[1] == said[0].removeprefix("slurmtorch: "), status.stdout


def ray_start_running(job: str, node: str) -> bool:
    """Whether `node`'s `ray start` for `job` (raynode's child) still runs."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = read_bytes(f"/proc/{pid}/cmdline").split("\0")
        except OSError:
            continue
        if "start" in cmdline and f"--temp-dir=/tmp/slurmtorch-ray-{job}-{node}" in cmdline:
            return True
    return False


def raylet_of(job: str, node: str) -> list[int]:
    return [pid for pid, cmd in ray_processes(job).items()
            if cmd.split()[0].endswith("/raylet") and f"slurmtorch-ray-{job}-{node}/" in cmd]


@pytest.mark.timeout(300)
def test_a_ray_worker_whose_raylet_dies_starting_is_started_again_and_one_registering_late_joins(
        testbed, has_ray, tmp_path):
    """Issue 44, a loaded node: Ray's raylet ends when its agents take over 15 s to start, and
    `ray start` gives up on a node not registered after 30 s (both Ray's, fixed), while the
    job's --hang-timeout is longer. Here the worker's first raylet is killed as it starts (its
    end on a loaded node), and the second held (SIGSTOP) until its `ray start` has given up,
    then let go: the worker is started again, its late node joins, and the job runs."""
    (tmp_path / "driver.py").write_text(CLUSTER)
    home = tmp_path / "home"
    sub = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "2", "-t", "5", "--ray", "--hang-timeout", "200",
                             "--parsable", "driver.py"], cwd=str(tmp_path), timeout=60)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.split()[0]
    folder = home / "jobs" / job
    try:
        (_, worker) = wait_for(lambda: job_nodes(testbed, job), "the job to start", 120)
        # Killed once it has logged (as Ray's raylet ends itself, 15 s on), before it can register
        # (its agents must have started first): raynode sees that it ended while `ray start` waits.
        raylet_log = f"/tmp/slurmtorch-ray-{job}-{worker}/session_*/logs/raylet.out"
        # 0.02 s: a process is to be caught in its first second (wait_for's default 0.2 s is too slow).
        (first_raylet,) = wait_for(lambda: any(os.path.getsize(p) for p in glob.glob(raylet_log)) and raylet_of(job, worker),
                                   f"{worker}'s raylet to log", 120, poll_s=0.02)
        os.kill(first_raylet, signal.SIGKILL)
        second = wait_for(lambda: [p for p in raylet_of(job, worker) if p != first_raylet]
                          or (folder / "exit-code").exists(), "a second raylet, or the job's end", 120, poll_s=0.02)
        assert second is not True, read(folder / "batch.out")  # the job ended: its worker was not started again
        (raylet,) = second
        os.kill(raylet, signal.SIGSTOP)
        try:
            wait_for(lambda: not ray_start_running(job, worker), f"{worker}'s ray start to give up", 120)
        finally:
            os.kill(raylet, signal.SIGCONT)
        wait_for(lambda: (folder / "exit-code").exists(), "the job to end", 200)
    finally:
        testbed.run(["scancel", job])
    batch = read(folder / "batch.out")
    logs = batch + read(folder / "rank-0.err") + read(folder / f"ray-{worker}.out")[-3000:]
    assert read(folder / "exit-code").strip() == "0", logs
    # Its last line: Ray tells the driver of the first raylet's end before it.
    assert json.loads(read(folder / "rank-0.out").splitlines()[-1])["resources"]["CPU"] == 4.0, logs
    assert f"Ray worker on {worker}: its raylet ended before its agents had started" in batch, batch
    assert "starting it again, try 2 of 3" in batch, batch
    assert f"Ray worker on {worker} up at " in batch and "registers late" in batch, batch
    wait_for(lambda: not ray_processes(job), "no Ray process of the job left", 30)


def ray_cpus_and_address():
    """A Distributor's function as the driver of a --ray job."""
    import os

    import ray

    ray.init()
    return ray.cluster_resources()["CPU"], os.environ["RAY_ADDRESS"]


@pytest.mark.timeout(180)
def test_a_distributor_with_ray_runs_the_function_once_as_the_driver(testbed, has_ray, tmp_path, monkeypatch):
    from slurmtorch import Distributor

    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SLURM_CONF", testbed.env["SLURM_CONF"])
    monkeypatch.setenv("PATH", testbed.env["PATH"])
    cpus, address = Distributor(num_processes=2, nodes=2, site="testbed", ray=True, time="5",
                                progress=False).run(ray_cpus_and_address)
    assert cpus == 4.0 and ipaddress.ip_address(address.rpartition(":")[0]) in FABRIC


# ------------------------------------------------------------------ in a container

IN_IMAGE = '''\
"""What the Ray driver sees from the image: the cluster, and whose python and Ray it is."""
import json, os, sys, time
import ray
ray.init()
nodes = [n for n in ray.nodes() if n["Alive"]]
marker = "/etc/slurmtorch-image"
print(json.dumps({"resources": ray.cluster_resources(), "addresses": [n["NodeManagerAddress"] for n in nodes],
                  "python": sys.executable, "ray": ray.__file__,
                  "image": open(marker).read() if os.path.exists(marker) else None}), flush=True)
open(sys.argv[1], "w").close()  # the test looks at the nodes' Ray processes now, then lets the job end
while not os.path.exists(sys.argv[2]):
    time.sleep(0.1)
'''


def job_ray_processes(job: str) -> dict[int, str]:
    """Ray's processes of `job` on this machine (every testbed node's), by the job id in their
    environment: Ray's agents rename themselves (`ray::RuntimeEnvAgent`) and drop its folder."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = read_bytes(f"/proc/{pid}/environ").split("\0")
            cmdline = read_bytes(f"/proc/{pid}/cmdline").replace("\0", " ")
        except OSError:
            continue
        if f"SLURM_JOB_ID={job}" in environ and ("ray" in cmdline or "raylet" in cmdline or "gcs_server" in cmdline):
            found[int(pid)] = cmdline
    return found


@pytest.mark.timeout(1200)  # the image may be built first (scripts/image)
def test_a_ray_job_in_the_charliecloud_image_sees_both_nodes_cpus_and_leaves_no_process(
        testbed, charliecloud_image, tmp_path):  # noqa: F811 (test_containers' fixture)
    """Every Ray step (head, worker, driver, stop) runs raynode with the image's python and Ray
    under ch-run, as a rank would: the Ray in the image (scripts/image), not the host's."""
    site, _ = charliecloud_site(tmp_path, charliecloud_image)
    (tmp_path / "cluster.py").write_text(IN_IMAGE)
    home, ready, go = tmp_path / "home", tmp_path / "ready", tmp_path / "go"
    sub = st(testbed, home, ["sbatch", "--site", str(site), "-N", "2", "-t", "5", "--ray", "--parsable",
                             "cluster.py", str(ready), str(go)], cwd=str(tmp_path), timeout=60)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.split()[0]
    folder = home / "jobs" / job
    try:
        wait_for(lambda: ready.exists() or (folder / "exit-code").exists(), "the driver to see the cluster", 240)
        running = job_ray_processes(job)  # what must be gone after the job: both nodes' raylets among them
        go.touch()
        wait_for(lambda: (folder / "exit-code").exists(), "the job to end", 120)
    finally:
        testbed.run(["scancel", job])
    logs = read(folder / "batch.out") + read(folder / "rank-0.err") + "".join(
        read(p)[-3000:] for p in sorted(folder.glob("ray-*.out")))
    assert read(folder / "exit-code").strip() == "0", logs
    assert len([cmd for cmd in running.values() if cmd.split()[0].endswith("/raylet")]) == 2, running
    seen = json.loads(read(folder / "rank-0.out"))
    assert seen["resources"]["CPU"] == 4.0, seen  # 2 per node (scripts/testbed), both nodes'
    assert all(ipaddress.ip_address(a) in FABRIC for a in seen["addresses"]) and len(set(seen["addresses"])) == 2
    assert seen["python"] == "/usr/bin/python3" and seen["image"].startswith("slurmtorch test image"), seen
    assert seen["ray"].startswith("/usr/local/lib/ray/ray-2.60.0/"), seen
    assert re.search(r"Ray head on node\d+ up at 198\.18\.0\.1\d\d:\d+; no dashboard", read(folder / "batch.out")), logs
    wait_for(lambda: st(testbed, home, ["status", job]).stdout.startswith(f"job={job} state=COMPLETED exit_code=0 "),
             "the job to be COMPLETED", 30)
    assert job_ray_processes(job) == {}  # the job ended: every node's Ray was stopped before
    assert not [p for p in os.listdir("/tmp") if p.startswith(f"slurmtorch-ray-{job}-")]
