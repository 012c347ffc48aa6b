"""The job's environment: the layers in their order, and the user's `--env` checked.

Fabric (what the node type's network implies), then the site's `env`, the node
type's own `env` (the admin's word for that hardware), the partition's (IDRIS: what one
partition's nodes need), `omp_num_threads` (the nearest of partition, node type and site),
the preset's, and the user's `--env`; a null in a YAML layer removes the variable. Within a
layer the plain values come first, then its `prepend_path`/`append_path`: a composition
applies to the value the layers before it left (a later layer's prepend goes in front of an
earlier one's), and a plain value in a later layer replaces the variable, compositions and all.
A composition over nothing but the job's own environment keeps that value at run time
(`PathEdit`, rendered as `${NAME:+...}`); over a plain value it is folded into one
literal value here. Refused from `--env`: names the batch script sets itself, names
whose literal value cannot work (PATH, PYTHONHOME), names that make a shell or the
loader run code (BASH_ENV, LD_PRELOAD, ...), Slurm's job-identity variables and the
layout variables srun reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from slurmtorch import protocol, shell
from slurmtorch.errors import SpecError
from slurmtorch.submit.sites.model import NodeType, Partition, PathMap, Site
from slurmtorch.submit.sites.fabric import INTERFACES_ONLY, fabric_env
from slurmtorch.options import Options

# (NAME, dirs before the inherited value, dirs after it): exported as
# front:$NAME:back, with the ':' beside $NAME only when NAME is set and not empty.
PathEdit = tuple[str, tuple[str, ...], tuple[str, ...]]
_INHERIT = None  # a recipe's base: the value the job's environment brings

# Variables the batch script sets itself. An --env value for one would be overwritten
# or, worse, win: SLURM_EXPORT_ENV=NONE strips every srun step's environment, and a
# MASTER_ADDR/PORT typed on the submitting host sends the ranks to the wrong rendezvous.
SCRIPT_ENV = frozenset({"MASTER_ADDR", "MASTER_PORT", "SLURM_EXPORT_ENV", *protocol.SCRIPT_SETS})
SCRIPT_ENV_PREFIX = protocol.SWEEP_PREFIX
# Variables whose --env value cannot work: it is exported literally (no $PATH expansion),
# so it replaces what the job needs to start at all; each with why and what to do instead.
UNSETTABLE_ENV = {
    "PATH": ("it would replace the job's whole PATH (the value is literal, $PATH is not expanded) and hide "
             "python, srun and mpirun", "load tools with the site's modules:, or give the full path to a program"),
    "PYTHONHOME": ("it points every rank's python at another installation, which then cannot import itself",
                   "set the interpreter with the site's python: instead"),
}
# Variables that make a shell or the loader run code. An --env value is exported before the
# launch line, so it acts on srun, mpirun, the batch script's shells and whatever they start,
# not only on the ranks (docs/SECURITY.md). Decided one by one; allowed on purpose:
# LD_LIBRARY_PATH (sites set it for NCCL plugins and CUDA), IFS (bash and dash reset it at
# start-up), GLOBIGNORE (it changes what a glob matches and runs nothing). Exported functions
# (BASH_FUNC_f%%) never get here: shell.env_name refuses a name that is not a plain one.
_RUN_IT_YOURSELF = "run it from your own script (or a site's node prologue) instead"
RUNS_CODE_ENV = {
    "BASH_ENV": ("every non-interactive bash the job starts (the launch steps, mpirun.sh, your script's "
                 "subshells) would first run the file it names", _RUN_IT_YOURSELF),
    "ENV": ("an interactive sh (dash, or bash started as sh) would first run the file it names", _RUN_IT_YOURSELF),
    "SHELLOPTS": ("every bash the job starts would take these options (xtrace, noexec, ...), the batch "
                  "script's own included", "set the options inside your own script"),
    "BASHOPTS": ("every bash the job starts would take these shopt options (extdebug, ...)",
                 "set the options inside your own script"),
    "PS4": ("bash expands it for every traced line, running any $(...) in it", "set it inside your own script"),
    "PROMPT_COMMAND": ("an interactive bash in the job (srun --pty bash) would run it before every prompt",
                       _RUN_IT_YOURSELF),
    "CDPATH": ("a relative cd in any of the job's shells could land in another folder and run what is there",
               "cd to an absolute path inside your own script"),
    "LD_PRELOAD": ("the loader would run the libraries it names inside srun, mpirun and bash as well as the ranks",
                   "set it inside your script, or in the site's env: for a node type"),
    "LD_AUDIT": ("the loader would run the audit libraries it names inside srun, mpirun, bash and every rank",
                 "set it inside your script, or in the site's env: for a node type"),
}
# Slurm's output variables that say which job, step and task this is (sbatch(1), srun(1)
# "OUTPUT ENVIRONMENT VARIABLES"); the ranks derive their world from them. Input variables
# that srun reads (SLURM_CPU_BIND, SLURM_HINT, ...) stay allowed: they are options.
SLURM_IDENTITY = frozenset({
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT",
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_JOB_NODELIST", "SLURM_NODELIST",
    "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_JOB_NUM_NODES", "SLURM_NNODES",
    "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST", "SLURM_TASK_PID",
})

# Input variables srun takes the step's layout from when its options do not say it (srun(1)
# "INPUT ENVIRONMENT VARIABLES"): exported in the script, `SLURM_NTASKS=1` made a 2-node
# job train on one rank and end COMPLETED. Every rank step names its layout now
# (launchplan.plan); these are refused as well, with the option that says it.
SLURM_LAYOUT = {
    "SLURM_NTASKS": "-n/--ntasks", "SLURM_NPROCS": "-n/--ntasks", "SLURM_NTASKS_PER_NODE": "--ntasks-per-node",
    "SLURM_NTASKS_PER_SOCKET": "--ntasks-per-node", "SLURM_NTASKS_PER_CORE": "--ntasks-per-node",
    "SLURM_NTASKS_PER_GPU": "--ntasks-per-node", "SLURM_NTASKS_PER_TRES": "--ntasks-per-node",
    "SLURM_CPUS_PER_TASK": "--cpus-per-task", "SLURM_DISTRIBUTION": "--srun-arg=--distribution=...",
    "SLURM_HOSTFILE": "--nodelist",
}


def job_env(site: Site, node: NodeType, partition: Partition, preset: dict, o: Options, nodes: int = 2
            ) -> tuple[dict[str, str], tuple[PathEdit, ...]]:
    """(plain values, path edits over the inherited value): every layer applied in order.

    Insertion order is the order the script exports them; the path edits come after.
    `nodes` is the job's node count (a one-node batch job's fabric layer may differ).
    """
    layers: list[tuple[Iterable[tuple[str, str | None]], PathMap, PathMap]] = [
        (fabric_env(node, one_node=o.kind == "sbatch" and nodes == 1, edition=site.fabric_defaults,
                    interfaces_only=preset.get("fabric_env", site.fabric_env) == INTERFACES_ONLY), (), ()),
        (site.env, site.prepend_path, site.append_path),
        (node.env, node.prepend_path, node.append_path),
        (partition.env, partition.prepend_path, partition.append_path),
        (omp_env(site, node, partition), (), ()),
        (preset.get("env", ()), preset.get("prepend_path", ()), preset.get("append_path", ())),
        (parse_env(o.env, batch=o.kind == "sbatch"), (), ()),
    ]
    recipes: dict[str, tuple[str | None, tuple[str, ...], tuple[str, ...]]] = {}
    for values, front, back in layers:
        for key, value in values:
            recipes.pop(key, None)
            if value is not None:
                recipes[key] = (value, (), ())
        for key, dirs in front:
            base, before, after = recipes.get(key, (_INHERIT, (), ()))
            recipes[key] = (base, (*dirs, *before), after)
        for key, dirs in back:
            base, before, after = recipes.get(key, (_INHERIT, (), ()))
            recipes[key] = (base, before, (*after, *dirs))
    env = {key: _joined(base, before, after) for key, (base, before, after) in recipes.items() if base is not _INHERIT}
    edits = tuple((key, before, after) for key, (base, before, after) in recipes.items() if base is _INHERIT)
    return env, edits


def _joined(base: str, before: tuple[str, ...], after: tuple[str, ...]) -> str:
    """A plain value with a layer's folders around it; a job-time value (a site's `{expand: ...}`,
    `shell.JobTimeWord`) stays one, its folders literal text beside its variables."""
    if not before and not after:
        return base
    text = ":".join(p for p in (*before, base, *after) if p)
    return shell.JobTimeWord(text) if isinstance(base, shell.JobTimeWord) else text


def omp_env(site: Site, node: NodeType, partition: Partition) -> tuple[tuple[str, str], ...]:
    """OMP_NUM_THREADS as the site documents it: the partition's `omp_num_threads`, else the node
    type's, else the site's; none (or `auto`) leaves each rank its CPU share, which the bootstrap
    sets (bootstrap.world.thread_defaults). CSCS's GH200 job scripts set 8 per rank, where the
    share of a 288-core node among 4 ranks is 72 (docs/software/ml/pytorch.md in eth-cscs/cscs-docs)."""
    for level in (partition, node, site):
        if level.omp_num_threads is not None:
            return () if level.omp_num_threads == "auto" else (("OMP_NUM_THREADS", str(level.omp_num_threads)),)
    return ()


def composed(edits: Iterable[PathEdit], environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The values `edits` give on top of `environ`, as the rendered script computes them."""
    return [(key, ":".join([*before, *([environ[key]] if environ.get(key) else []), *after]))
            for key, before, after in edits]


def expanded(env: Iterable[tuple[str, str]], environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """`env` with each job-time value (`shell.JobTimeWord`) as the batch script's bash expands it
    over `environ` (an unset variable: empty)."""
    return [(key, shell.JOB_TIME_VAR.sub(lambda m: environ.get(m.group(1) or m.group(2), ""), value)
             if isinstance(value, shell.JobTimeWord) else value) for key, value in env]


def parse_env(items: tuple[str, ...] | list[str], batch: bool = False) -> list[tuple[str, str]]:
    """`K=V` strings -> pairs; the name must be a plain shell name.

    With `batch`, names the batch script sets itself (SCRIPT_ENV) are refused; always,
    UNSETTABLE_ENV, RUNS_CODE_ENV, SLURM_LAYOUT and SLURM_IDENTITY names.
    """
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SpecError(f"malformed --env {item!r}: expected NAME=VALUE", tip="e.g. --env NCCL_DEBUG=INFO")
        shell.env_name(name)
        if batch and (name in SCRIPT_ENV or name.startswith(SCRIPT_ENV_PREFIX)):
            raise SpecError(
                f"--env {name}: the batch script sets {name} itself",
                tip="a site that needs a fixed one sets it in its `env:`" if name.startswith("MASTER_")
                else f"leave --env {name} out; slurmtorch sets it for every job that needs it",
            )
        if name in UNSETTABLE_ENV or name in RUNS_CODE_ENV:
            why, tip = UNSETTABLE_ENV.get(name) or RUNS_CODE_ENV[name]
            raise SpecError(f"--env {name}: {why}", tip=tip)
        if name in SLURM_LAYOUT:
            raise SpecError(f"--env {name}: srun reads {name} for the step's layout; the job's layout comes "
                            "from its options", tip=f"use {SLURM_LAYOUT[name]} instead")
        if name in SLURM_IDENTITY:
            raise SpecError(f"--env {name}: Slurm sets {name} for each job and task; "
                            "a value given here would describe another job",
                            tip="use the matching slurmtorch option (e.g. --time, --nodes)")
        shell.quote(value, what=f"--env {name} value")  # refuses NUL and non-UTF-8 text
        out.append((name, value))
    return out
