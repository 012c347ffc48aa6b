"""Each rank's CPU binding against its share of its node (pure).

A launcher that binds a rank to fewer CPUs than the job holds for it (Open MPI 5's
default of one core per rank, an srun step without -c) leaves the rest of the node idle
and the rank's threads on one core: nothing fails, training is just slow. The share is
the job's CPUs on the rank's node (SLURM_JOB_CPUS_PER_NODE) over the ranks there, or the
host's CPUs outside Slurm.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from slurmtorch.bootstrap.placement import cpu_list, parse_cpu_list
from slurmtorch.doctor.checks import OK, WARN, Check

__all__ = ["cpu_list", "job_cpus_per_node", "cpu_share", "check_binding", "check_placement"]

_RUN = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


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


def check_placement(records: Sequence) -> list[Check]:
    """One warn line per rank running on no CPU of its GPU's NUMA node (every host-device copy
    crosses the socket link), else one ok line; nothing where no rank has a GPU it can name."""
    placed = [r for r in sorted(records, key=lambda r: r.rank) if r.gpu != "-" and r.gpu_numa != "-"]
    far = [r for r in placed if r.far]
    if not placed:
        return []
    if not far:
        return [Check(OK, "placement: every rank runs on its GPU's NUMA node")]
    return [Check(WARN, f"placement: rank {r.rank} on {r.host} runs on CPUs {r.cpus}, none of them on its "
                        f"GPU {r.gpu}'s NUMA node {r.gpu_numa}",
                  "let slurmtorch place ranks (--placement auto, the default), or bind each rank beside its "
                  "GPU (srun --cpu-bind=map_ldom/mask_cpu, a site's srun_args)")
            for r in far]


def _count(cpus: str) -> int:
    return len(parse_cpu_list(cpus))
