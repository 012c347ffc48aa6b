"""One run across restarts: the job's run id, and the trackers' resume variables set from it.

To whoever reads a job's metrics every start of it is one run: a `--max-restarts` restart in
the allocation, a requeue (preemption, `scontrol requeue`), each trial of an array its own
run. The bootstrap exports the job's run id as SLURMTORCH_RUN_ID and, where that is safe and
the user has not chosen, the trackers' own variables that make them resume that run
(docs/users-guide.md, "One run across restarts").

The id is `<job>-<token>`. `<job>` is the job folder's name, Slurm's job id (`1234`; an array
task `1234_3`, as Slurm writes it), so a tracker's run says which job it was. `<token>` is
random, written once at submission into the job folder (protocol.RUN_TOKEN), because a job id
alone is not unique: ids count from 1 again when a cluster's state is reset, and two clusters
logging into one tracker project count through the same numbers. A restart and a requeue
keep the job's id and its folder, so they keep the run id; nothing in it comes from what
changes between starts (nodes, time, SLURM_RESTART_COUNT). A job without a token (submitted
by an older slurmtorch, or started by a launcher of your own) has no run id: one invented
here would differ between starts, the very thing it must not do.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from slurmtorch import protocol

__all__ = ["run_id", "compose", "read_token", "run_env", "apply"]

_TOKEN_RE = re.compile(r"[0-9a-f]{8,32}")
_JOB_RE = re.compile(r"[0-9]+")
_TRIAL_RE = re.compile(r"trial-([0-9]+)")

# Weights & Biases reads WANDB_RUN_ID and WANDB_RESUME when wandb.init() is given no id or
# resume of its own (https://docs.coreweave.com/products/wandb/track/environment-variables).
# resume="allow" "resumes the run if the run ID exists, else initializes a new run with the
# specified ID" (https://docs.wandb.ai/guides/runs/resuming): right for the first start and
# for every later one. "must" fails the first start, "never" every restart, "auto" keys on
# a file in the script's folder, not on the id.
WANDB_RUN_ID, WANDB_RESUME, WANDB_SWEEP_ID = "WANDB_RUN_ID", "WANDB_RESUME", "WANDB_SWEEP_ID"
WANDB_RESUME_MODE = "allow"


def compose(job_dir: str, token: str) -> str | None:
    """`<job>-<token>` for a job folder (`.../1234`, a trial's `.../1234/trial-3`); None for a
    folder that is not a job's (pure)."""
    path = job_dir.rstrip("/")
    name, parent = os.path.basename(path), os.path.basename(os.path.dirname(path))
    trial = _TRIAL_RE.fullmatch(name)
    if trial and _JOB_RE.fullmatch(parent):
        return f"{parent}_{trial.group(1)}-{token}"
    if _JOB_RE.fullmatch(name):
        return f"{name}-{token}"
    return None


def read_token(job_dir: str) -> str | None:
    """The job's token: in its folder, or for an array trial in the array job's above it."""
    path = job_dir.rstrip("/")
    for folder in (path, os.path.dirname(path)):
        try:
            with open(os.path.join(folder, protocol.RUN_TOKEN), encoding="ascii", errors="replace") as f:
                token = f.read(64).strip()
        except OSError:
            continue
        return token if _TOKEN_RE.fullmatch(token) else None
    return None


def run_id(environ: Mapping[str, str] | None = None) -> str | None:
    """This job's run id: the same in every start of the job (restarts in the allocation,
    requeues), an array trial's its own, unlike any other job's; None outside a job that
    slurmtorch submitted. Under the bootstrap it is also $SLURMTORCH_RUN_ID."""
    environ = os.environ if environ is None else environ
    job_dir = str(environ.get(protocol.JOB_DIR, "") or "").strip()
    if not job_dir:
        return None
    token = read_token(job_dir)
    return compose(job_dir, token) if token else None


def _inherited(value: str, parent: str) -> bool:
    """Whether a tracker id is one a parent slurmtorch job set (this job was submitted from
    inside one: sbatch brings the submitting rank's environment along)."""
    return bool(parent) and (value == parent or value.startswith(f"{parent}-rank"))


def run_env(run: str | None, job_rank: int, environ: Mapping[str, str]) -> dict[str, str | None]:
    """The variables to set (a value) or remove (None) for this rank (pure).

    SLURMTORCH_RUN_ID always follows this job (removed when it has none: a value inherited
    from a parent job names another run). wandb: WANDB_RUN_ID (job rank 0: the run id; rank R:
    `<run id>-rank<R>`, so a script that starts a run on every rank, which W&B's distributed
    guide allows (https://docs.wandb.ai/guides/track/log/distributed-training/), gets one
    continuous run per rank rather than every rank writing into one) and WANDB_RESUME=allow,
    only when the user set neither (or only WANDB_RESUME=allow) and no W&B sweep is naming its
    runs (WANDB_SWEEP_ID). Values a parent job set are replaced.

    MLflow and TensorBoard get nothing; the users' guide shows their recipes. MLFLOW_RUN_ID
    makes start_run() resume "the run with the specified UUID", one MLflow made
    (https://mlflow.org/docs/2.20.3/_modules/mlflow/tracking/fluent.html reads
    it); any other id fails every start (mlflow-skinny 3.17: `Run '...' not found`).
    TensorBoard's SummaryWriter takes its folder as an argument, default
    `runs/CURRENT_DATETIME_HOSTNAME`, new each start (https://docs.pytorch.org/docs/stable/tensorboard.html).
    """
    parent = str(environ.get(protocol.RUN_ID, "") or "")
    env: dict[str, str | None] = {}
    wandb_id, resume = environ.get(WANDB_RUN_ID), environ.get(WANDB_RESUME)
    if wandb_id and _inherited(wandb_id, parent):
        # A parent job's, set together: never this job's run, whether or not it has its own.
        env.update({WANDB_RUN_ID: None, WANDB_RESUME: None})
        wandb_id = resume = None
    if run is None:
        if parent:
            env[protocol.RUN_ID] = None
        return env
    env[protocol.RUN_ID] = run
    if not wandb_id and resume in (None, "", WANDB_RESUME_MODE) and not environ.get(WANDB_SWEEP_ID):
        env[WANDB_RUN_ID] = run if job_rank == 0 else f"{run}-rank{job_rank}"
        env[WANDB_RESUME] = WANDB_RESUME_MODE
    return env


def apply(run_vars: Mapping[str, str | None], environ=os.environ) -> None:
    """Set and remove what `run_env` said, in this process's environment."""
    for key, value in run_vars.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
