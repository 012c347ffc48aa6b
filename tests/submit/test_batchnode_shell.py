"""The batch node's bash (templates/*.sh: the pickers, the reaper, ch-run's env file), run in a real bash."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest

from slurmtorch import protocol, resources
from slurmtorch.bootstrap.rendezvous import interface_address, pick_interface


def bash(code: str, *files: str, **env: str) -> subprocess.CompletedProcess:
    """`code` after the shell files `files` of templates/, sourced as a host job's script does."""
    sources = "".join(f'. {resources.templates_dir() / name}\n' for name in files)
    return subprocess.run(["bash", "-c", sources + code], capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], **env})


# ------------------------------------------------------------------ where the ranks meet


def test_the_port_picker_gives_a_free_port_below_the_ephemeral_range():
    proc = bash("free_port", "rendezvous.sh")
    assert proc.returncode == 0, proc.stderr
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    assert 20000 <= int(proc.stdout) < (low if low > 21000 else 32768)
    with socket.socket() as s:
        s.bind(("", int(proc.stdout)))  # free: a plain bind takes it


# NCCL's syntax (rendezvous.pick_interface) over this machine's own interfaces.
IFNAMES = ["lo", "=lo", "eth0", "eth", "=eth", "e,l", "nosuch,eth0", " eth0 , lo", "^lo", "^=lo", "^eth,lo",
           "^=eth0,lo", "^if", "^ifb,eth", "l", "=l"]


@pytest.mark.parametrize("ifname", IFNAMES)
def test_the_address_picker_takes_the_interface_the_rank_side_would(ifname):
    """One syntax on both sides: the batch node's bash picks where MPI's rank 0 (Python) would, save
    that an interface without an IPv4 address is passed over for the next that matches."""
    available = [name for _, name in socket.if_nameindex()]
    picked = pick_interface(ifname, available)
    expected = interface_address(picked) if picked else None
    proc = bash("fabric_address gloo", "rendezvous.sh", GLOO_SOCKET_IFNAME=ifname)
    if expected is not None:
        assert (proc.returncode, proc.stdout) == (0, expected + "\n"), proc.stderr
    elif proc.returncode == 0:  # Python's pick had no address; bash took the next match, which has one
        with_address = [n for n in available if interface_address(n)]
        assert pick_interface(ifname, with_address) is not None and proc.stdout.strip() in map(interface_address,
                                                                                                  with_address)
    else:
        assert proc.stdout == "" and proc.stderr.startswith("slurmtorch: error: no IPv4 address on the interface")


def test_the_address_picker_refuses_an_interface_without_an_address_in_one_line():
    proc = bash("fabric_address gloo", "rendezvous.sh", GLOO_SOCKET_IFNAME="nosuch0")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "no IPv4 address on the interface nosuch0" in proc.stderr
    assert "fix GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME in the site config for this node type" in proc.stderr


def test_the_address_picker_reads_the_backends_own_variable_first():
    both = dict(NCCL_SOCKET_IFNAME="=lo", GLOO_SOCKET_IFNAME="nosuch0")
    assert bash("fabric_address nccl", "rendezvous.sh", **both).stdout == "127.0.0.1\n"
    assert bash("fabric_address gloo", "rendezvous.sh", **both).returncode == 1


def test_without_an_interface_the_address_picker_gives_none_and_the_ranks_meet_at_the_host_name():
    assert bash("fabric_address gloo", "rendezvous.sh").stdout == ""
    assert bash("fabric_address gloo", "rendezvous.sh").returncode == 0


def test_the_address_picker_takes_the_fabric_name_first():
    """JSC's `i`: a node's Slurm name + the site's suffix; here `localhos` + `t` resolves through /etc/hosts."""
    env = dict(SLURMD_NODENAME="localhos", GLOO_SOCKET_IFNAME="nosuch0")
    proc = bash("fabric_address gloo", "rendezvous.sh", **env, **{protocol.FABRIC_HOST_SUFFIX: "t"})
    assert (proc.returncode, proc.stdout) == (0, "127.0.0.1\n"), proc.stderr
    proc = bash("fabric_address gloo", "rendezvous.sh", **env, **{protocol.FABRIC_HOST_SUFFIX: "nosuch"})
    assert proc.returncode == 1 and "cannot resolve localhosnosuch (fix fabric_host_suffix" in proc.stderr


# ------------------------------------------------------------------ the steps reaped


def reap(*steps: tuple[str, str, str], grace: int = 30) -> subprocess.CompletedProcess:
    """Background commands standing in for srun steps, tracked as the batch script does, then reaped."""
    started = "".join(f"({code}) &\ntrack $! '{name}' {end}\n" for code, name, end in steps)
    return bash(started + f"reap\nsettle {grace}\necho rc=$?\n", "reap.sh")


def test_the_first_failing_step_stops_the_others_and_its_code_is_the_jobs():
    started = time.monotonic()
    proc = reap(("sleep 0.3; exit 3", "role worker", "job"), ("sleep 0.1", "role master", "job"),
                ("exec sleep 60", "role ps", ""))
    assert proc.stdout == "rc=3\n"
    assert proc.stderr == "slurmtorch: role worker exited with 3; stopping the other steps\n"
    assert protocol.STEP_STOPPED_RE.match(proc.stderr.strip())["role"] == "worker"  # the failure report's read
    assert time.monotonic() - started < 30  # the ps was stopped, not waited for


def test_services_are_stopped_once_every_job_step_ended_well():
    proc = reap(("sleep 0.2", "role master", "job"), ("exec sleep 60", "role ps", ""))
    assert proc.stdout == "rc=0\n" and proc.stderr == ""


def test_the_drivers_code_is_the_jobs():
    proc = reap(("sleep 0.3; exit 3", "Ray driver", "job"), ("exec sleep 60", "Ray head", "vital"))
    assert proc.stdout == "rc=3\n"


@pytest.mark.parametrize("code", [0, 1])
def test_a_vital_step_that_ends_first_ends_the_job_whatever_its_code(code):
    """A Ray node's step ends only when its Ray died (raynode): the driver would wait for its work."""
    proc = reap(("exec sleep 30", "Ray driver", "job"), (f"sleep 0.2; exit {code}", "Ray workers", "vital"))
    assert proc.stdout == "rc=1\n"
    assert proc.stderr == "slurmtorch: Ray workers exited with 1; stopping the other steps\n"
    assert protocol.STEP_STOPPED_RE.match(proc.stderr.strip())["role"] is None  # not a role's


def test_a_step_that_ignores_term_is_killed_after_the_grace_time():
    started = time.monotonic()
    proc = reap(("sleep 0.3; exit 4", "role master", "job"), ("trap '' TERM; sleep 20", "role worker", "job"),
                grace=1)
    assert proc.stdout == "rc=4\n" and time.monotonic() - started < 15


# ------------------------------------------------------------------ ch-run's env file


def test_charliecloud_env_writes_the_named_variables_set_here(tmp_path):
    proc = bash("die() { echo \"die: $1\"; exit 1; }\ncharliecloud_env container.env A B UNSET\n", "chenv.sh",
                SLURMTORCH_JOB_DIR=str(tmp_path), A="x y", B="it's")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "container.env").read_text().splitlines()[-2:] == ["A='x y'", "B='it's'"]
    refused = bash("die() { echo \"die: $1\" >&2; exit 1; }\ncharliecloud_env container.env A\n", "chenv.sh",
                   SLURMTORCH_JOB_DIR=str(tmp_path), A="a\nb")
    assert (refused.returncode, refused.stderr) == (1, "die: A holds a newline, which ch-run --set-env cannot carry\n")
