"""The torch.distributed backends a job may ask for: one list for the CLI, the site schema
and the bootstrap. `auto` is nccl where CUDA and NCCL are there, else gloo (decided in the rank)."""

BACKENDS = ("auto", "nccl", "gloo", "mpi")
