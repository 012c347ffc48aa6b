"""The floor: the least an mpi4py bootstrap must do before a script can all_reduce.

    mpirun -n N python benchmarks/minimal_bootstrap.py SCRIPT

MPI_Init, rank 0 binds a free port and broadcasts host:port, set the env:// variables,
init_process_group(gloo, or $PROBE_BACKEND), run SCRIPT as __main__. No checks, no contracts.
"""
import os
import runpy
import socket
import sys

os.environ.setdefault("OMPI_MCA_btl", "^ofi,uct")
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
local = comm.Split_type(MPI.COMM_TYPE_SHARED)
if comm.rank == 0:
    s = socket.socket()
    s.bind(("", 0))
    addr = (socket.gethostbyname(socket.gethostname()), s.getsockname()[1])
    s.close()
else:
    addr = None
addr = comm.bcast(addr, root=0)
os.environ.update(MASTER_ADDR=addr[0], MASTER_PORT=str(addr[1]), RANK=str(comm.rank),
                  WORLD_SIZE=str(comm.size), LOCAL_RANK=str(local.rank), LOCAL_WORLD_SIZE=str(local.size))
import torch.distributed as dist  # noqa: E402

backend = os.environ.get("PROBE_BACKEND", "gloo")
if backend == "nccl":
    import torch  # noqa: E402

    torch.cuda.set_device(local.rank)
dist.init_process_group(backend)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
if dist.is_initialized():  # the probe may have torn it down already
    dist.destroy_process_group()
