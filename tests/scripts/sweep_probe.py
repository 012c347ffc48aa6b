"""Sweep probe: print this rank's trial, parameters and argv as JSON; fail on request."""
import json
import os
import sys

spec = json.loads(os.environ["CLUSTER_SPEC"])
print(json.dumps({"trial": os.environ.get("SLURMTORCH_TRIAL"), "array_task": os.environ.get("SLURM_ARRAY_TASK_ID"),
                  "spec_trial": spec["task"].get("trial"), "rank": os.environ.get("RANK"),
                  "world": os.environ.get("WORLD_SIZE"), "argv": sys.argv[1:],
                  "params": json.loads(os.environ["SLURMTORCH_PARAMS"]),
                  "env": {k: v for k, v in os.environ.items() if k.startswith("SLURMTORCH_SWEEP_")}}), flush=True)
sys.exit(int(os.environ.get("FAIL_TRIAL", "-1") == os.environ.get("SLURMTORCH_TRIAL")))
