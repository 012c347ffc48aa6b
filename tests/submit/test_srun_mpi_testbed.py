"""`srun_mpi: none` on the real testbed: plain srun (no --mpi), as CSCS launches its uenv jobs;
and a site's `omp_num_threads` in every rank.

The testbed's slurm.conf has MpiDefault=none, so a plain srun starts the ranks with no PMI at
all, as an Alps uenv job does without `--mpi`. Every rank must still get the right world
(from srun's SLURM_* variables) and the gloo group must work across nodes; the script
carries no --mpi on the ranks' step.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import st

# Each rank: its world as the bootstrap set it, and a cross-node all_reduce over it.
PROBE = """\
import json, os, socket
import torch
import torch.distributed as dist
t = torch.ones(1) * (int(os.environ["RANK"]) + 1)
dist.all_reduce(t)
print(json.dumps({k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                  "NODE_RANK", "PMIX_RANK", "PMI_RANK", "OMP_NUM_THREADS")} | {"host": socket.gethostname(), "sum": t.item(),
                  "backend": dist.get_backend()}), flush=True)
"""


@pytest.mark.timeout(240)
def test_plain_srun_without_mpi_gives_every_rank_its_world(testbed, has_torch, tmp_path: Path):
    home = tmp_path / "home"
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    site = tmp_path / "site.yaml"
    site.write_text("extends: testbed\nsrun_mpi: none\nomp_num_threads: 3\n")
    proc = st(testbed, home, ["sbatch", "--site", str(site), "-N", "2", "--ntasks-per-node", "2", "-c", "1",
                              "--wait", str(probe)], timeout=200)
    assert proc.returncode == 0, proc.stderr
    folder = home / "jobs" / proc.stdout.split()[0]
    script = (folder / "script.sh").read_text()
    step = next(ln for ln in script.splitlines() if ln.startswith("srun --nodes=2"))
    assert "--mpi" not in step, step
    got = sorted((json.loads(ln[ln.index("{"):]) for p in folder.glob("rank-*.out")
                  for ln in p.read_text().splitlines() if "{" in ln), key=lambda r: int(r["RANK"]))
    assert [r["RANK"] for r in got] == ["0", "1", "2", "3"], got
    assert {r["WORLD_SIZE"] for r in got} == {"4"} and {r["LOCAL_WORLD_SIZE"] for r in got} == {"2"}
    assert [r["LOCAL_RANK"] for r in got] == ["0", "1", "0", "1"]
    assert [r["NODE_RANK"] for r in got] == ["0", "0", "1", "1"]
    assert [r["host"] for r in got] == ["node1", "node1", "node2", "node2"]
    assert {r["sum"] for r in got} == {10.0} and {r["backend"] for r in got} == {"gloo"}
    assert not any(r["PMIX_RANK"] or r["PMI_RANK"] for r in got)  # no PMI: the world came from SLURM_*
    # The site's OMP_NUM_THREADS reaches every rank (each rank's share here would be 1).
    assert {r["OMP_NUM_THREADS"] for r in got} == {"3"}
