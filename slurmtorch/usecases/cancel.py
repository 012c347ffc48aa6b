"""`cancel`: jobs of this user's that are still queued or running, cancelled.

Each job is asked of Slurm first (`scancel.cancel`): an unknown job, someone else's, or one
that has already ended is its own error line, and the others are still cancelled; the exit
code says whether any was refused.
"""

from __future__ import annotations

from slurmtorch.errors import SubmitError
from slurmtorch.submit.edge import scancel


def cancel(job_ids: list[str]) -> tuple[list[str], int]:
    """Each job cancelled, or its error: the lines to say (on stderr) and the exit code."""
    lines, failed = [], 0
    for j in job_ids:
        try:
            before = scancel.cancel(j)
        except SubmitError as exc:
            lines.append(exc.render())
            failed += 1
            continue
        lines.append(f"job {j} cancelled (it was {before.state.lower()})")
    return lines, 1 if failed else 0
