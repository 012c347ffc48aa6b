"""A script that sets up its own group as torchtitan's `dist_utils.init_distributed` does
(pytorch/torchtitan, torchtitan/distributed/utils.py): process-group settings in the environment
first (TORCH_NCCL_ASYNC_ERROR_HANDLING=3 for flight-recorder dumps, the recorder's buffer and dump
file by torch 2.9's names), then init_process_group with its own backend and timeout. On CPU the
backend is gloo (torchtitan itself runs on GPUs only). Prints one `TITAN {json}` line per rank.
With --as-titan-today: returns early from its set-up when a group exists, as torchtitan's
`init_distributed` does today (only its own warning says so)."""

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

as_titan_today = "--as-titan-today" in sys.argv[1:]
dump = os.path.join(os.environ.get("TITAN_DUMP", "."), "comm_trace")
was_initialized = dist.is_initialized()
before = dist.distributed_c10d._get_default_group() if was_initialized else None
for name, value in (("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"), ("TORCH_FR_BUFFER_SIZE", "20000"),
                    ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"), ("TORCH_FR_DUMP_TEMP_FILE", f"{dump}/rank_")):
    os.environ[name] = value
if as_titan_today and was_initialized:
    print("titan: warning: torch.distributed is already initialized, skipping its set-up", flush=True)
else:
    dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=300))
value = torch.tensor([1.0])
dist.all_reduce(value)
group = dist.distributed_c10d._get_default_group()
print("TITAN " + json.dumps({
    "rank": dist.get_rank(), "sum": value.item(), "replaced": was_initialized and group is not before,
    "timeout": group._get_backend(torch.device("cpu")).options._timeout.total_seconds(),
    "fr_buffer": os.environ["TORCH_FR_BUFFER_SIZE"], "async": os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"]}),
    flush=True)
