"""What a site describes, as frozen values: node types, partitions, a container, the `Site`.

Built only by `site_rules.validate` (so every value here was checked once, on load);
everything downstream reads these and never the YAML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from slurmtorch.errors import SpecError
from slurmtorch.submit.sites.fabric import FULL, INTERFACES_ONLY, fabric_directives, fabric_env

# A site's `launcher:` and `container.runtime:` take what the CLI offers: LAUNCHERS and
# CONTAINER_RUNTIMES in options.py, which --help lists without loading this package.
# srun --mpi plugins (https://slurm.schedmd.com/mpi_guide.html); cray_shasta is Slurm's plugin
# for the Cray PMI that Cray MPICH uses on HPE Cray EX systems. A site may name another
# plugin its Slurm has (`srun --mpi=list`: pmix_v4, ...); `none` (NO_MPI_OPTION) writes no
# --mpi at all: plain `srun`, whose plugin is the cluster's MpiDefault (CSCS's uenv jobs).
MPI_PLUGINS = ("pmix", "pmi2", "cray_shasta", "none")
NO_MPI_OPTION = "none"
MPI_PLUGIN_RE = re.compile(r"[a-z][a-z0-9_]*")

# An EDF annotation key as CSCS's container-engine docs write them: dotted TOML bare keys
# (com.hooks.cxi.enabled), so each part is letters, digits, '_' or '-'.
ANNOTATION_KEY_RE = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
# Runtimes that start a rank as a command under srun (or srun itself, pyxis and CSCS's
# Container Engine, `srun --environment=EDF`): not under mpirun.
SRUN_RUNTIMES = ("pyxis", "podman-hpc", "shifter", "cscs-ce")
GPU_VENDORS = ("nvidia", "amd")
# How a job asks Slurm for its GPUs (`gpu_request:`): --gpus-per-node=N, --gres=gpu:N (JSC, IDRIS:
# their sample scripts), or not at all (TACC Vista: "--gres: TACC does not support this option").
GPU_REQUESTS = ("gpus-per-node", "gres", "none")
DEFAULT_GPU_REQUEST = "gpus-per-node"
# The command that runs an apptainer container: IDRIS's Jean Zay has Singularity as `singularity`.
APPTAINER_COMMANDS = ("apptainer", "singularity")
# How apptainer starts the rank: exec (the command in the image) or run (the image's runscript
# with the command as its arguments: LUMI's images activate their environment there).
APPTAINER_SUBCOMMANDS = ("exec", "run")
# Runtimes that add their own GPU option to a GPU job (apptainer --nv/--rocm, podman-hpc --gpu),
# which a site may leave out (`gpu_flag: false`) where a module's bindings give the GPUs.
GPU_FLAG_RUNTIMES = ("apptainer", "podman-hpc")

# prepend_path / append_path: (NAME, (dir, ...)) in the order written.
PathMap = tuple[tuple[str, tuple[str, ...]], ...]

SLURM_MAX_ARRAY_SIZE = 4000001  # slurm.conf(5): MaxArraySize "may not exceed 4000001"

# Process-group timeout. gloo's own default (30 min) would let one hung peer hold
# every node of the job that long; 10 min is torch's NCCL default.
DEFAULT_TIMEOUT_S = 600

# `slurmtorch mpirun`'s launcher per MPI (`mpirun: flavour:`): Open MPI's mpirun, MPICH's Hydra
# mpiexec, HPE Cray PALS's mpiexec (PBS Pro systems such as ALCF Polaris), Intel MPI's mpiexec,
# TACC's ibrun (inside a Slurm job or idev session: it places the ranks itself).
MPI_FLAVOURS = ("openmpi", "hydra", "pals", "intel", "ibrun")
# Flavours whose site's batch jobs (`--launcher mpirun`) may still start their ranks with Open
# MPI's mpirun: TACC's ML guide runs PyTorch so on Vista, where ibrun is `slurmtorch mpirun`'s.
BATCH_MPIRUN_FLAVOURS = ("openmpi", "ibrun")
# Flavours that place the ranks themselves from the Slurm job: no ranks per node, binding or hosts.
SELF_PLACING_FLAVOURS = ("ibrun",)
# How each rank is bound to CPUs, in words every flavour spells its own way (submit/launch/mpiflavour.py):
# none, one core, or `depth` CPUs (PALS's --depth; Hydra's core:N; Intel's pin domain size).
CPU_BINDS = ("none", "core", "depth")
# Which GPU a rank takes among the node's: local rank i takes GPU i (natural), or GPU n-1-i
# (reverse: ALCF's set_affinity_gpu_polaris.sh, "due to topology").
GPU_ORDERS = ("natural", "reverse")


# Site and preset names: they are typed on command lines and written into the
# script's provenance comment, where a newline would start a script line.
NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
NAME_TIP = "names are letters, digits, '.', '_' and '-'"
_TIME_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def mpi_option(plugin: str) -> list[str]:
    """srun's --mpi for a rank step; none at all for `none` (plain srun: the cluster's
    MpiDefault, as CSCS launches its uenv jobs). The ranks take their world from SLURM_*
    (`--from slurm`) whatever the plugin; only `--backend mpi` needs one MPI can read."""
    return [] if plugin == NO_MPI_OPTION else [f"--mpi={plugin}"]


class SrunRemoval(str):
    """A layer's `{--NAME: null}` in `srun_args`: --NAME, with any value, taken out of the layers
    before it (site, node type, partition, preset), as a `directives:` null takes a line out."""


def layered_srun_args(*layers: tuple[str, ...]) -> tuple[str, ...]:
    """The srun options of `layers` in order, each layer's removals applied to those before it."""
    out: list[str] = []
    for layer in layers:
        gone = {str(r) for r in layer if isinstance(r, SrunRemoval)}
        out = [arg for arg in out if arg.partition("=")[0] not in gone]
        out += [arg for arg in layer if not isinstance(arg, SrunRemoval)]
    return tuple(out)


@dataclass(frozen=True)
class NodeType:
    """What one node offers: GPUs, CPUs, memory and how it talks to its peers."""

    name: str
    gpus: int
    cpus: int
    fabric: str
    gpu_model: str | None = None
    memory_gb: int | None = None
    hcas: tuple[str, ...] = ()
    interfaces: tuple[str, ...] = ()
    rdma: bool = False
    gid_index: int | None = None
    link_gbps: int | None = None
    env: tuple[tuple[str, str | None], ...] = ()
    gpu_vendor: str = "nvidia"  # amd: RCCL (reads the NCCL_* names), ROCR_VISIBLE_DEVICES, apptainer --rocm
    srun_args: tuple[str, ...] = ()
    node_prologue: tuple[str, ...] = ()
    prepend_path: PathMap = ()
    append_path: PathMap = ()
    srun_mpi: str | None = None  # srun --mpi for jobs on this node type (None: the site's)
    omp_num_threads: int | str | None = None  # OMP_NUM_THREADS (a number or "auto"; None: the site's)
    gpu_request: str | None = None  # None: the site's
    modules: tuple[str, ...] = ()
    fabric_host_suffix: str | None = None  # JSC: "i" (jwb0001 -> jwb0001i, the node's IPoIB name)
    gpu_order: str | None = None  # reverse: local rank i takes GPU n-1-i (GPU 0 by the last NUMA node)

    def network_env(self, edition: int | None = None, interfaces_only: bool = False) -> tuple[tuple[str, str], ...]:
        """The fabric's network environment (of the bundled defaults' `edition`; None: the
        current one; `interfaces_only`: the interface names alone), with the admin's `env`
        applied on top.

        A key the admin sets to null removes what the fabric would have set.
        """
        derived = dict(fabric_env(self, edition=edition, interfaces_only=interfaces_only))
        for key, value in self.env:
            if value is None:
                derived.pop(key, None)
            else:
                derived[key] = value
        return tuple(derived.items())


@dataclass(frozen=True)
class Partition:
    """A Slurm partition as the admin allows it to be used."""

    name: str
    max_nodes: int
    max_time: str
    node_type: str
    default: bool = False
    default_time: str | None = None
    account: str | None = None  # defaults for jobs on it (an option or preset wins)
    qos: str | None = None
    required: tuple[str, ...] | None = None  # account/qos a job must have; None: the site's
    directives: tuple[tuple[str, str | bool | None], ...] = ()  # None: remove the line
    srun_args: tuple[str, ...] = ()
    srun_mpi: str | None = None  # srun --mpi for jobs here (None: the node type's, else the site's)
    omp_num_threads: int | str | None = None  # OMP_NUM_THREADS here (None: the node type's, else the site's)
    gpu_request: str | None = None  # None: the node type's, else the site's
    modules: tuple[str, ...] = ()
    env: tuple[tuple[str, str | None], ...] = ()
    prepend_path: PathMap = ()
    append_path: PathMap = ()
    refused_options: tuple[tuple[str, str], ...] | None = None  # None: the site's
    account_suffix: str | None = None  # IDRIS: "@h100"
    account_pattern: str | None = None  # a regex the whole account matches
    slurm_partition: str | None = None  # the Slurm partition this entry submits to; None: its name
    min_nodes: int | None = None  # fewest nodes a job here may use (a QOS's MinNodes; Leonardo's bprod: 65)
    max_node_minutes: int | None = None  # most nodes x minutes per job (a QOS's MaxTRESMinsPerJob=node=N)

    @property
    def slurm_name(self) -> str:
        """The Slurm partition jobs here go to (#SBATCH --partition): several entries may share
        one, each with its own QOS and limits (CINECA Leonardo's boost_usr_prod)."""
        return self.slurm_partition or self.name

    def account_problem(self, account: str) -> tuple[str, str] | None:
        """(problem, tip) when `account` has not the form this partition asks for, else None."""
        if self.account_suffix and not account.endswith(self.account_suffix):
            base = account.split("@", 1)[0] if "@" in self.account_suffix else account
            return (f"partition {self.name!r} takes accounts of the form NAME{self.account_suffix}, not {account!r}",
                    f"pass -A {base}{self.account_suffix}")
        if self.account_pattern and not re.fullmatch(self.account_pattern, account):
            return (f"account {account!r} does not have the form partition {self.name!r} asks for "
                    f"({self.account_pattern})", "pass -A with an account of that form (yours: sacctmgr show "
                                                 "associations user=$USER format=account)")
        return None


@dataclass(frozen=True)
class Container:
    """A container every rank runs in (submit/launch/containers.py: how, per runtime)."""

    runtime: str
    image: str
    mounts: tuple[str, ...] = ()
    roles: tuple[tuple[str, str], ...] = ()  # per-role images of a role job (`--role`)
    python: str | None = None  # interpreter inside the image; None: python3
    args: tuple[str, ...] = ()  # the runtime's own options from the site (shifter --module=gpu, ...)
    # cscs-ce only: the EDF's `entrypoint`, `writable` (None: CE's default) and [annotations].
    entrypoint: bool | None = None
    writable: bool | None = None
    annotations: tuple[tuple[str, str], ...] = ()
    command: str | None = None  # apptainer's command: apptainer (None) or singularity (IDRIS)
    subcommand: str | None = None  # apptainer's: exec (None) or run (LUMI)
    gpu_flag: bool = True  # apptainer --nv/--rocm, podman-hpc --gpu on a GPU job (LUMI: false)

    @property
    def interpreter(self) -> str:
        """The python ranks run inside the image (the submitting one is not in it)."""
        return self.python or "python3"


@dataclass(frozen=True)
class MpiLaunch:
    """How `slurmtorch mpirun` starts ranks on this site's hosts: which MPI's launcher, ranks
    per node, CPU binding and GPU order (the `mpirun:` block; defaults: Open MPI's as before)."""

    flavour: str = "openmpi"
    ranks_per_node: int | None = None  # None: the launcher's own placement
    depth: int | None = None  # CPUs per rank, with cpu_bind: depth
    cpu_bind: str = "none"
    gpu_order: str = "natural"


@dataclass(frozen=True)
class Site:
    """A validated, merged site config."""

    name: str
    source: str
    partitions: tuple[Partition, ...]
    node_types: tuple[NodeType, ...]
    presets: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    description: str = ""
    launcher: str = "srun"
    srun_mpi: str = "pmix"  # srun --mpi (`none`: no --mpi); node types, partitions and presets may differ
    omp_num_threads: int | str | None = None  # OMP_NUM_THREADS for every rank (None/"auto": each rank's CPU share)
    placement: str = "auto"  # where each rank runs (protocol.PLACEMENTS; --placement and a preset's win)
    max_array_size: int = 1001  # the cluster's MaxArraySize (Slurm's default): array indices 0..this - 1
    python: str | None = None
    modules: tuple[str, ...] = ()
    container: Container | None = None
    directives: tuple[tuple[str, str | bool | None], ...] = ()  # None: remove the line
    after_modules: tuple[str, ...] = ()  # shell lines between the modules and the exports (Polaris: conda activate)
    prologue: tuple[str, ...] = ()
    epilogue: tuple[str, ...] = ()
    env: tuple[tuple[str, str | None], ...] = ()
    timeout: int = DEFAULT_TIMEOUT_S
    templates: str | None = None
    module_purge: bool = False
    module_use: tuple[str, ...] = ()
    required: tuple[str, ...] = ()  # account/qos every job must have (a partition may say otherwise)
    srun_args: tuple[str, ...] = ()
    node_prologue: tuple[str, ...] = ()
    prepend_path: PathMap = ()
    append_path: PathMap = ()
    gpu_request: str = DEFAULT_GPU_REQUEST
    refused_options: tuple[tuple[str, str], ...] = ()  # option name -> the centre's reason
    mpirun: MpiLaunch = MpiLaunch()  # how `slurmtorch mpirun` launches here
    fabric_defaults: int | None = None  # the edition of the bundled fabric defaults pinned (None: the current)
    fabric_env: str = FULL  # interfaces-only: the centre's own layer sets the network libraries' variables

    @property
    def interfaces_only(self) -> bool:
        return self.fabric_env == INTERFACES_ONLY

    def gpu_request_for(self, partition: Partition, node: NodeType) -> str:
        """How a job on `partition` asks for its GPUs: the nearest of partition, node type, site."""
        return partition.gpu_request or node.gpu_request or self.gpu_request

    def refused_for(self, partition: Partition) -> dict[str, str]:
        """The options a job on `partition` may not pass, with the centre's reason."""
        return dict(self.refused_options if partition.refused_options is None else partition.refused_options)

    def edition_changes(self, old: int, new: int) -> list[str]:
        """What a job of 2+ nodes on each node type renders differently under edition `new` of
        the bundled fabric defaults than under `old`: `node type N: +|-|~ NAME=VALUE` lines for
        the exported environment (the node type's env applied on top) and the #SBATCH lines the
        fabric asks for (unless the site's directives set or remove them)."""
        out = []
        for nt in self.node_types:
            before = dict(nt.network_env(old, self.interfaces_only))
            after = dict(nt.network_env(new, self.interfaces_only))
            for key in dict.fromkeys((*before, *after)):
                if key not in after:
                    out.append(f"node type {nt.name}: - {key}={before[key]}")
                elif key not in before:
                    out.append(f"node type {nt.name}: + {key}={after[key]}")
                elif before[key] != after[key]:
                    out.append(f"node type {nt.name}: ~ {key}={before[key]} -> {after[key]}")
            own = {name for name, _ in self.directives}
            lines_before = {k: v for k, v in fabric_directives(before) if k not in own}
            lines_after = {k: v for k, v in fabric_directives(after) if k not in own}
            for key in dict.fromkeys((*lines_before, *lines_after)):
                if lines_before.get(key) != lines_after.get(key):
                    if key in lines_before:
                        out.append(f"node type {nt.name}: - #SBATCH --{key}={lines_before[key]}")
                    if key in lines_after:
                        out.append(f"node type {nt.name}: + #SBATCH --{key}={lines_after[key]}")
        return out

    def partition(self, name: str | None, qos: str | None = None) -> Partition:
        """The named partition, or the default one; with `qos`, the entry of the same Slurm
        partition that has that QOS if there is one (-p boost_usr_prod -q boost_qos_dbg: the
        debug QOS's limits)."""
        chosen = self._entry(name)
        if qos is not None and chosen.qos != qos:
            for p in self.partitions:
                if p.slurm_name == chosen.slurm_name and p.qos == qos:
                    return p
        return chosen

    def _entry(self, name: str | None) -> Partition:
        if name is None:
            for p in self.partitions:
                if p.default:
                    return p
            if len(self.partitions) == 1:
                return self.partitions[0]
            raise SpecError(
                f"site {self.name!r} has no default partition",
                tip="pass --partition " + "|".join(p.name for p in self.partitions),
            )
        for p in self.partitions:
            if p.name == name:
                return p
        # A Slurm partition's own name, where its entries are named for their QOS: the default
        # one of them, else the first (-q then picks among them).
        shared = [p for p in self.partitions if p.slurm_name == name]
        if shared:
            return next((p for p in shared if p.default), shared[0])
        raise SpecError(
            f"unknown partition {name!r} on site {self.name!r}",
            tip=valid_tip(name, [p.name for p in self.partitions], "partitions"),
        )

    def node_type(self, name: str) -> NodeType:
        for nt in self.node_types:
            if nt.name == name:
                return nt
        raise KeyError(name)  # validated on load: cannot happen for a partition's type

    def preset(self, name: str | None) -> dict[str, Any]:
        """The named preset's option defaults (`default` if it exists and none is named)."""

        presets = dict(self.presets)
        if name is None:
            return dict(presets.get("default", ()))
        if name not in presets:
            raise SpecError(
                f"unknown preset {name!r} on site {self.name!r}",
                tip=valid_tip(name, list(presets), "presets"),
            )
        return dict(presets[name])


def parse_time(text: str) -> float:
    """Seconds in a Slurm time string (`M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`).

    `UNLIMITED`/`INFINITE` are infinite. Raises ValueError on anything else.
    """
    t = str(text).strip()
    if t.upper() in ("UNLIMITED", "INFINITE"):
        return float("inf")
    m = _TIME_RE.match(t)
    if not m:
        raise ValueError(t)
    days, a, b, c = m.groups()
    a_i, b_i, c_i = int(a), int(b or 0), int(c or 0)
    # Only the leading field may run over (90 minutes, 30 hours are fine); the others are
    # clock fields, and 1:61:00 is a typo, not an hour and 61 minutes.
    if days is not None and a_i >= 24:
        raise ValueError("hours after a day count must be below 24")
    minutes = b if (days is not None or c is not None) else None
    if minutes is not None and b_i >= 60:
        raise ValueError("minutes must be below 60")
    seconds = c if c is not None else (b if days is None else None)
    if seconds is not None and int(seconds) >= 60:
        raise ValueError("seconds must be below 60")
    if days is not None:
        # D-H, D-H:M, D-H:M:S
        return int(days) * 86400 + a_i * 3600 + b_i * 60 + c_i
    if c is not None:
        return a_i * 3600 + b_i * 60 + c_i  # H:M:S
    if b is not None:
        return a_i * 60 + b_i  # M:S
    return a_i * 60  # M


def valid_tip(got: str, valid: list[str], what: str) -> str:
    """`did you mean 'x'? valid <what>: ...`: the tip for an unknown name."""
    import difflib  # lazy: only on the error path

    close = difflib.get_close_matches(str(got), valid, n=1)
    listing = ", ".join(repr(v) for v in valid) if valid else "(none)"
    if close:
        return f"did you mean {close[0]!r}? valid {what}: {listing}"
    return f"valid {what}: {listing}"
