"""Each rank's CPU binding against its share of its node (pure).

A launcher that binds a rank to fewer CPUs than the job holds for it (Open MPI 5's
default of one core per rank, an srun step without -c) leaves the rest of the node idle
and the rank's threads on one core: nothing fails, training is just slow. The share is
the job's CPUs on the rank's node (SLURM_JOB_CPUS_PER_NODE) over the ranks there, or the
host's CPUs outside Slurm.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from slurmtorch.doctor.checks import OK, WARN, Check

_RUN = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def cpu_list(cpus: Iterable[int]) -> str:
    """CPU ids as the kernel's list format: [0, 1, 2, 5] -> "0-2,5"."""
    out: list[str] = []
    ids = sorted(set(cpus))
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def job_cpus_per_node(value: str) -> list[int]:
    """SLURM_JOB_CPUS_PER_NODE ("2(x3),1") as one count per node; [] if unreadable."""
    counts: list[int] = []
    for part in value.strip().split(","):
        m = _RUN.match(part.strip())
        if not m:
            return []
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def cpu_share(env: Mapping[str, str], node_index: int, ranks_on_node: int, host_cpus: int) -> int:
    """The CPUs a rank should have: its node's CPUs in the job (else the host's) over the
    ranks on that node, at least 1."""
    counts = job_cpus_per_node(env.get("SLURM_JOB_CPUS_PER_NODE", ""))
    node_cpus = counts[node_index] if 0 <= node_index < len(counts) else host_cpus
    return max(1, node_cpus // max(1, ranks_on_node))


def check_binding(records: Sequence) -> list[Check]:
    """One warn line per rank bound to fewer CPUs than its share, else one ok line.

    `records` carry rank, host, cpus (the list format) and share (RankRecord)."""
    short = [r for r in sorted(records, key=lambda r: r.rank) if r.cpus and _count(r.cpus) < r.share]
    if not short:
        shares = sorted({r.share for r in records})
        return [Check(OK, f"CPU binding: every rank has its share of its node "
                          f"({'/'.join(map(str, shares))} CPUs each)")]
    return [Check(WARN, f"CPU binding: rank {r.rank} on {r.host} may use CPUs {r.cpus} "
                        f"({_count(r.cpus)} of its share of {r.share})",
                  "give each rank its CPUs: srun --cpus-per-task, mpirun --map-by slot:PE=N "
                  "(slurmtorch's rendered scripts pass both)")
            for r in short]


def _count(cpus: str) -> int:
    total = 0
    for part in cpus.split(","):
        lo, _, hi = part.partition("-")
        total += int(hi or lo) - int(lo) + 1
    return total
