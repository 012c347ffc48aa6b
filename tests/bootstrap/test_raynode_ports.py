"""Two Ray heads of raynode's at once on one node, as two `--ray` jobs sharing a node start
them (or one beside a user's own Ray): each on ports of its own. Real Ray, real `ray start`,
in a network namespace made for the test (`unshare --net`, loopback alone), so that nothing
else on this host meets them and they bind nowhere but 127.0.0.1.

Red before raynode picked Ray's ports: every Ray on a node took the same fixed ones (the
workers' 10002-19999; with ray[default] the dashboard's 8265, which the second head could not
bind, and the client server's 10001, on which both listened)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import need
from helpers import read, wait_for

from slurmtorch.bootstrap import raysession

# Ray's fixed defaults on a node (ray start --help, Ray 2.60): the GCS's, the dashboard's, the
# client server's, the dashboard agent's, and the workers' range.
RAY_DEFAULTS = {6379, 8265, 10001, 52365, *range(10002, 20000)}

DRIVER = '''\
"""A driver that runs tasks (so that workers listen), asks its dashboard, and waits to be told to end."""
import json, os, sys, time, urllib.request
import ray
context = ray.init()
pids = ray.get([ray.remote(lambda: os.getpid()).remote() for _ in range(2)])
url, answer = context.dashboard_url, None
if url:
    try:
        answer = json.load(urllib.request.urlopen(f"http://{url}/api/version", timeout=30)).get("ray_version")
    except OSError as e:
        answer = repr(e)
print(json.dumps({"cpus": ray.cluster_resources()["CPU"], "workers": len(set(pids)), "dashboard": url,
                  "answer": answer}), flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.1)
'''


def listening(netns_pid: int) -> dict[int, int]:
    """The namespace's listening TCP sockets: inode -> port."""
    found = {}
    for table in ("tcp", "tcp6"):
        for line in read(Path(f"/proc/{netns_pid}/net/{table}")).splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                found[int(fields[9])] = int(fields[1].rsplit(":", 1)[1], 16)
    return found


def ports_of(pids, sockets: dict[int, int]) -> set[int]:
    """The ports these processes listen on."""
    ports = set()
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        ports |= {sockets[int(link[8:-1])] for link in links
                  if link.startswith("socket:[") and int(link[8:-1]) in sockets}
    return ports


@pytest.mark.timeout(300)
def test_two_ray_heads_on_one_node_run_at_once_on_ports_of_their_own(tmp_path):
    need(os.geteuid() == 0, "a network namespace of the test's own needs root")
    need(shutil.which("unshare") is not None and shutil.which("nsenter") is not None, "util-linux's unshare/nsenter")
    try:
        import ray  # noqa: F401
    except ImportError:
        need(False, "ray is not installed (scripts/setup --tests)")
    dashboards = importlib.util.find_spec("aiohttp_cors") is not None  # ray[default]'s
    (tmp_path / "driver.py").write_text(DRIVER)
    holder = subprocess.Popen(["unshare", "--net", "--", "sh", "-c", "ip link set lo up && echo up && exec sleep 600"],
                              stdout=subprocess.PIPE, text=True)
    enter = ["nsenter", f"--net=/proc/{holder.pid}/ns/net", "--"]
    jobs = {name: tmp_path / name for name in ("a", "b")}
    steps: list[subprocess.Popen] = []
    sessions: dict[str, int | None] = {}
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
        for i, (name, folder) in enumerate(jobs.items()):
            folder.mkdir()
            env = dict(os.environ, SLURM_JOB_ID=f"{os.getpid()}{name}", SLURMD_NODENAME="n",
                       SLURMTORCH_JOB_DIR=str(folder))
            head = f"127.0.0.1:{23001 + i}"  # the GCS's: MASTER_PORT, picked free by the batch script
            with open(folder / "head.err", "w") as err:
                steps.append(subprocess.Popen([*enter, sys.executable, "-m", "slurmtorch.bootstrap.raynode", "head",
                                               head, "--cpus", "1", "--gpus", "0", "--backend", "gloo",
                                               "--deadline", "120"], env=env, stderr=err))
            with open(folder / "driver.out", "w") as out, open(folder / "driver.err", "w") as err:
                steps.append(subprocess.Popen([*enter, sys.executable, "-m", "slurmtorch.bootstrap.raynode", "driver",
                                               head, "--nodes", "1", "--deadline", "120", str(tmp_path / "driver.py"),
                                               str(tmp_path / "go")], env=env, stdout=out, stderr=err))
        wait_for(lambda: all(read(f / "driver.out").strip() for f in jobs.values())
                 or any(s.poll() is not None for s in steps), "both drivers to run their tasks", 200)
        assert all(read(f / "driver.out").strip() for f in jobs.values()), "a step ended first:\n" + "".join(
            f"{name}: {read(f / 'head.err')}{read(f / 'driver.err')[-2000:]}{read(f / 'ray-n.out')[-1500:]}\n"
            for name, f in jobs.items())
        seen = {name: (json.loads(read(folder / "driver.out")), read(folder / "head.err"))
                for name, folder in jobs.items()}
        for name, (driver, head_err) in seen.items():
            assert driver["cpus"] == 1.0 and driver["workers"] >= 1, (name, driver, head_err)
        # Each cluster's processes, by the session its raynode recorded, and the ports they listen on.
        sockets = listening(holder.pid)
        ports = {}
        for name in jobs:
            temp = f"/tmp/slurmtorch-ray-{os.getpid()}{name}-n"
            sessions[name], _ = raysession.recorded(temp)
            ports[name] = ports_of(raysession.session_processes(sessions[name], temp), sockets)
        assert ports["a"] and ports["b"] and not ports["a"] & ports["b"], ports
        assert not (ports["a"] | ports["b"]) & RAY_DEFAULTS, ports
        if dashboards:  # ray[default]: each head's own dashboard, the one its line in batch.out names
            urls = {name: driver["dashboard"] for name, (driver, _) in seen.items()}
            assert urls["a"] and urls["b"] and urls["a"] != urls["b"], seen
            for name, (driver, head_err) in seen.items():
                assert driver["answer"] == ray.__version__, (name, driver)
                assert f"its dashboard at http://{driver['dashboard']} on n" in head_err, head_err
    finally:
        (tmp_path / "go").touch()
        for step in steps:
            if step.poll() is None:
                step.terminate()  # raynode ends its Ray: TERM, then KILL
        for step in steps:
            try:
                step.wait(timeout=30)
            except subprocess.TimeoutExpired:
                step.kill()
        holder.kill()
        holder.wait()
    for name in jobs:
        temp = f"/tmp/slurmtorch-ray-{os.getpid()}{name}-n"
        assert not raysession.session_processes(sessions.get(name), temp) and not Path(temp).exists()
