"""On the testbed: uneven layouts, sbatch's own options and the escape hatch, through the real
sbatch, srun, scontrol and Open MPI (scripts/testbed's nodes have Feature=cpu,testbed and
RealMemory=4096, as site-configs/testbed.yaml says).

What is checked is what the scheduler and the ranks see: `scontrol show job` for the
header, the ranks' own environment for the layout and the srun options.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers import st

# Each rank prints its place as the bootstrap gave it, what srun/MPI left in SLURM_*, and
# the sum of an all_reduce over the world (1 + 2 + ... + WORLD_SIZE).
PLACE = """\
import json, os, socket, sys
import torch, torch.distributed as dist
t = torch.tensor([float(os.environ["RANK"]) + 1])
dist.all_reduce(t)
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_WORLD_SIZE",
        "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE",
        "SLURM_DISTRIBUTION")
print(json.dumps({**{k: os.environ.get(k) for k in keys}, "host": socket.gethostname(), "sum": t.item(),
                  "argv": sys.argv[1:]}), flush=True)
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def place(tmp_path: Path) -> Path:
    p = tmp_path / "place.py"
    p.write_text(PLACE)
    return p


def records(folder: Path) -> list[dict]:
    """Every rank's JSON line (srun's `--label` puts `R: ` before it), by rank."""
    out = []
    for p in sorted(folder.glob("rank-*.out")):
        for line in p.read_text().splitlines():
            if "{" in line:
                out.append(json.loads(line[line.index("{"):]))
    return sorted(out, key=lambda r: int(r["RANK"]))


def scontrol_job(testbed, job_id: str) -> str:
    return testbed.run(["scontrol", "show", "job", job_id]).stdout


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
@pytest.mark.slurm_versions
def test_two_nodes_three_ranks_each_know_their_place(testbed, has_torch, home, place, launcher):
    """--nodes 2 --ntasks 3: 2+1, and every rank's local and node ranks say so (from inside the ranks)."""
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "--nodes", "2", "--ntasks", "3", "--launcher", launcher,
                              "--wait", str(place)], timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = records(home / "jobs" / proc.stdout.split()[0])
    assert [r["RANK"] for r in got] == ["0", "1", "2"], got
    first, second = got[0]["host"], got[2]["host"]
    assert first != second and got[1]["host"] == first
    assert [(r["LOCAL_RANK"], r["LOCAL_WORLD_SIZE"], r["NODE_RANK"]) for r in got] == \
        [("0", "2", "0"), ("1", "2", "0"), ("0", "1", "1")]
    assert all(r["WORLD_SIZE"] == "3" and r["GROUP_WORLD_SIZE"] == "2" and r["sum"] == 6.0 for r in got), got
    # What srun (or, under mpirun, slurmtorch in its place) leaves in SLURM_*: the same world on every rank.
    assert [(r["SLURM_PROCID"], r["SLURM_LOCALID"], r["SLURM_NODEID"], r["SLURM_NTASKS"]) for r in got] == \
        [("0", "0", "0", "3"), ("1", "1", "0", "3"), ("2", "0", "1", "3")]
    if launcher == "mpirun":  # rank 0 used to keep the batch script's set, without SLURM_NTASKS_PER_NODE
        assert [r["SLURM_NTASKS_PER_NODE"] for r in got] == ["2", "2", "1"]


@pytest.mark.slurm_versions
def test_sbatchs_options_are_accepted_by_sbatch_and_shown_by_scontrol(testbed, home, tmp_path):
    """--exclusive --mem 1G -C testbed -d afterok:<id>, and --sbatch-arg, reach the real sbatch."""
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\ntime.sleep(600)\n")
    ids = []
    try:
        # A job to depend on: it waits for a time that never comes (--begin), so ours stays pending.
        first = st(testbed, home, ["sbatch", "--site", "testbed", "--begin", "now+1hour", "-t", "1", str(sleeper)])
        assert first.returncode == 0, first.stderr
        ids.append(first.stdout.split()[0])
        proc = st(testbed, home, [
            "sbatch", "--site", "testbed", "-N", "2", "-n", "3", "--exclusive", "--mem", "1G", "-C", "testbed",
            "-d", f"afterok:{ids[0]}", "-w", "node[1-2]", "-x", "node4", "--mail-type", "END,FAIL",
            "--mail-user", "nobody@example.org", "--comment", "it's mine", "--sbatch-arg=--nice=5",
            "--sbatch-arg=--kill-on-invalid-dep=yes", "-t", "1", str(sleeper)])
        assert proc.returncode == 0, proc.stderr
        ids.append(proc.stdout.split()[0])
        shown = scontrol_job(testbed, ids[1])
        for field in ("OverSubscribe=NO", "MinMemoryNode=1G", "Features=testbed", f"Dependency=afterok:{ids[0]}",
                      "ReqNodeList=node[1-2]", "ExcNodeList=node4", "NumNodes=2", "NumTasks=3", "Nice=5",
                      "Comment=it's mine", "MailUser=nobody@example.org", "MailType=END,FAIL",
                      "KillOInInvalidDependent=Yes"):
            assert field in shown, (field, shown)
    finally:
        if ids:
            testbed.run(["scancel", *ids], check=False)


@pytest.mark.slurm_versions
def test_srun_args_reach_the_ranks_step(testbed, has_torch, home, place):
    """--srun-arg is on the step's srun line: --label prefixes each rank's lines with its task id,
    and --distribution=cyclic is what srun tells the ranks."""
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "2", "--srun-arg=--label",
                              "--srun-arg=--distribution=cyclic", "--wait", str(place)], timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = home / "jobs" / proc.stdout.split()[0]
    assert [p.read_text().splitlines()[0].split(": ", 1)[0] for p in sorted(folder.glob("rank-*.out"))] == ["0", "1"]
    assert {r["SLURM_DISTRIBUTION"] for r in records(folder)} == {"cyclic"}


@pytest.mark.slurm_versions
def test_rank_0_off_the_first_node_says_how_to_fix_the_hostfile(testbed, tmp_path):
    """srun --distribution=arbitrary with SLURM_HOSTFILE listing node2 first puts task 0 there.

    Slurm 24.11 refuses -N with it ("--nodes is incompatible with --distribution=arbitrary"):
    the hostfile alone names the nodes there; 22.05 takes both."""
    hosts, noop = tmp_path / "hosts", tmp_path / "noop.py"
    hosts.write_text("node2\nnode1\n")
    noop.write_text("")
    nodes = ["-N", "2"] if testbed.slurm < (24, 11) else []
    proc = testbed.run(["srun", *nodes, "-n", "2", "--distribution=arbitrary", "--kill-on-bad-exit=1",
                        testbed.python, "-m", "slurmtorch.bootstrap", "--from", "slurm", "--no-init", noop],
                       env={"SLURM_HOSTFILE": str(hosts)}, timeout=120)
    assert proc.returncode != 0
    error = next(ln for ln in proc.stderr.splitlines() if "rank 0 is not on the step's first node" in ln)
    tip = proc.stderr.splitlines()[proc.stderr.splitlines().index(error) + 1]
    assert "SLURM_DISTRIBUTION=arbitrary" in error and re.search(r"SLURMD_NODENAME=node2\b", error)
    assert tip.endswith("tip: srun --distribution=arbitrary put task 0 on SLURM_HOSTFILE's first host; the master "
                        "address is on the step's first node, node1: make node1 the first line of SLURM_HOSTFILE, "
                        "or leave the distribution to srun (block, cyclic or plane)"), proc.stderr
