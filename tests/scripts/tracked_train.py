"""One run in every tracker across a restart and a requeue: `tracked_train.py OUT STEPS`.

What the users' guide tells a script to do, run for real with the trackers offline under OUT:
wandb.init() with no id (the bootstrap set WANDB_RUN_ID and WANDB_RESUME), MLflow's run found
again by its `slurmtorch.run_id` tag (file store), TensorBoard's log folder named by the run
id and purged from the resumed step. One rank logs a loss per step to all three and saves
the next step to checkpoint_dir(). Start 0 fails at step 3 (a bug: --max-restarts retries it
once), start 1 stops logging at step 6 and waits for the test to requeue the job, start 2
ends at STEPS.
"""
import os
import sys
import time

out, steps = sys.argv[1], int(sys.argv[2])
os.environ.update(WANDB_MODE="offline", WANDB_DIR=out, WANDB_SILENT="true", WANDB_CONFIG_DIR=f"{out}/wandb-config",
                  WANDB_CACHE_DIR=f"{out}/wandb-cache", MLFLOW_TRACKING_URI=f"file:{out}/mlruns",
                  MLFLOW_ALLOW_FILE_STORE="true")  # MLflow 3 asks for a database unless told

import mlflow  # noqa: E402
import wandb  # noqa: E402
from torch.utils.tensorboard import SummaryWriter  # noqa: E402

import slurmtorch  # noqa: E402

start, run_id = slurmtorch.restart_count(), slurmtorch.run_id()
state = slurmtorch.checkpoint_dir() / "next-step"
first = int(state.read_text()) if start > 0 and state.exists() else 0
stop = {0: 3, 1: 6}.get(start, steps)
found = mlflow.search_runs(filter_string=f"tags.`slurmtorch.run_id` = '{run_id}'", output_format="list",
                           search_all_experiments=True)
with wandb.init(project="slurmtorch-test") as run, \
        mlflow.start_run(run_id=found[0].info.run_id if found else None, tags={"slurmtorch.run_id": run_id}) as ml, \
        SummaryWriter(log_dir=os.path.join(out, "tensorboard", run_id), purge_step=first if start else None) as tb:
    print(f"start {start} run {os.environ['SLURMTORCH_RUN_ID']} from step {first} wandb {run.id} "
          f"mlflow {ml.info.run_id}", flush=True)
    for step in range(first, stop):
        loss = 1.0 / (step + 1)
        run.log({"loss": loss}, step=step)
        mlflow.log_metric("loss", loss, step=step)
        tb.add_scalar("loss", loss, step)
        state.write_text(str(step + 1))
if start == 0:
    raise ValueError(f"a bug at step {stop}")
if start == 1:
    print(f"waiting to be requeued at step {stop}", flush=True)
    time.sleep(600)
print(f"done at step {steps}", flush=True)
