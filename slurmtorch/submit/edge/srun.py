"""srun --overlap on a running job's node: the stacks signal to the pids that the job-wide
one missed (scancel.send_stacks_signal)."""

from __future__ import annotations

import signal

from slurmtorch import protocol
from slurmtorch.submit.edge.runner import Runner, run


# `signal_pids`' step (sh -c; $1 the job id, then pids): a pid is signalled only where its process
# is the job's (SLURM_JOB_ID in its environment, which every process started in the job inherits).
_KILL_IF_THE_JOBS = ('job=$1; shift; for pid; do '
                     'tr "\\0" "\\n" < "/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_JOB_ID=$job" '
                     '&& kill -{number} "$pid" 2>/dev/null; done; exit 0')


def signal_pids(job_id: str, pids: dict[str, list[int]], runner: Runner = run) -> None:
    """Send the stacks signal to these processes on these nodes of a running job, by pid: a
    one-task step on each node (`srun --overlap`, which shares the job's CPUs with the
    running step) that signals the job's own processes only (_KILL_IF_THE_JOBS). For ranks
    the job-wide signal missed: mpirun's ranks on the batch node (scancel --batch reaches
    the batch shell only, and the ranks are sessions of their own, out of its process
    group; testbed, Slurm 22.05). A rank gone meanwhile is no error."""
    number = int(getattr(signal, f"SIG{protocol.STACKS_SIGNAL}"))
    if "_" in job_id:  # srun's --jobid takes no array task ("Invalid numeric value"): its own id
        job_id = runner(["squeue", "-h", "-j", job_id, "-o", "%A"], timeout=20).stdout.strip() or job_id
    for host, ids in sorted(pids.items()):
        runner(["srun", "--overlap", f"--jobid={job_id}", f"--nodelist={host}", "--nodes=1", "--ntasks=1",
                "--quiet", "sh", "-c", _KILL_IF_THE_JOBS.format(number=number), "sh", str(job_id), *map(str, ids)],
               timeout=30, check=False)
