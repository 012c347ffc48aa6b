"""How the ranks start: the launcher, the torch backend and the containers they run in.

The site sets the defaults (its launcher, its container); the options may change the
launcher, the backend, the image and runtime, and give a role job's roles their own
images. A pyxis container is a flag of `srun`; podman-hpc and shifter start a rank as a command
under srun: all three run under the srun and torchrun launchers (torchrun's agents start
with srun), never under mpirun.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypedDict

from slurmtorch import initargs, protocol, shell
from slurmtorch.backends import BACKENDS
from slurmtorch.errors import ShellSafetyError, SpecError
from slurmtorch.localrank import LOCAL_RANK_FORMS
from slurmtorch.roles import ROLE_ORDER, RoleLayout
from slurmtorch.options import CONTAINER_RUNTIMES, LAUNCHERS, Options
from slurmtorch.submit.sites.model import (BATCH_MPIRUN_FLAVOURS, SRUN_RUNTIMES, Container, NodeType, Partition,
                                           Site)


def choose_launcher(site: Site, o: Options, preset: dict[str, Any]) -> tuple[str, str]:
    """(launcher, backend as asked: `auto` is settled by `backend_for` once the GPUs are known)."""
    launcher = o.pick(preset, "launcher") or site.launcher
    if launcher not in LAUNCHERS:
        raise SpecError(f"unknown launcher {launcher!r}", tip=f"valid launchers: {', '.join(LAUNCHERS)}")
    backend = o.pick(preset, "backend") or "auto"
    if backend not in BACKENDS:
        raise SpecError(f"unknown backend {backend!r}", tip=f"valid backends: {', '.join(BACKENDS)}")
    if launcher == "mpirun" and o.kind == "sbatch" and site.mpirun.flavour not in BATCH_MPIRUN_FLAVOURS:
        raise SpecError(f"site {site.name!r} launches with {site.mpirun.flavour}'s mpiexec (its mpirun: block), "
                        "which is for slurmtorch mpirun on hosts without Slurm; a batch job's mpirun is Open MPI's",
                        tip="use --launcher srun in a Slurm job, or slurmtorch mpirun --hostfile on the hosts")
    box = preset.get("container") or site.container
    if box is not None and box.runtime in SRUN_RUNTIMES and launcher == "mpirun":
        where = f"site {site.name!r}"
        if preset.get("container"):
            where = f"preset {o.preset or 'default'!r} of {where}"
        raise SpecError(f"{where} runs ranks in a {box.runtime} container, which starts under srun",
                        tip="use --launcher srun (or torchrun)")
    return launcher, backend


def gpu_order_env(site: Site, kind: str, node: NodeType) -> dict[str, str]:
    """The rank side's GPU order (bootstrap.device, bootstrap.placement): reverse where the site
    says so, for `slurmtorch mpirun` in its `mpirun:` block (ALCF Polaris: set_affinity_gpu_polaris.sh,
    "need to assign GPUs in reverse order due to topology"), else for any job on the node type's
    board (its `gpu_order`: GPU 0 by the last NUMA node, where srun binds rank 0 to the first
    cores); else nothing."""
    if kind == "mpirun" and site.mpirun.gpu_order != "natural":
        return {protocol.GPU_ORDER: site.mpirun.gpu_order}
    if node.gpu_order not in (None, "natural"):
        return {protocol.GPU_ORDER: node.gpu_order}
    return {}


def placement_env(o, preset: dict[str, Any], site: Site, env: Mapping[str, str]) -> dict[str, str]:
    """SLURMTORCH_PLACEMENT for the ranks (bootstrap.placement): --placement, else the preset's,
    else the site's `placement`; `auto` is the ranks' own default and exports nothing, and so
    does a job whose own environment (`env`, its --env) already sets it."""
    value = o.pick(preset, "placement", site.placement)
    if value not in protocol.PLACEMENTS:
        raise SpecError(f"--placement {value!r} is not one of {', '.join(protocol.PLACEMENTS)}",
                        tip="auto (CPUs nearest each rank's GPU), share (a fair share each), none (leave them)")
    return {} if value == "auto" or protocol.PLACEMENT in env else {protocol.PLACEMENT: value}


def srun_mpi_for(site: Site, node: NodeType, partition: Partition, preset: dict[str, Any]) -> str:
    """srun's --mpi for the rank step: the preset's, else the partition's, else the node type's,
    else the site's `srun_mpi` (`none`: no --mpi at all). CSCS launches its uenv jobs with plain
    srun and its Container Engine jobs with --mpi=pmix (docs/software/ml/pytorch.md,
    docs/software/alps-extended-images.md in eth-cscs/cscs-docs)."""
    return preset.get("srun_mpi") or partition.srun_mpi or node.srun_mpi or site.srun_mpi


def check_edf_env(container: Container | None, env_paths: tuple, env: Mapping[str, str] | None = None) -> None:
    """A cscs-ce job's environment goes into its EDF as literal values (the Container Engine
    gives the image's value of a variable precedence over the host's, and expands ${NAME} from
    the image's first: docs/software/container-engine/edf.md in eth-cscs/cscs-docs); a path
    composed over the job's own value at run time, or a value expanded then, cannot be written there."""
    later = [name for name, value in (env or {}).items() if isinstance(value, shell.JobTimeWord)]
    if container is not None and container.runtime == "cscs-ce" and later:
        raise SpecError(f"cscs-ce: {', '.join(later)} is expanded when the job runs ({{expand: ...}}), which "
                        "the Container Engine's EDF cannot carry", tip="give the whole value literally in env:")
    if container is not None and container.runtime == "cscs-ce" and env_paths:
        names = ", ".join(name for name, _, _ in env_paths)
        raise SpecError(f"cscs-ce: {names} is composed over the job's own value (prepend_path/append_path), "
                        "which the Container Engine's EDF cannot carry",
                        tip="give the whole value in env:, or put the folders in the image")


def local_rank_form(o: Options, preset: dict[str, Any]) -> str | None:
    """--local-rank-arg (else the preset's): the spelling of the argument each rank gets, or None."""
    form = o.pick(preset, "local_rank_arg")
    if form is not None and form not in LOCAL_RANK_FORMS:
        raise SpecError(f"--local-rank-arg {form!r} is not one of {', '.join(LOCAL_RANK_FORMS)}",
                        tip="local_rank for --local_rank=N (DeepSpeed's launcher), local-rank for --local-rank=N")
    return form


def init_args_form(o: Options, tasks_per_node: int | None) -> str | None:
    """--init-args, checked here as the ranks will read it (`initargs`), or None. The per-node
    shape with more than one task on a node (`tasks_per_node`, the most any node runs; None:
    not known here) is refused now, not by every rank once the job has waited its turn."""
    if o.init_args is None:
        return None
    try:
        shape, _ = initargs.parse(o.init_args)
    except initargs.InitArgsError as exc:
        raise SpecError(str(exc), tip=initargs.TIP) from None
    if shape == "node" and tasks_per_node is not None and tasks_per_node > 1:
        raise SpecError(f"--init-args={o.init_args} gives each task its node's rank and the node count, but "
                        f"{tasks_per_node} tasks run on a node: each would claim the same rank",
                        tip="one task per node (" + ("--ntasks-per-node 1" if o.kind == "sbatch" else
                                                     "-n 1 a host, with --hostfile") +
                            "; the script starts its own workers, as imagenet's --multiprocessing-distributed "
                            "does), or --init-args=rank")
    return o.init_args


class ScriptConventions(TypedDict):
    """How the ranks tell the script its world beyond the environment (JobSpec fields)."""

    local_rank_arg: str | None
    init_args: str | None
    cluster_spec: str | None
    no_init: bool


def script_conventions(o: Options, preset: dict[str, Any], tasks_per_node: int | None) -> ScriptConventions:
    """The --local_rank argument, --init-args, CLUSTER_SPEC's shape, each checked, and whether
    the script makes the process group itself (--no-init); `tasks_per_node`: the most tasks any
    node runs, None where that is not known here."""
    return ScriptConventions(local_rank_arg=local_rank_form(o, preset),
                             init_args=init_args_form(o, tasks_per_node),
                             cluster_spec=cluster_spec_shape(o), no_init=bool(o.no_init))


def cluster_spec_shape(o: Options) -> str | None:
    """--cluster-spec, checked (protocol.CLUSTER_SPEC_SHAPES), or None for the default."""
    if o.cluster_spec is not None and o.cluster_spec not in protocol.CLUSTER_SPEC_SHAPES:
        raise SpecError(f"--cluster-spec {o.cluster_spec!r} is not one of {', '.join(protocol.CLUSTER_SPEC_SHAPES)}",
                        tip="vertex for Vertex AI's workerpool0..3, ai-platform (the default) for master/worker")
    return o.cluster_spec


def backend_for(backend: str, gpus_per_node: int) -> str:
    """NCCL when the ranks own GPUs; Gloo otherwise. `mpi` is only ever chosen explicitly."""
    if backend == "auto":
        return "nccl" if gpus_per_node > 0 else "gloo"
    return backend


def resolve_containers(site: Site, o: Options, roles: RoleLayout | None, launcher: str,
                       preset: dict[str, Any] | None = None
                       ) -> tuple[Container | None, tuple[tuple[str, Container | None], ...]]:
    """(every rank's container, each role's): the preset's, else the site's, or
    --container-image/--container-runtime; --role-image, else the site's image for that role, per role."""
    role_images = parse_role_images(o.role_images)
    base = (preset or {}).get("container") or site.container
    runtime = o.container_runtime or (base.runtime if base else "pyxis")
    if runtime not in CONTAINER_RUNTIMES:
        raise SpecError(f"unknown --container-runtime {runtime!r}", tip=f"use one of {', '.join(CONTAINER_RUNTIMES)}")
    if o.container_image is not None:
        shell.directive_value(o.container_image, what="--container-image")
        if runtime == "apptainer" and "$" in o.container_image:  # $NAME expands on the node; no other `$`
            try:
                shell.with_variables(o.container_image, what="--container-image")
            except ShellSafetyError as exc:
                raise SpecError(exc.message, tip="name a variable as $NAME or ${NAME}, e.g. "
                                                 "'$SINGULARITY_ALLOWED_DIR/x.sif' (quoted)") from None
        base = _container(base, runtime, o.container_image)
    elif base is not None and o.container_runtime is not None:
        base = _container(base, runtime, base.image)
    if role_images and not roles:
        raise SpecError("--role-image needs --role", tip="use --container-image for a job without roles")
    role_containers: list[tuple[str, Container | None]] = []
    if roles:
        site_roles = dict(base.roles if base else ())
        for role, _ in roles.roles:
            image = role_images.get(role) or site_roles.get(role)
            role_containers.append((role, _container(base, runtime, image) if image is not None else base))
    for unknown in set(role_images) - {r for r, _ in (roles.roles if roles else ())}:
        raise SpecError(f"--role-image {unknown}=...: the job has no {unknown} role")
    runtimes = {c.runtime for c in [base, *(c for _, c in role_containers)] if c is not None}
    if roles and "cscs-ce" in runtimes:
        raise SpecError("cscs-ce containers run jobs of one step; a role job's steps each need their own EDF",
                        tip="use pyxis for a role job, or leave --role out")
    if runtimes & set(SRUN_RUNTIMES) and launcher == "mpirun":
        raise SpecError(f"{sorted(runtimes & set(SRUN_RUNTIMES))[0]} containers start under srun, not mpirun",
                        tip="use --launcher srun")
    return base, tuple(role_containers)


def parse_role_images(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """`ROLE=IMAGE` strings -> {role: image}; roles by name, images one line."""
    out: dict[str, str] = {}
    for item in items:
        role, sep, image = str(item).partition("=")
        if not sep or not image:
            raise SpecError(f"malformed --role-image {item!r}: expected ROLE=IMAGE",
                            tip="e.g. --role-image ps=nvcr.io/org/ps:1.0")
        if role not in ROLE_ORDER:
            raise SpecError(f"unknown role {role!r} in --role-image {item!r}", tip=f"roles: {', '.join(ROLE_ORDER)}")
        shell.directive_value(image, what="--role-image")  # no newline/NUL
        out[role] = image
    return out


def _container(base: Container | None, runtime: str, image: str) -> Container:
    """A container of `image` under `runtime` that keeps the site's mounts and interpreter (and,
    under the same runtime, its options and EDF entries)."""
    if base is not None and base.runtime != runtime:  # the site's runtime options are not this runtime's
        return Container(runtime=runtime, image=image, mounts=base.mounts, python=base.python)
    if base is None:
        return Container(runtime=runtime, image=image)
    return replace(base, image=image, roles=())
