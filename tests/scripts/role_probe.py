"""Role job probe: print this rank's contracts as JSON; training ranks all_reduce."""
import json
import os
import socket
import sys

out = {k: os.environ.get(k) for k in ("SLURMTORCH_ROLE", "SLURMTORCH_ROLE_INDEX", "RANK", "WORLD_SIZE",
                                      "MASTER_ADDR", "MASTER_PORT", "SLURMTORCH_TRIAL", "SLURMTORCH_PARAMS")}
out["host"] = socket.gethostname()
out["argv"] = sys.argv[1:]
out["cluster_spec"] = json.loads(os.environ["CLUSTER_SPEC"])
out["tf_config"] = json.loads(os.environ["TF_CONFIG"])
import torch.distributed as dist

out["in_group"] = dist.is_initialized()
if dist.is_initialized():
    import torch

    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    out["all_reduce"] = int(t.item())
    out["group_size"] = dist.get_world_size()
print(json.dumps(out), flush=True)
