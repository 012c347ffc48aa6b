"""The testbed's login host and its laptop: a real sshd reached by key, a laptop without Slurm.

What the remote (`--cluster`) tests stand on: from the laptop every scheduler call must cross
SSH, and the failures they test (sshd stopped, key refused, host key changed) are real ones.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TESTBED, Laptop
from test_testbed import _leftovers

# Every Slurm client and daemon and munge's commands: the laptop must find none of them.
SLURM_COMMANDS = ["sbatch", "srun", "squeue", "scontrol", "scancel", "salloc", "sinfo", "sacct", "sattach",
                  "sbcast", "sstat", "sprio", "sshare", "sreport", "sacctmgr", "sdiag", "strigger",
                  "slurmctld", "slurmd", "slurmstepd", "munge", "unmunge", "munged"]


def test_laptop_reaches_the_login_host_by_its_ssh_alias(laptop: Laptop):
    done = laptop.run(["ssh", "login", "hostname"], timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "login\n"
    # A terminal on the login host, as an interactive allocation over `ssh -t` needs.
    tty = laptop.run(["ssh", "-tt", "login", "tty"], stdin=subprocess.DEVNULL, timeout=60)
    assert tty.returncode == 0 and tty.stdout.startswith("/dev/pts/"), (tty.stdout, tty.stderr)


def test_laptop_has_no_slurm_commands_config_or_munge(laptop: Laptop):
    probe = (
        "import json, os, shutil, sys\n"
        "print(json.dumps({\n"
        "    'found': {c: shutil.which(c) for c in sys.argv[2:]},\n"
        "    'etc_slurm': os.listdir('/etc/slurm') if os.path.isdir('/etc/slurm') else [],\n"
        "    'testbed_conf': os.path.exists(sys.argv[1]),\n"
        "    'scratch': os.listdir(os.environ['SCRATCH']),\n"
        "    'env': sorted(k for k in os.environ if k.startswith('SLURM_')),\n"
        "    'home': os.environ['HOME'],\n"
        "    'expanded_home': os.path.expanduser('~'),\n"
        "}))\n"
    )
    slurm_conf = laptop.testbed.env["SLURM_CONF"]
    (laptop.workdir / "on-the-cluster").write_text("the laptop must not see this\n")
    done = laptop.run([sys.executable, "-c", probe, slurm_conf, *SLURM_COMMANDS],
                      env={"SLURM_CONF": slurm_conf, "SCRATCH": str(laptop.workdir)}, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["found"] == {c: None for c in SLURM_COMMANDS}
    assert seen["etc_slurm"] == []
    # The testbed's own slurm.conf is hidden too, and SLURM_CONF was dropped.
    assert seen["testbed_conf"] is False
    # Nor does it share the cluster's scratch: what it sends there crosses SSH.
    assert seen["scratch"] == []
    assert seen["env"] == []
    assert seen["home"] == str(laptop.home) == seen["expanded_home"]
    # The commands a laptop does have are there (through the link folder).
    assert laptop.run(["rsync", "--version"], timeout=60).returncode == 0


@pytest.mark.slurm_versions
def test_sbatch_over_ssh_runs_a_job_on_a_node(laptop: Laptop):
    # As on a real login node, slurm.conf is at Slurm's default path, not named by SLURM_CONF.
    conf = laptop.run(["ssh", "login", "printenv SLURM_CONF; test -f /etc/slurm/slurm.conf"], timeout=60)
    assert (conf.returncode, conf.stdout) == (0, ""), conf.stderr
    out = f"{laptop.workdir}/login-%j.out"
    done = laptop.run(["ssh", "login", "sbatch", "--parsable", "--wait", "-p", "debug", "-N", "1",
                       "-o", out, "--wrap", "hostname"], timeout=120)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    assert job.isdigit(), done.stdout
    # The job's output, read on the login host (the laptop does not share its filesystem).
    cat = laptop.run(["ssh", "login", "cat", out.replace("%j", job)], timeout=60)
    assert cat.returncode == 0, cat.stderr
    assert cat.stdout.strip() in laptop.testbed.nodes


def test_rsync_over_ssh_reaches_the_cluster_scratch(laptop: Laptop, tmp_path):
    """What a remote snapshot sync needs: rsync on both ends, over the laptop's ssh alias."""
    src = tmp_path / "code"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    dest = f"{laptop.workdir}/rsync-{tmp_path.name}"
    done = laptop.run(["rsync", "-a", f"{src}/", f"login:{dest}/"], timeout=60)
    assert done.returncode == 0, done.stderr
    cat = laptop.run(["ssh", "login", "cat", f"{dest}/train.py"], timeout=60)
    assert cat.stdout == "print('hi')\n", cat.stderr


def test_the_venv_python_runs_slurmtorch_on_the_login_host(laptop: Laptop):
    here = subprocess.run([sys.executable, "-m", "slurmtorch", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert here.returncode == 0, here.stderr
    done = laptop.run(["ssh", "login", f"{laptop.python} -m slurmtorch --version"], timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == here.stdout


def test_stopped_sshd_refuses_the_connection_and_start_brings_it_back(laptop: Laptop):
    laptop.login("stop")
    try:
        done = laptop.run(["ssh", "login", "true"], timeout=60)
        assert done.returncode == 255
        assert "Connection refused" in done.stderr, done.stderr
    finally:
        laptop.login("start")
    done = laptop.run(["ssh", "login", "true"], timeout=60)
    assert done.returncode == 0, done.stderr


def test_multiplexed_connections_share_a_master_that_ends_with_sshd(laptop: Laptop):
    """ControlMaster/ControlPersist work against the login host, and `login stop` ends the
    laptop's master too, so a test of an unreachable host is not served by a live master."""
    mux = ["-o", "ControlMaster=auto", "-o", "ControlPersist=60", "-o", "ControlPath=~/.ssh/cm-%C"]
    check = ["ssh", "-O", "check", "-o", "ControlPath=~/.ssh/cm-%C", "login"]
    try:
        first = laptop.run(["ssh", *mux, "login", "true"], timeout=60)
        assert first.returncode == 0, first.stderr
        running = laptop.run(check, timeout=60)
        assert running.returncode == 0 and "Master running" in running.stderr, running.stderr
        again = laptop.run(["ssh", *mux, "login", "hostname"], timeout=60)
        assert again.stdout == "login\n", again.stderr
        laptop.login("stop")
        deadline = time.monotonic() + 10
        while laptop.run(check, timeout=60).returncode == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert laptop.run(check, timeout=60).returncode == 255
        refused = laptop.run(["ssh", *mux, "login", "true"], timeout=60)
        assert "Connection refused" in refused.stderr, refused.stderr
    finally:
        laptop.login("start")
        laptop.run(["ssh", "-O", "exit", "-o", "ControlPath=~/.ssh/cm-%C", "login"], timeout=60)


def test_a_key_the_login_host_does_not_accept_is_refused(laptop: Laptop):
    # Through the config's second alias, and with the key named on the command line.
    by_alias = [laptop.run(["ssh", "login-refused", "true"], timeout=60) for _ in range(3)]
    by_flag = laptop.run(["ssh", "-F", "none", "-i", laptop.refused_key, "-o", "IdentitiesOnly=yes",
                          "-o", f"UserKnownHostsFile={laptop.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                          f"root@{laptop.login_addr}", "true"], timeout=60)
    for done in (*by_alias, by_flag):
        assert done.returncode == 255
        assert "Permission denied (publickey)" in done.stderr, done.stderr
    # Four refusals do not lock the laptop out of the next tests (OpenSSH 9.8+'s
    # PerSourcePenalties would: "Connection closed by 198.18.0.5 port 22").
    done = laptop.run(["ssh", "login", "true"], timeout=60)
    assert done.returncode == 0, done.stderr


def test_host_key_checking_is_on(laptop: Laptop, tmp_path):
    """A known_hosts that pins another key for the login host stops the connection."""
    other_key = laptop.refused_key.with_suffix(".pub").read_text().split()[:2]
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"login,{laptop.login_addr} {' '.join(other_key)}\n")
    done = laptop.run(["ssh", "-o", f"UserKnownHostsFile={wrong}", "login", "true"], timeout=60)
    assert done.returncode == 255
    assert re.search(r"Host key verification failed", done.stderr), done.stderr


def test_down_ends_sshd_and_its_sessions_and_leaves_nothing(laptop: Laptop):
    session = subprocess.Popen([str(TESTBED), "laptop", "ssh", "login", "sleep", "300"], env=laptop.env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # The session's command runs in the login host's namespace beside sshd.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _session_running():
            time.sleep(0.1)
        assert _session_running(), session.stderr.read() if session.poll() is not None else "no session"
        down = subprocess.run([str(TESTBED), "down"], capture_output=True, text=True, timeout=120)
        assert down.returncode == 0, down.stderr
        assert session.wait(timeout=30) == 255  # the session ended with its host
        deadline = time.monotonic() + 5
        while _leftovers() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _leftovers() == []
    finally:
        session.kill()
        # Leave a healthy cluster for the rest of the session.
        assert subprocess.run([str(TESTBED), "up", "4"], capture_output=True, timeout=180).returncode == 0


def _session_running() -> bool:
    """Whether the session's `sleep 300` runs in the login host's network namespace."""
    out = subprocess.run(["ip", "netns", "pids", "slurmtorch-login"], capture_output=True, text=True, timeout=30)
    for pid in out.stdout.split():
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x00300\x00":
                return True
        except OSError:
            continue
    return False
