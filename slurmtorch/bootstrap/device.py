"""Pure: which backend and which GPU this rank uses, from what this torch build offers.

GPUs: with every GPU of the node visible a rank takes its LOCAL_RANK (counted from the
last GPU where the site's order is reverse, SLURMTORCH_GPU_ORDER); with one visible (Slurm's
--gpus-per-task) it takes that one.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurmtorch.errors import BootstrapError


def choose_backend(requested: str, cuda: bool, nccl: bool, gloo: bool, mpi: bool, version: str = "") -> str:
    """Pure: the backend to use, or one clear line about what this torch build lacks."""
    if requested == "auto":
        if cuda and nccl:
            return "nccl"
        if gloo:
            return "gloo"
        raise BootstrapError(f"torch {version} has neither NCCL with CUDA nor gloo",
                             tip="install a torch build with gloo")
    missing = missing_backend(requested, {"nccl": nccl, "gloo": gloo, "mpi": mpi}, version)
    if missing is not None:
        raise missing
    if requested == "nccl" and not cuda:
        raise BootstrapError("backend 'nccl' needs CUDA, but torch sees no GPU here",
                             tip="use --backend gloo (or auto) on CPU nodes")
    return requested


# Where `--backend` and the script's own `init_process_group(backend=...)` are both
# named: the fix is the same whichever of the two asked.
_MISSING_TIPS = {
    "nccl": "use gloo (--backend, or the script's init_process_group), or a CUDA build of torch on GPU nodes",
    "mpi": "use gloo or nccl (--backend, or the script's init_process_group); torch from PyPI has no MPI "
           "backend (build torch against your MPI)",
    "gloo": "use nccl or mpi (--backend, or the script's init_process_group), or a torch build with gloo",
}


def backend_names(backend: object) -> list[str]:
    """Pure: the backends a torch backend string names (`gloo`; `cpu:gloo,cuda:nccl` -> gloo, nccl)."""
    return [part.rpartition(":")[2].strip().lower() for part in str(backend).split(",") if part.strip()]


def missing_backend(backend: object, have: Mapping[str, bool], version: str = "") -> BootstrapError | None:
    """Pure: the one-line error for the first backend `backend` names that this build lacks
    (`have`: name -> built in), or None. Backends torch does not know here (a plugin's) pass."""
    for name in backend_names(backend):
        if name in have and not have[name]:
            return BootstrapError(f"backend {name!r} is not built into this torch ({version})",
                                  tip=_MISSING_TIPS[name])
    return None


# Variables through which a launcher (Slurm's --gpus-per-task / --gpu-bind, a site's
# wrapper) or the user gives each rank its own GPUs; CUDA's, then AMD's (ROCm). On AMD
# GPUs Slurm sets ROCR_VISIBLE_DEVICES (ROCr level: every ROCm program); HIP's and CUDA's
# apply on top of it, in HIP programs only
# (https://rocm.docs.amd.com/projects/HIP/en/latest/reference/env_variables.html).
VISIBLE_DEVICE_VARS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def visible_devices_var(hip: bool) -> str:
    """The variable a message should name: ROCm's on a ROCm build of torch (torch.version.hip)."""
    return "ROCR_VISIBLE_DEVICES" if hip else "CUDA_VISIBLE_DEVICES"


def bound_per_rank(env: Mapping[str, str]) -> bool:
    """Pure: whether this rank's GPUs were chosen for it (a visible-devices variable set).

    With one GPU visible to each of several ranks on a node, this tells "one GPU per rank,
    bound by the launcher" from "every rank sees the node's only GPU": without such a
    variable nobody narrowed the view, so the ranks share the device NCCL would refuse.
    """
    return any(env.get(key, "").strip() for key in VISIBLE_DEVICE_VARS)


def pick_device(local_rank: int, local_world_size: int, device_count: int, bound: bool = True,
                var: str = "CUDA_VISIBLE_DEVICES", order: str = "natural") -> int:
    """Pure: the GPU for this rank. All node GPUs visible -> LOCAL_RANK (order `reverse`: the
    node's last GPU first, device_count-1-LOCAL_RANK, as ALCF assigns Polaris's "in reverse
    order due to topology" in set_affinity_gpu_polaris.sh); one visible and bound to this rank
    (`bound_per_rank`: Slurm's --gpus-per-task gives one per task) -> 0. `var` is the
    visible-devices variable messages name (`visible_devices_var`)."""
    if device_count >= local_world_size:
        return device_count - 1 - local_rank if order == "reverse" else local_rank
    if device_count == 1 and bound:
        return 0
    shared = f"{var} unset, so every rank sees the same GPU" if device_count == 1 else \
        "NCCL needs one GPU per rank"
    raise BootstrapError(
        f"{local_world_size} ranks on this node but {device_count} visible GPU{'s' if device_count != 1 else ''} "
        f"({shared})",
        tip=f"ask for one GPU per rank (--gpus-per-node {local_world_size}, or --ntasks-per-node {device_count}), "
            f"give each rank its own {var} (srun --gpus-per-task=1), or use --backend gloo")


def rank_device(backend: str, local_rank: int, local_world_size: int, device_count: int,
                bound: bool = True, var: str = "CUDA_VISIBLE_DEVICES", order: str = "natural") -> int | None:
    """Pure: the GPU to make current in this rank, or None to leave CUDA alone.

    Whenever GPUs are visible, whatever the backend: a gloo job's CUDA tensors and
    libraries that read `torch.cuda.current_device()` would otherwise all pile onto
    GPU 0. Only NCCL (RCCL on AMD GPUs, the same backend) insists that the GPUs fit the
    ranks; gloo/mpi with more ranks than GPUs keep CUDA's default.
    """
    if device_count < 1:
        return None
    try:
        return pick_device(local_rank, local_world_size, device_count, bound, var, order)
    except BootstrapError:
        if backend == "nccl":
            raise
        return None
