"""7. Scale: rank derivation and address/port agreement at 16 to 128 ranks, and on paper beyond.

What the bootstrap does per rank that could grow with the world size P: one allgather of
(host, node leader, rank 0's address) records, building the world from P records, and the
contract maps (CLUSTER_SPEC, TF_CONFIG) that list every rank. Measured with `--no-init` and
a script that does nothing, so no rank imports torch (128 torch imports would not fit a
small machine, and are not ours); MPI_Init is shown apart. Oversubscribed: wall times show
the machine, the CPU columns the work.
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from _common import needs_mpi_and_torch as missing  # noqa: F401 - run_all asks
from _common import PY, Figure, env, mpirun, run, table

SIZES = (16, 64, 128)
PAPER = (128, 1024, 8192, 65536)


def once(n: int) -> tuple[float, list[dict]]:
    folder = Path(tempfile.mkdtemp(prefix="st-bench-scale-"))
    noop = folder / "noop.py"
    noop.write_text("pass\n")
    t0 = time.perf_counter()
    run([*mpirun(n), PY, "-m", "slurmtorch.bootstrap", "--no-init", noop],
        environ=env(SLURMTORCH_TIMINGS=str(folder)), timeout=900)
    wall = time.perf_counter() - t0
    return wall, [json.loads(p.read_text()) for p in sorted(folder.glob("rank-*.json"))]


def contract_bytes(p: int) -> int:
    """Bytes of CLUSTER_SPEC as a rank of a P-rank world would build it (pure, in-process)."""
    from slurmtorch.bootstrap.contracts import cluster_spec
    from slurmtorch.bootstrap.rankinfo import RankInfo

    hosts = tuple(f"node{r // 8:05d}" for r in range(p))
    info = RankInfo(rank=1, world_size=p, local_rank=1, local_world_size=8, node_rank=0, num_nodes=max(1, p // 8),
                    master_addr="198.18.0.1", master_port=29500, hostname=hosts[1], source="mpi", rank_hosts=hosts)
    return len(json.dumps(cluster_spec(info), separators=(",", ":")))


def run_bench(reps: int) -> tuple[str, list[Figure]]:
    rows, detect_cpu = [], []
    for n in SIZES:
        wall, ranks = once(n)
        ok = len(ranks) == n

        def col(phase: str, key: str = "cpu") -> list[float]:
            return [r[key].get(phase, 0.0) * 1000 for r in ranks]

        own = [d + a for d, a in zip(col("detect"), col("agree"))]
        detect_cpu.append(statistics.median(own))
        rows.append([n, f"{wall:.1f} s" + ("" if ok else f" ({len(ranks)} of {n} ranks reported)"),
                     f"{statistics.median(own):.1f}", f"{max(own):.1f}",
                     f"{statistics.median(col('agree', 'phases')):.0f}", f"{max(col('agree', 'phases')):.0f}",
                     f"{statistics.median(col('mpi_init')):.0f}"])
    paper = [[p, f"{contract_bytes(p):,}", "yes" if contract_bytes(p) < 131071 - 13 else "**no**: left out"]
             for p in PAPER]
    growth = detect_cpu[-1] / detect_cpu[0] if detect_cpu[0] else float("inf")
    text = ("## 7. Scale: derivation and agreement at 16-128 ranks (oversubscribed), and on paper\n\n"
            "`mpirun -n P --oversubscribe python -m slurmtorch.bootstrap --no-init noop.py` with "
            "SLURMTORCH_TIMINGS, one launch each; ours = detect + agree, CPU per rank (ms).\n\n"
            + table(["ranks", "launch to exit (wall)", "ours CPU median", "ours CPU max", "agree wall median (ms)",
                     "agree wall max (ms)", "MPI_Init CPU median (ms)"], rows)
            + f"\n\nOur per-rank CPU from {SIZES[0]} to {SIZES[-1]} ranks: {growth:.2f}x. What grows with P: "
            "the allgather (P records of a host name, a leader rank and rank 0's address: O(P) bytes to every "
            "rank, O(log P) rounds in Open MPI's allgather), building the world from them (O(P) per rank) and "
            "the contract maps, which list every rank (O(P) bytes per rank):\n\n"
            + table(["ranks", "CLUSTER_SPEC bytes", "fits one environment string (128 KiB)"], paper)
            + "\n\nPast about 7,000 ranks (18 bytes a rank with 5-digit node names) a map no longer fits what execve lets one variable hold; the bootstrap "
            "leaves it out and names it in `SLURMTORCH_OMITTED` rather than break every program a rank starts. "
            "Nothing else per rank grows with P; MPI_Init's own cost does (Open MPI's wire-up), and under srun "
            "(`--from slurm`) there is no MPI_Init or allgather at all: each rank reads its place from srun's "
            "variables, O(nodes) to expand the node list.")
    return text, [Figure(f"bootstrap own CPU per rank, {SIZES[-1]} / {SIZES[0]} ranks", growth)]
