"""Role job probe: print this rank's contracts as JSON; training ranks all_reduce."""
import json
import os
import socket
import sys

import torch.distributed as dist

from printed import wait_until_printed
from slurmtorch.roles import TRAINING_ROLES, parse_roles

out = {k: os.environ.get(k) for k in ("SLURMTORCH_ROLE", "SLURMTORCH_ROLE_INDEX", "RANK", "WORLD_SIZE",
                                      "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                                      "SLURMTORCH_TRIAL", "SLURMTORCH_PARAMS")}
out["host"] = socket.gethostname()
out["argv"] = sys.argv[1:]
out["cluster_spec"] = json.loads(os.environ["CLUSTER_SPEC"])
out["tf_config"] = json.loads(os.environ["TF_CONFIG"])

out["in_group"] = dist.is_initialized()
if dist.is_initialized():
    import torch

    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    out["all_reduce"] = int(t.item())
    out["group_size"] = dist.get_world_size()
print(json.dumps(out), flush=True)

# A ps/evaluator rank serves until the training roles end, then is stopped: if it were still
# importing torch then, it would never print. So training ranks end only once every other
# role's rank has printed its line, as a real trainer ends only once its parameter servers answered.
if out["SLURMTORCH_ROLE"] in TRAINING_ROLES:
    layout = parse_roles(os.environ["SLURMTORCH_ROLES"])
    wait_until_printed([layout.offset(role) + i for role, _ in layout.roles if role not in TRAINING_ROLES
                        for i in range(layout.ranks(role))])
