"""`--max-restarts`, `--spare-nodes`, `--hang-timeout`, `--replace-straggler`: checked against the job before rendering.

A job that restarts itself runs its srun step under the restart supervisor
(`supervisor.py`) with `--nodes` of the job's nodes, holding `--spare-nodes` more to
replace a failed one at once. Refused here, with what would work: the options without
--max-restarts, a launcher other than srun (torchrun restarts in place with its own
--max-restarts; the supervisor runs srun steps), jobs in a container (the supervisor runs beside the ranks, on the node, and needs slurmtorch there),
more nodes than the partition allows, and a hang timeout the process-group timeout would
beat anyway; a straggler's node replaced with no spare to replace it by.

A role job's spares: --spare-nodes, shared by every role when the roles are one allocation
(their nodes are alike), plus each role's own `spare=N` (`--role worker=2:spare=1`). Roles
on different resources (a heterogeneous job) hold their own spares only: a failed worker's
node can be replaced only by a node of the worker's kind.
"""

from __future__ import annotations

from typing import NamedTuple

from slurmtorch.errors import SpecError
from slurmtorch.options import Options, positive


class Recovery(NamedTuple):
    """What the restart supervisor is told; max_restarts None: no supervisor."""

    max_restarts: int | None = None
    spare_nodes: int = 0
    hang_timeout: int | None = None
    replace_straggler: float | None = None


def resolve_restarts(o: Options, launcher: str, hetjob: bool, in_container: bool, nodes: int, max_nodes: int,
                     partition: str, timeout: int, role_spares: int = 0) -> Recovery:
    """`role_spares`: what the roles' `spare=N` add up to (hetjob.RoleAsks.spares)."""
    if o.max_restarts is None:
        if role_spares:
            raise SpecError("a role's spare=N needs --max-restarts", tip="e.g. --max-restarts 3 --role worker=2:spare=1")
        for flag, value in (("--spare-nodes", o.spare_nodes), ("--hang-timeout", o.hang_timeout),
                            ("--replace-straggler", o.replace_straggler)):
            if value is not None and not (o.ray and flag == "--hang-timeout"):
                raise SpecError(f"{flag} needs --max-restarts", tip=f"e.g. --max-restarts 3 {flag} {value}")
        # --ray: how long its cluster may take to form (submit/launch/raycluster.py).
        return Recovery(hang_timeout=positive("--hang-timeout", o.hang_timeout) if o.hang_timeout is not None else None)
    restarts = positive("--max-restarts", o.max_restarts, tip="leave it out for a job that ends at its first failure")
    if o.kind != "sbatch":
        raise SpecError("--max-restarts needs slurmtorch sbatch (restarts run on a Slurm allocation)")
    if launcher != "srun":
        raise SpecError(f"--max-restarts restarts srun steps; launcher {launcher!r} cannot",
                        tip="use --launcher srun (torchrun restarts in place, on the same nodes, with its own "
                            "--max-restarts)")
    if in_container:
        raise SpecError("--max-restarts cannot supervise ranks in a container: the supervisor runs on the node "
                        "beside them and needs slurmtorch there",
                        tip="leave --max-restarts out, or run without a container")
    if hetjob and o.spare_nodes is not None:
        raise SpecError("--spare-nodes: roles on different resources (a heterogeneous job) hold spares of their own "
                        "kind, each role its own", tip="e.g. --role worker=2:partition=fat:spare=1")
    spare = o.spare_nodes if o.spare_nodes is not None else 0
    if spare < 0:
        raise SpecError(f"--spare-nodes must not be negative, got {spare}")
    spare += role_spares
    if nodes + spare > max_nodes and not hetjob:  # a heterogeneous job's: hetjob.components, per partition
        raise SpecError(f"{nodes} nodes + {spare} spare need {nodes + spare}, but partition {partition!r} allows "
                        f"at most {max_nodes}", tip=f"use --spare-nodes {max(0, max_nodes - nodes)} or fewer nodes")
    hang = None
    if o.hang_timeout is not None:
        hang = positive("--hang-timeout", o.hang_timeout)
        if hang >= timeout:
            raise SpecError(f"--hang-timeout {hang} is not shorter than the process-group --timeout {timeout}: "
                            "the timeout would end a hung step first",
                            tip=f"use --hang-timeout {max(1, timeout // 4)}, or a longer --timeout")
    straggler = o.replace_straggler
    if straggler is not None:
        if not 0 < straggler < 10:
            raise SpecError(f"--replace-straggler is the margin over the median, e.g. 0.2 for 20%; got {straggler:g}")
        if not spare:
            raise SpecError("--replace-straggler replaces a slow rank's node by a spare, and the job has none",
                            tip=f"add --spare-nodes 1 (or set SLURMTORCH_STRAGGLER={straggler:g} to have the slow "
                                "rank named only)")
    return Recovery(restarts, spare, hang, straggler)
