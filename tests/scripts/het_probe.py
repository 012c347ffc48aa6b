"""Heterogeneous role job probe: this rank's contract, node and node type's variable as one
JSON line, then README's example (examples/train_ddp.py) run as `__main__` with the
arguments given, so the roles on both node types train it together."""

import json
import os
import runpy
import socket
import sys
from pathlib import Path

keys = ("RANK", "WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURMTORCH_ROLE",
        "SLURMTORCH_ROLE_INDEX", "SLURM_JOB_PARTITION", "TESTBED_NODE_TYPE", "TESTBED_FAT_JOB")
record = {k: os.environ.get(k) for k in keys}
record["host"] = socket.gethostname()
record["cluster_spec"] = json.loads(os.environ["CLUSTER_SPEC"])
print("HET " + json.dumps(record), flush=True)

example = Path(__file__).resolve().parent.parent.parent / "examples" / "train_ddp.py"
sys.argv = [str(example), *sys.argv[1:]]
runpy.run_path(str(example), run_name="__main__")
