"""The local Slurm testbed itself: real daemons, real namespaces, clean teardown."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import TESTBED, need

STATE = Path(os.environ.get("SLURMTORCH_TESTBED_DIR", "/tmp/slurmtorch-testbed"))
LOCK = Path(f"{STATE}.lock")


def _testbed(*args, timeout=120):
    return subprocess.run([str(TESTBED), *args], capture_output=True, text=True, timeout=timeout)


def _our_live_daemons() -> list[str]:
    """Non-zombie slurmctld/slurmd/munged/sshd processes whose command line points at our state dir."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and str(STATE) in cmd and any(d in cmd for d in ("slurmctld", "slurmd", "munged", "sshd")):
            found.append(f"{proc.name}: {cmd}")
    return found


def _leftovers() -> list[str]:
    left = _our_live_daemons()
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    ours = ("slurmtorch-node", "slurmtorch-login")  # the nodes' namespaces and the login host's
    left += [f"netns {line.split()[0]}" for line in netns.splitlines() if line.startswith(ours)]
    for link in ("stbr0", "stib0", "stvlogin"):  # the two networks' bridges, the login host's veth
        if subprocess.run(["ip", "link", "show", link], capture_output=True).returncode == 0:
            left.append(f"link {link}")
    if STATE.exists():
        left.append(f"state dir {STATE}")
    if LOCK.exists():
        left.append(f"lock file {LOCK}")
    return left


def test_up_and_down_twice_leave_no_daemon_namespace_or_state(testbed):
    """Also proves `up` recovers from a cluster it did not take down itself, and that `down`
    never kills a process whose PID a stale PID file names (the kernel reuses PIDs)."""
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        for _ in range(2):
            up = _testbed("up", "4")
            assert up.returncode == 0, up.stderr
            out = testbed.run(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout.split("\n")
            # One line per node and partition (node3 and node4 are in debug and fat).
            assert sorted({line.split()[0] for line in out if line}) == ["node1", "node2", "node3", "node4"]
            # As if a daemon of an earlier run had had this PID.
            (STATE / "run" / "slurmd-node9.pid").write_text(f"{bystander.pid}\n")
            down = _testbed("down")
            assert down.returncode == 0, down.stderr
            assert bystander.poll() is None, "down killed a process that was not one of its daemons"
            # Daemons end asynchronously after SIGKILL; allow a moment.
            deadline = time.monotonic() + 5
            while _leftovers() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _leftovers() == []
    finally:
        bystander.kill()
        # Leave a healthy cluster for the rest of the session.
        assert _testbed("up", "4").returncode == 0


def test_up_is_idempotent_on_a_healthy_cluster(testbed):
    before = (STATE / "run" / "slurmctld.pid").read_text()
    again = _testbed("up", "4")
    assert again.returncode == 0 and "already up" in again.stderr
    assert (STATE / "run" / "slurmctld.pid").read_text() == before


def test_slurmctld_listens_only_on_the_testbed_address(testbed):
    # CommunicationParameters=NoCtldInAddrAny: bound to slurmctl's 198.18.0.1, not to every address.
    ss = subprocess.run(["ss", "-Hltn", "sport", "= :16817"], capture_output=True, text=True, timeout=30)
    assert ss.returncode == 0, ss.stderr
    local = [line.split()[3] for line in ss.stdout.splitlines() if line.strip()]
    assert local == ["198.18.0.1:16817"], ss.stdout


@pytest.mark.slurm_versions
def test_srun_reaches_four_nodes_with_their_own_hostnames_and_addresses(testbed):
    """Two networks per node: management (eth0, what the host name resolves to) and fabric (ib0)."""
    r = testbed.run(["srun", "-N4", "--ntasks-per-node=1", "sh", "-c",
                     "echo $(hostname) $(ip -4 -o addr show eth0 | awk '{print $4}')"
                     " $(ip -4 -o addr show ib0 | awk '{print $4}') $(getent ahostsv4 $(hostname) | head -n 1)"],
                    timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")[:-1]) == [
        f"node{i} 198.18.0.{10 + i}/25 198.18.0.{138 + i}/25 198.18.0.{10 + i} STREAM node{i}" for i in range(1, 5)]


@pytest.mark.slurm_versions
def test_each_node_has_its_own_boot_id_and_ipc_namespace_as_separate_hosts_do(testbed):
    """UCX (in PyPI's MPICH) takes processes with one boot id for one host and joins them through
    shared memory: nodes sharing the machine's boot id failed MPICH's srun test now and then."""
    r = testbed.run(["srun", "-N4", "--ntasks-per-node=1", "sh", "-c",
                     "echo $(hostname) $(cat /proc/sys/kernel/random/boot_id) $(readlink /proc/self/ns/ipc)"],
                    timeout=60)
    assert r.returncode == 0, r.stderr
    lines = sorted(r.stdout.split("\n")[:-1])
    assert [line.split()[0] for line in lines] == ["node1", "node2", "node3", "node4"]
    mine = (Path("/proc/sys/kernel/random/boot_id").read_text().strip(), os.readlink("/proc/self/ns/ipc"))
    for column in (1, 2):
        values = [line.split()[column] for line in lines]
        assert len(set(values)) == 4, lines
        assert mine[column - 1] not in values, lines


@pytest.mark.slurm_versions
def test_sbatch_four_node_job_agrees_on_gloo_all_reduce(testbed, has_torch, tmp_path, capsys):
    """A real 4-node batch job through sbatch: every node runs a rank, all see sum 1+2+3+4."""
    script = Path(__file__).parent / "scripts" / "gloo_allreduce.py"
    out = tmp_path / "job.out"
    batch = tmp_path / "job.sh"
    batch.write_text(
        "#!/bin/bash\n"
        f"#SBATCH --nodes=4 --ntasks-per-node=1 --output={out}\n"
        "export GLOO_SOCKET_IFNAME=eth0 INIT_METHOD=tcp://198.18.0.11:29511\n"
        f"srun {testbed.python} {script}\n"
    )
    sub = testbed.run(["sbatch", "--parsable", str(batch)])
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if not testbed.run(["squeue", "-h", "-j", job_id]).stdout.strip():
            break
        time.sleep(0.3)
    else:
        testbed.run(["scancel", job_id])
        pytest.fail("4-node gloo job did not finish within 120 s")
    state = testbed.run(["scontrol", "show", "job", job_id]).stdout
    assert "JobState=COMPLETED" in state, state + out.read_text()
    lines = sorted(line for line in out.read_text().splitlines() if line.startswith("host="))
    with capsys.disabled():  # shown in CI's log: the proof that the cluster is real
        print(f"\n  sbatch job {job_id} on the testbed:\n    " + "\n    ".join(lines))
    assert lines == [f"host=node{i + 1} rank={i} sum=10" for i in range(4)]


def _testbed_at(state: Path, *args):
    env = {**os.environ, "SLURMTORCH_TESTBED_DIR": str(state)}
    return subprocess.run([str(TESTBED), *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("plant, why", [
    ("state", "belongs to uid 65534, not to us: another user may have made it first"),
    ("lock", "belongs to uid 65534, not to us"),
    ("state-link", "is a symbolic link, which another user may have planted"),
    ("state-writable", "is writable by others (mode 777)"),
    ("open-parent", "is writable by others and not sticky (mode 777)"),
])
@pytest.mark.parametrize("verb", ["up", "status", "down"])
def test_a_state_dir_or_lock_another_user_made_first_is_refused_before_anything_runs(tmp_path, plant, why, verb):
    """The testbed runs as root from predictable /tmp paths: what another user planted
    there first (config, keys, PID files) must never be read, run or killed from."""
    need(os.geteuid() == 0, "the testbed needs root")
    parent = tmp_path / "tmp"
    parent.mkdir(mode=0o1777 if plant != "open-parent" else 0o777)
    os.chmod(parent, 0o1777 if plant != "open-parent" else 0o777)
    state = parent / "slurmtorch-testbed"
    if plant == "state-link":
        (tmp_path / "theirs").mkdir()
        state.symlink_to(tmp_path / "theirs")
    else:
        state.mkdir()
        (state / "run").mkdir()
        (state / "run" / "slurmctld.pid").write_text(f"{os.getpid()}\n")  # a PID file aimed at us
    if plant == "state":
        os.chown(state, 65534, -1)
    if plant == "state-writable":
        os.chmod(state, 0o777)
    if plant == "lock":
        Path(f"{state}.lock").write_text("")
        os.chown(f"{state}.lock", 65534, -1)
    proc = _testbed_at(state, verb)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("testbed: ") and why in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "SLURMTORCH_TESTBED_DIR" in proc.stderr
    assert state.exists() or state.is_symlink()  # nothing removed, nothing started
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["tmp", *(["theirs"] if plant == "state-link" else [])])


@pytest.mark.slurm_versions
def test_the_hosts_file_lists_this_machine_at_the_controller_address(testbed):
    """Slurm 24.11's slurmctld calls a login-side srun back by this host's name; unlisted, the
    lookup went to DNS and stalled the controller ~10 s per call (srun -N1 hostname: 10.2 s)."""
    hosts = (testbed.state_dir / "etc" / "hosts").read_text().splitlines()
    assert f"198.18.0.1 {socket.gethostname()}" in hosts
