"""Two networks per node, as on real clusters: every launcher meets on the fabric.

scripts/testbed gives each node a management network (eth0, 198.18.0.0/25, what its host
name resolves to) and a fabric (ib0, 198.18.0.128/25), which site-configs/testbed.yaml names
as an InfiniBand site does. MASTER_ADDR and the store must be on ib0 under every launcher:
rank 0's node's store takes its peers' connections on its fabric address, and each peer
connects from its own. tests/scripts/fabric_probe.py reports what each node sees.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import st
from slurmtorch import Distributor

PROBE = Path(__file__).parent / "scripts" / "fabric_probe.py"


def node_index(host: str) -> int:
    return int(host[len("node"):])


def records_in(folder: Path) -> list[dict]:
    lines = [ln for p in sorted(folder.glob("*.out")) for ln in p.read_text().splitlines()]
    return sorted((json.loads(ln[len("FABRIC "):]) for ln in lines if ln.startswith("FABRIC ")),
                  key=lambda r: r["rank"])


def assert_met_on_the_fabric(records: list[dict], world: int) -> None:
    assert [r["rank"] for r in records] == list(range(world)), records
    for r in records:  # the testbed's two networks, as scripts/testbed sets them up
        i = node_index(r["host"])
        assert (r["eth0"], r["ib0"]) == (f"198.18.0.{10 + i}", f"198.18.0.{138 + i}"), r
    head = records[0]
    store = f"{head['ib0']}:{head['MASTER_PORT']}"
    assert all(r["MASTER_ADDR"] == head["ib0"] for r in records), records
    # Rank 0's node: its store accepted the peers on the fabric address, never on eth0.
    accepted = [c for c in head["connections"] if c["local"] == store]
    peers = {f"198.18.0.{138 + node_index(r['host'])}" for r in records if r["host"] != head["host"]}
    assert {c["peer"].rsplit(":", 1)[0] for c in accepted} >= peers, head
    assert not [c for c in head["connections"] if c["local"].startswith(head["eth0"] + ":")], head
    # Every peer on another node: connected from its own fabric address to the store there.
    for r in records:
        if r["host"] != head["host"]:
            mine = [c for c in r["connections"] if c["peer"] == store]
            assert mine and all(c["local"].startswith(r["ib0"] + ":") for c in mine), r


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.mark.parametrize("launcher", ["srun", "torchrun", "mpirun"])
@pytest.mark.slurm_versions
def test_each_launcher_puts_master_addr_and_the_store_on_the_fabric(testbed, has_torch, home, launcher):
    """Red before the fix for torchrun: its agents got no is_host, so none started the store
    (the host name resolves to eth0, the endpoint is on ib0), and the job failed to rendezvous."""
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "2", "--ntasks-per-node", "1",
                              "--launcher", launcher, "--time", "3", "--wait", str(PROBE)], timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_met_on_the_fabric(records_in(home / "jobs" / proc.stdout.split()[0]), 2)


def test_a_role_job_puts_master_addr_and_the_store_on_the_fabric(testbed, has_torch, home):
    """Red before the fix: a role job's ranks met at the first node's host name (eth0)."""
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "--role", "master=1", "--role", "worker=1",
                              "--time", "3", "--wait", str(PROBE)], timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_met_on_the_fabric(records_in(home / "jobs" / proc.stdout.split()[0]), 2)


def test_the_distributor_puts_master_addr_and_the_store_on_the_fabric(testbed, has_torch, home, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", testbed.env["SLURM_CONF"])
    monkeypatch.setenv("PATH", testbed.env["PATH"])
    monkeypatch.setenv("SLURMTORCH_HOME", str(home))
    job = Distributor(num_processes=2, nodes=2, site="testbed", time="3", timeout=60, progress=False).submit(str(PROBE))
    try:
        assert job.result(timeout=180) is None
    finally:
        job.cancel()
    assert_met_on_the_fabric(records_in(home / "jobs" / job.job_id), 2)


FABRIC_NAMES_SITE = """\
# The testbed described as JSC describes JUWELS: no fabric interface named, the rendezvous on
# each node's fabric name (its Slurm name + a suffix: JSC's `i`, the testbed's `-ib`).
extends: testbed
name: testbed-fabric-names
node_types:
  cpu:
    interfaces: []
    fabric_host_suffix: "-ib"
"""


@pytest.mark.parametrize("launcher", ["srun", "torchrun", "mpirun"])
def test_fabric_host_suffix_puts_master_addr_and_the_store_on_the_fabric(testbed, has_torch, home, tmp_path,
                                                                        launcher):
    """JSC's form (MASTER_ADDR="${MASTER_ADDR}i"): with no *_SOCKET_IFNAME, the ranks would meet at the
    first node's host name (eth0); fabric_host_suffix resolves nodeI-ib, its ib0 address, for the batch
    script's MASTER_ADDR, torchrun's --local-addr and MPI's rank 0 alike."""
    site = tmp_path / "testbed-fabric-names.yaml"
    site.write_text(FABRIC_NAMES_SITE)
    proc = st(testbed, home, ["sbatch", "--site", str(site), "-N", "2", "--ntasks-per-node", "1",
                              "--launcher", launcher, "--time", "3", "--wait", str(PROBE)], timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_met_on_the_fabric(records_in(home / "jobs" / proc.stdout.split()[0]), 2)
