"""Sweep probe: print this rank's trial, parameters and argv as JSON; fail on request."""
import json
import os
import sys

from printed import wait_until_printed

spec = json.loads(os.environ["CLUSTER_SPEC"])
print(json.dumps({"trial": os.environ.get("SLURMTORCH_TRIAL"), "array_task": os.environ.get("SLURM_ARRAY_TASK_ID"),
                  "spec_trial": spec["task"].get("trial"), "rank": os.environ.get("RANK"),
                  "world": os.environ.get("WORLD_SIZE"), "argv": sys.argv[1:],
                  "params": json.loads(os.environ["SLURMTORCH_PARAMS"]),
                  "env": {k: v for k, v in os.environ.items() if k.startswith("SLURMTORCH_SWEEP_")},
                  "run_id": os.environ.get("SLURMTORCH_RUN_ID"), "wandb_id": os.environ.get("WANDB_RUN_ID")}),
      flush=True)
failing = os.environ.get("FAIL_TRIAL", "-1") == os.environ.get("SLURMTORCH_TRIAL")
if failing:
    # A failing rank ends its trial's step (srun --kill-on-bad-exit): it waits until every
    # rank of the trial has printed, or a peer still starting would be killed with nothing out.
    wait_until_printed(range(int(os.environ["WORLD_SIZE"])))
sys.exit(int(failing))
