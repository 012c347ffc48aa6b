"""The site file's schema: one table drives validation, the JSON schema and the docs.

Each key's type and description; `site_values` checks the types, `site_rules.validate`
the rules between keys, and `json_schema` gives editors the same table.
"""

from __future__ import annotations

from typing import Any

from slurmtorch.backends import BACKENDS
from slurmtorch.localrank import LOCAL_RANK_FORMS
from slurmtorch.protocol import PLACEMENTS
from slurmtorch.roles import ROLE_ORDER
from slurmtorch.protocol import CONTAINER_RUNTIMES, LAUNCHERS
from slurmtorch.submit.sites.model import (ANNOTATION_KEY_RE, APPTAINER_COMMANDS, APPTAINER_SUBCOMMANDS, CPU_BINDS,
                                           GPU_ORDERS, GPU_REQUESTS, GPU_VENDORS, MPI_FLAVOURS, MPI_PLUGINS)
from slurmtorch.submit.sites.fabric import FABRIC_ENV_MODES, FABRICS
from slurmtorch.submit.sites.values import REQUIRABLE

_PATHS = ("prepend_path: NAME: [DIR, ...] put before the variable's existing value (kept, with ':'), "
          "after the layers before this one")
_APPEND = "append_path: NAME: [DIR, ...] put after the variable's existing value (kept, with ':')"
_SRUN = ("extra options (--name[=value]) for every srun that starts ranks; site, node type, partition, then "
         "the job's --srun-arg; {--name: null} removes one a layer before set (LUMI's torchrun preset: "
         "{--cpu-bind: null}). Options slurmtorch sets itself are refused")
_MPI = ("srun --mpi plugin of the rank steps: pmix (Open MPI 5, MPI in a container), pmi2, cray_shasta (Cray "
        "MPICH), another of `srun --mpi=list`, or none for plain srun (the cluster's MpiDefault); the nearest of "
        "preset, partition, node type and site wins")
_OMP = ("OMP_NUM_THREADS of every rank: a number (CSCS: 8 on GH200), or auto for each rank's CPU share "
        "(--cpus-per-task; the default); the nearest of partition, node type and site wins, --env wins over all")
_PLACEMENT = ("where each rank runs: auto (the default: the CPUs of its GPU's NUMA node, shared fairly by the "
              "ranks there, read from the node's sysfs), share (a fair share of what the rank may use, GPUs "
              "ignored), none (leave CPU affinity to srun's --cpu-bind or the launcher); never more CPUs than "
              "Slurm or the launcher allowed; --placement wins")
_GPU_REQUEST = ("how the job asks Slurm for its GPUs: gpus-per-node (#SBATCH --gpus-per-node=N, the default), "
                "gres (#SBATCH --gres=gpu:N; JSC, IDRIS) or none (no GPU request: TACC Vista gives a node's GPU "
                "with the node); the nearest of partition, node type and site wins. The GPU count still sets the "
                "ranks per node and the container's GPU flags")
_REFUSED = ("options a job here may not pass, NAME: the centre's reason (e.g. mem: \"Vista does not accept "
            "--mem\"): refused before sbatch with that reason; NAME is the long option without dashes, "
            "checked against the job's options, --sbatch-arg and --srun-arg")
_FABRIC_ENV = ("the fabric's environment in the job: full (the default: what `slurmtorch site show` prints for "
               "each node type) or interfaces-only, where the centre's own layer sets the network libraries' "
               "variables (LUMI's lumi-aif-singularity-bindings, NERSC's shifter --module=nccl-plugin, CSCS's "
               "Container Engine hooks): only NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME from `interfaces` are "
               "exported, and the site's own env; a preset's wins")
_PROLOGUE = ("shell lines (trusted admin text) run once on every node before the ranks start, as their own "
             "srun step under bash -eu; a failure ends the job (exit 1). Output: the job folder's "
             "node-prologue-N.out")

# One table drives validation, the JSON schema and the docs. Each entry:
# key -> (type, description). Types: "str", "int", "bool", "time", "strlist", "lines", "paths",
# "envmap", "pathmap", "srunargs", "containerargs", "required", "directives", "rolemap", a tuple of allowed
# strings, or a nested dict.
NODE_TYPE_SCHEMA: dict[str, Any] = {
    "gpus": ("int", "GPUs per node (0 for CPU nodes)"),
    "gpu_model": ("str", "GPU model, for humans (e.g. a100, h100)"),
    "gpu_vendor": (GPU_VENDORS, "nvidia (default) or amd: RCCL reads the NCCL_* names; ranks see their GPU through "
                                "ROCR_VISIBLE_DEVICES; apptainer gets --rocm"),
    "cpus": ("int", "CPU cores per node usable by jobs"),
    "memory_gb": ("int", "memory per node in GB"),
    "fabric": (FABRICS, "interconnect between nodes (see `slurmtorch site show` for the environment each implies)"),
    "hcas": ("hcas", "RDMA devices (mlx5_0, ...): NCCL_IB_HCA (exact names) / UCX_NET_DEVICES; `auto` (or "
                     "leaving hcas out with rdma: true): neither is set, and NCCL and UCX use every active HCA"),
    "fabric_host_suffix": ("str", "the suffix that turns a node's Slurm name into its name on the fabric (JSC: "
                                  "`i`, jwb0001 -> jwb0001i): MASTER_ADDR and torchrun's --local-addr are that "
                                  "name's address (SLURMTORCH_FABRIC_HOST_SUFFIX); before *_SOCKET_IFNAME"),
    "gpu_request": (GPU_REQUESTS, _GPU_REQUEST),
    "modules": ("strlist", "environment modules to load on this node type, before the site's (an architecture module "
                           "selects the tree the others come from)"),
    "interfaces": ("strlist", "IP interfaces for NCCL (exact names) and Gloo bootstrap sockets"),
    "rdma": ("bool", "whether RDMA works on the fabric (infiniband, roce; efa, slingshot and gcp-gib always have it)"),
    "gid_index": ("int", "RoCE GID index for NCCL_IB_GID_INDEX (default: NCCL >= 2.21 picks the RoCE v2 GID itself)"),
    "link_gbps": ("int", "link speed per node in Gb/s; `slurmtorch doctor --allocation` compares the measured "
                         "all_reduce bus bandwidth with it"),
    "env": ("envmap", "environment for jobs on this node type; overrides the fabric's and the site's, null removes"),
    "prepend_path": ("pathmap", _PATHS),
    "append_path": ("pathmap", _APPEND),
    "srun_args": ("srunargs", _SRUN),
    "node_prologue": ("lines", _PROLOGUE + "; after the site's"),
    "srun_mpi": ("mpi", _MPI),
    "omp_num_threads": ("threads", _OMP),
    "gpu_order": (GPU_ORDERS, "which GPU local rank i takes on this board, in every job here: natural (GPU i, the "
                              "default) or reverse (GPU n-1-i, where GPU 0 sits by the last NUMA node: ALCF's affinity "
                              "table for the A100 board, GPU0 by CPUs 24-31 and GPU3 by 0-7, so that srun's rank 0 "
                              "on the first cores drives the GPU beside them); `mpirun: gpu_order` wins for "
                              "slurmtorch mpirun"),
}
PARTITION_SCHEMA: dict[str, Any] = {
    "max_nodes": ("int", "most nodes one job may use"),
    "max_time": ("time", "longest time limit (Slurm format, e.g. 1-00:00:00)"),
    "min_nodes": ("int", "fewest nodes one job may use, spares included (a partition's or QOS's MinNodes; CINECA "
                         "Leonardo's boost_qos_bprod: 65): a smaller job is refused before sbatch, with the entry "
                         "that would take it, rather than pend for ever"),
    "max_node_minutes": ("int", "most nodes x minutes one job may use (a QOS's MaxTRESMinsPerJob=node=N; CSCS's "
                                "debug: 90, e.g. 2 nodes for 45 minutes): its nodes and spares times its --time, else "
                                "default_time, else max_time; refused before sbatch, with the entry that would take it"),
    "node_type": ("str", "name of an entry in node_types"),
    "default": ("bool", "used when no --partition is given"),
    "default_time": ("time", "time limit when none is given"),
    "account": ("str", "Slurm account when the job names none (-A and a preset's win)"),
    "qos": ("str", "Slurm QOS when the job names none (-q and a preset's win)"),
    "required": ("required", f"what a job here must have ({', '.join(REQUIRABLE)}); replaces the site's"),
    "directives": ("directives", "extra #SBATCH lines for jobs here (after the site's; null removes one)"),
    "srun_args": ("srunargs", _SRUN),
    "srun_mpi": ("mpi", _MPI),
    "omp_num_threads": ("threads", _OMP),
    "gpu_request": (GPU_REQUESTS, _GPU_REQUEST),
    "modules": ("strlist", "environment modules to load for jobs here, after the node type's and before the site's "
                           "(IDRIS gpu_p6: [arch/h100], loaded before any other)"),
    "env": ("envmap", "environment for jobs here; after the node type's, before the preset's; null removes"),
    "prepend_path": ("pathmap", _PATHS),
    "append_path": ("pathmap", _APPEND),
    "refused_options": ("refused", _REFUSED + "; replaces the site's"),
    "account_suffix": ("str", "the form a job's account must have here, as a suffix (IDRIS gpu_p6: \"@h100\" for "
                              "-A xyz@h100); checked before sbatch"),
    "slurm_partition": ("str", "the Slurm partition jobs here go to (default: the entry's name): several entries "
                               "may share one, each with its own qos and limits (CINECA Leonardo: boost_usr_prod "
                               "with boost_qos_dbg and boost_qos_lprod); -p ENTRY, or -p PARTITION -q QOS"),
    "account_pattern": ("regex", "the form a job's account must have here, as a Python regular expression the "
                                 "whole account matches; checked before sbatch"),
}
CONTAINER_SCHEMA: dict[str, Any] = {
    "runtime": (CONTAINER_RUNTIMES, "pyxis (srun --container-image), apptainer exec, podman-hpc run, shifter, "
                                    "cscs-ce (CSCS's Container Engine: srun --environment=EDF, the EDF written "
                                    "into the job folder) or charliecloud (ch-run IMAGE --); the jobs folder and "
                                    "the script's folder are mounted at their own paths"),
    "image": ("image", "image reference or path; for apptainer a path may hold job-time variables ($NAME or "
                       "${NAME}, e.g. $SINGULARITY_ALLOWED_DIR/x.sif), expanded on the node"),
    "mounts": ("strlist", "bind mounts SRC:DST"),
    "roles": ("rolemap", "per-role images for role jobs (master, chief, worker, ps, evaluator: image); "
                         "roles not named use `image`"),
    "command": (APPTAINER_COMMANDS, "apptainer only: the command that runs it, apptainer (default) or singularity "
                                    "(IDRIS: `singularity exec`)"),
    "python": ("str", "interpreter inside the image, with slurmtorch installed (default: python3; the "
                      "site's `python` is the one on the host)"),
    "subcommand": (APPTAINER_SUBCOMMANDS, "apptainer only: exec (default: the rank's python is run in the image) "
                                          "or run (the image's runscript runs first, with the rank's command as its "
                                          "arguments; LUMI: `singularity run`, whose runscript activates the "
                                          "image's environment)"),
    "gpu_flag": ("bool", "apptainer and podman-hpc: whether a GPU job gets the runtime's GPU option (--nv or "
                         "--rocm, podman-hpc's --gpu; default true); false where a module's bindings give the "
                         "GPU's devices and libraries (LUMI's lumi-aif-singularity-bindings)"),
    "args": ("containerargs", "the runtime's own options, e.g. ['--module=gpu,nccl-plugin'] for shifter (quoted: "
                              "YAML splits [a,b] at the comma), [--nccl] for podman-hpc, [--writable-tmpfs] for "
                              "apptainer, [--container-remap-root] for pyxis, [--set-env] for charliecloud (the "
                              "image's /ch/environment); a word that is not an option only as the value of the "
                              "option before it (--bind, /scratch)"),
    "entrypoint": ("bool", "cscs-ce: the EDF's `entrypoint` (run the image's entrypoint; CSCS asks for true with "
                           "its Alps Extended Images)"),
    "writable": ("bool", "cscs-ce: the EDF's `writable` (a writable container filesystem; CE's default: true)"),
    "annotations": ("annotations", "cscs-ce: the EDF's [annotations] (dotted hook keys: string), e.g. "
                                   "com.hooks.cxi.enabled: 'false' as the Alps Extended Images ask"),
}
MPIRUN_SCHEMA: dict[str, Any] = {
    "flavour": (MPI_FLAVOURS, "whose launcher `slurmtorch mpirun` writes: openmpi (mpirun, the default), hydra "
                              "(MPICH's mpiexec), pals (HPE Cray PALS's mpiexec on PBS systems, e.g. ALCF "
                              "Polaris) or intel (Intel MPI's mpiexec)"),
    "ranks_per_node": ("int", "ranks on each host of the hostfile (-ppn/--ppn; Open MPI: --map-by ppr:N:node)"),
    "cpu_bind": (CPU_BINDS, "each rank's CPUs: none (the default), core (one core) or depth (`depth` CPUs: "
                            "PALS --depth D --cpu-bind depth, Hydra -bind-to core:D, Intel I_MPI_PIN_DOMAIN=D, "
                            "Open MPI PE=D)"),
    "depth": ("int", "CPUs per rank with cpu_bind: depth (ALCF Polaris: 16 for 4 ranks per node)"),
    "gpu_order": (GPU_ORDERS, "which GPU local rank i takes: natural (GPU i) or reverse (GPU n-1-i, as ALCF's "
                              "set_affinity_gpu_polaris.sh assigns them on Polaris)"),
}
PRESET_SCHEMA: dict[str, Any] = {
    "partition": ("str", "partition name"),
    "nodes": ("int", "number of nodes"),
    "ntasks_per_node": ("int", "ranks per node"),
    "gpus_per_node": ("int", "GPUs per node"),
    "cpus_per_task": ("int", "CPUs per rank"),
    "time": ("time", "time limit"),
    "account": ("str", "Slurm account"),
    "qos": ("str", "Slurm QOS"),
    "backend": (BACKENDS, "torch.distributed backend"),
    "launcher": (LAUNCHERS, "how ranks are started"),
    "timeout": ("int", "process-group timeout in seconds"),
    "placement": (PLACEMENTS, _PLACEMENT),
    "local_rank_arg": (LOCAL_RANK_FORMS, "give each rank --local_rank=N (local_rank) or --local-rank=N (local-rank) "
                                         "before the script's arguments, as DeepSpeed's launcher does"),
    "env": ("envmap", "extra environment"),
    "prepend_path": ("pathmap", _PATHS),
    "append_path": ("pathmap", _APPEND),
    "modules": ("strlist", "extra modules to load"),
    "directives": ("directives", "extra #SBATCH directives (null removes one the site or partition set)"),
    "requeue": ("bool", "let Slurm (and the preemption handler) requeue the job"),
    "signal": ("str", "preemption signal, [R:]SIG[@SECONDS] (e.g. USR1@60); implies requeue"),
    "srun_mpi": ("mpi", _MPI),
    "srun_args": ("srunargs", _SRUN + " (a preset's come after the partition's)"),
    "container": (CONTAINER_SCHEMA, "container for every rank of a job with this preset, in place of the site's"),
    "fabric_env": (FABRIC_ENV_MODES, _FABRIC_ENV),
}
SITE_SCHEMA: dict[str, Any] = {
    "name": ("str", "site name (default: file name without .yaml)"),
    "extends": ("str", "name or path of a site this one is merged onto"),
    "description": ("str", "one line for `slurmtorch site list`"),
    "launcher": (LAUNCHERS, "how ranks are started"),
    "mpirun": (MPIRUN_SCHEMA, "how `slurmtorch mpirun` starts ranks on hosts without Slurm (PBS, a hostfile): "
                              "the MPI's launcher, ranks per node, CPU binding, GPU order"),
    "srun_mpi": ("mpi", _MPI),
    "mpi_plugin": ("mpi", "the older name of srun_mpi (site level only)"),
    "omp_num_threads": ("threads", _OMP),
    "placement": (PLACEMENTS, _PLACEMENT),
    "max_array_size": ("int", "the cluster's MaxArraySize (`scontrol show config`; Slurm's default 1001): "
                              "--array and --sweep take indices below it; 0: no job arrays"),
    "python": ("str", "interpreter on the compute nodes (default: the submitting one); in a container, "
                      "`container.python`"),
    "module_purge": ("bool", "`module purge` before the site's modules are loaded"),
    "module_use": ("paths", "`module use DIR` for each, before the modules are loaded"),
    "modules": ("strlist", "environment modules to load"),
    "container": (CONTAINER_SCHEMA, "container for every rank"),
    "directives": ("directives", "extra #SBATCH directives (name: value, true for a flag, null removes one; "
                                 "`partition: null` for a QOS-routed site)"),
    "required": ("required", f"what every job must have ({', '.join(REQUIRABLE)}), refused before sbatch "
                             "otherwise; a partition's `required` replaces it"),
    "after_modules": ("lines", "shell lines (trusted admin text) after the modules are loaded and before the job's "
                               "variables are exported, in the batch script, slurmtorch mpirun's and alloc's shell "
                               "(ALCF Polaris: `conda activate` after `module load conda`)"),
    "prologue": ("strlist", "shell lines before the launch (trusted admin text)"),
    "node_prologue": ("lines", _PROLOGUE),
    "epilogue": ("strlist", "shell lines after the launch (trusted admin text)"),
    "env": ("envmap", "environment for every job: values are literal; NAME: {expand: VALUE} expands VALUE's "
                    "$NAME/${NAME} when the job runs (LUMI: TORCH_HOME: {expand: /scratch/${SLURM_JOB_ACCOUNT}/...})"),
    "prepend_path": ("pathmap", _PATHS),
    "append_path": ("pathmap", _APPEND),
    "srun_args": ("srunargs", _SRUN),
    "gpu_request": (GPU_REQUESTS, _GPU_REQUEST),
    "refused_options": ("refused", _REFUSED),
    "timeout": ("int", "process-group timeout in seconds"),
    "templates": ("str", "folder with template overrides, relative to this file"),
    "fabric_defaults": ("int", "the edition of slurmtorch's fabric defaults this site renders with (default: "
                               "the current one): a newer slurmtorch changes nothing in its jobs until the pin "
                               "moves; `slurmtorch site changes SITE` shows what each later edition would change"),
    "fabric_env": (FABRIC_ENV_MODES, _FABRIC_ENV),
    "node_types": ({"*": NODE_TYPE_SCHEMA}, "node types by name"),
    "partitions": ({"*": PARTITION_SCHEMA}, "partitions by name (on a QOS-routed site: the routes -p names)"),
    "presets": ({"*": PRESET_SCHEMA}, "named option defaults; `default` applies when none is named"),
}
REQUIRED = {
    "site": ("node_types", "partitions"),
    "node_type": ("gpus", "cpus", "fabric"),
    "partition": ("max_nodes", "max_time", "node_type"),
    "container": ("runtime", "image"),
}


# The JSON schema of each value kind of the table above.
_KINDS: dict[str, dict[str, Any]] = {
    "str": {"type": "string"},
    "int": {"type": "integer", "minimum": 0},
    "bool": {"type": "boolean"},
    "time": {"type": "string", "pattern": r"^(UNLIMITED|INFINITE|(\d+-)?\d+(:\d+){0,2})$"},
    "strlist": {"type": "array", "items": {"type": "string"}},
    "containerargs": {"type": "array", "items": {"type": "string", "minLength": 1}},
    "lines": {"type": "array", "items": {"type": "string"}},
    "paths": {"type": "array", "items": {"type": "string", "minLength": 1}},
    "mpi": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$", "examples": list(MPI_PLUGINS)},
    "threads": {"oneOf": [{"type": "integer", "minimum": 1}, {"const": "auto"}]},
    "annotations": {
        "type": "object",
        "propertyNames": {"pattern": f"^{ANNOTATION_KEY_RE.pattern}$"},
        "additionalProperties": {"type": "string"},
    },
    "srunargs": {"type": "array", "items": {"oneOf": [
        {"type": "string", "pattern": "^--[a-z][a-z0-9-]*(=.*)?$"},
        {"type": "object", "minProperties": 1, "maxProperties": 1,
         "propertyNames": {"pattern": "^--[a-z][a-z0-9-]*$"}, "additionalProperties": {"type": "null"}}]}},
    "required": {"type": "array", "items": {"enum": list(REQUIRABLE)}},
    "hcas": {"oneOf": [{"type": "array", "items": {"type": "string"}}, {"const": "auto"}]},
    "image": {"type": "string", "minLength": 1},
    "regex": {"type": "string", "minLength": 1},
    "refused": {"type": "object", "propertyNames": {"pattern": "^[a-z][a-z0-9-]*$"},
                "additionalProperties": {"type": "string", "minLength": 1}},
    "pathmap": {
        "type": "object",
        "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "additionalProperties": {"oneOf": [
            {"type": "string", "pattern": "^[^:$]+$"},
            {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": "^[^:$]+$"}}]},
    },
    "envmap": {
        "type": "object",
        "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "additionalProperties": {"oneOf": [
            {"type": ["string", "integer", "null"], "pattern": r"^[^$]*$"},
            {"type": "object", "additionalProperties": False, "required": ["expand"],
             "properties": {"expand": {"type": "string"}}}]},
    },
    "directives": {
        "type": "object",
        "additionalProperties": {"type": ["string", "integer", "boolean", "null"]},
    },
    "rolemap": {
        "type": "object",
        "propertyNames": {"enum": list(ROLE_ORDER)},
        "additionalProperties": {"type": "string"},
    },
}


def json_schema() -> dict[str, Any]:
    """A JSON schema (draft 2020-12) for site files, derived from the validation table."""

    def conv(spec: Any, desc: str | None = None, required: tuple[str, ...] = ()) -> dict:
        if isinstance(spec, dict):
            if set(spec) == {"*"}:
                (inner,) = spec.values()
                out: dict[str, Any] = {"type": "object", "additionalProperties": conv(inner)}
            else:
                out = {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {k: conv(v[0], v[1], _req_for(k)) for k, v in spec.items()},
                }
                if required:
                    out["required"] = list(required)
        elif isinstance(spec, tuple):
            out = {"enum": list(spec)}
        else:
            out = dict(_KINDS[spec])
        if desc:
            out["description"] = desc
        return out

    def _req_for(key: str) -> tuple[str, ...]:
        return {"container": REQUIRED["container"]}.get(key, ())

    schema = conv(SITE_SCHEMA, required=REQUIRED["site"])
    schema["properties"]["node_types"]["additionalProperties"]["required"] = list(REQUIRED["node_type"])
    schema["properties"]["partitions"]["additionalProperties"]["required"] = list(REQUIRED["partition"])
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://slurmtorch.invalid/site.schema.json",
        "title": "slurmtorch site config",
        **schema,
    }
