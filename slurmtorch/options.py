"""`Options`: what the user asked for, the one schema every front end fills.

The CLI verbs, `Distributor` and the doctor build it with only the fields they set
(`Options.given`); every default lives here. A field the CLI offers carries its flags
and help text beside it (field metadata), so `sbatch` and `mpirun` declare each
option once (`cli._common.option`); so does the `#SBATCH` option it is passed on as
(`SBATCH_PASSED_ON`) and whether the Distributor takes it as a keyword (`API_KEYWORDS`).
Light on purpose: `slurmtorch --help` imports it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from slurmtorch import initargs
from slurmtorch.backends import BACKENDS
from slurmtorch.errors import SpecError, typed
from slurmtorch.localrank import LOCAL_RANK_FORMS
from slurmtorch.protocol import CLUSTER_SPEC_SHAPES, CONTAINER_RUNTIMES, LAUNCHERS, PLACEMENTS
from slurmtorch.inputs import file_problem

# What --launcher and --container-runtime accept, and a site's `launcher:` and
# `container.runtime:` (sites/schema.py): here, not in the sites package, because --help
# lists them and must not load the site loader.

# A job of `slurmtorch alloc` (no SCRIPT to name it after) without -J.
INTERACTIVE_JOB_NAME = "interactive"


def _choices(values: tuple[str, ...]) -> str:
    """A choice list as --help shows it, from the list the code checks: one owner each."""
    return "|".join(values)


def _flag(*flags: str, help: str | None = None, metavar: str | None = None, default: Any = None,
          sbatch: str | None = None, api: bool = False, bare: tuple[str, Any] | None = None) -> Any:
    """A field the CLI offers as `flags` (None there: not given); `sbatch`: the `#SBATCH` option
    it is passed on as, once checked (sbatch_options); `api`: a `Distributor` keyword too;
    `bare`: (its value when typed alone, whether a word is a value of its): the next word is its
    value only when it is one, as the bootstrap reads `--init-args train.py`."""
    return field(default=default, metadata={"flags": flags, "help": help, "metavar": metavar, "sbatch": sbatch,
                                            "api": api, "bare": bare})


@dataclass(frozen=True)
class Options:
    """What the user asked for; None means "take the preset's, else the default"."""

    kind: str = "sbatch"  # sbatch | mpirun
    script: str | None = None  # absolute; the edge checked that it exists (spec.split_script)
    module: str | None = _flag("-m", "--module", help="run a module instead of SCRIPT")
    script_args: tuple[str, ...] = ()
    preset: str | None = _flag("--preset", help="a named set of defaults from the site config (slurmtorch site show SITE)")
    partition: str | None = _flag("--partition", "-p", help="Slurm partition (default: the site's default one)",
                                  api=True)
    nodes: int | None = _flag("--nodes", "-N",
                              help="number of nodes (default: the preset's, else what -n or --role needs, else 1)")
    ntasks_per_node: int | None = _flag("--ntasks-per-node",
                                        help="ranks per node (default: GPUs per node, or 1); with -n, the most on any node")
    ntasks: int | None = _flag("-n", "--ntasks", "--np",
                               help="number of ranks; under sbatch spread over --nodes, unevenly if need be "
                                    "(-N 2 -n 3 runs 2+1; not with --launcher torchrun)")
    hostfile: str | None = _flag("--hostfile", help="mpirun's hosts, one per line (default: this host only)")  # mpirun only; absolute, checked at the edge
    gpus_per_node: int | None = _flag("--gpus-per-node",
                                      help="GPUs per node (default: all of the node type's); one rank each by default")
    cpus_per_task: int | None = _flag("-c", "--cpus-per-task",
                                      help="CPUs per rank (default: the node's CPUs / ranks per node)", api=True)
    time: str | None = _flag("--time", "-t", help="Slurm time limit, e.g. 1-00:00:00", api=True)
    account: str | None = _flag("--account", "-A", help="Slurm account (project) to charge", api=True)
    qos: str | None = _flag("-q", "--qos", help="Slurm QOS", api=True)
    job_name: str | None = _flag("--job-name", "-J", help="job name (default: the script's or module's name)", api=True)
    backend: str | None = _flag("--backend", metavar=_choices(BACKENDS),
                                help="torch.distributed's backend (default: the preset's, else auto: nccl where the "
                                     "ranks have GPUs, else gloo)")
    launcher: str | None = _flag("--launcher", metavar=_choices(LAUNCHERS),
                                 help="what starts the ranks (default: the preset's, else the site's)", api=True)
    timeout: int | None = _flag("--timeout", metavar="SECONDS",
                                help="process-group timeout in seconds (default: the preset's, else the site's)",
                                api=True)
    env: tuple[str, ...] = _flag("--env", help="K=V, repeatable", default=(), api=True)  # raw K=V strings as typed
    placement: str | None = _flag(
        "--placement", metavar=_choices(PLACEMENTS),
        help="where each rank runs: auto (the default: the CPUs nearest its GPU, shared fairly by the ranks "
             "there, never more than Slurm or the launcher allowed), share (a fair share, GPUs ignored), "
             "none (leave CPU affinity alone)")
    local_rank_arg: str | None = _flag(
        "--local-rank-arg", metavar=_choices(LOCAL_RANK_FORMS),
        help="give each rank --local_rank=N before the script's own arguments, as DeepSpeed's launcher and "
             "torch.distributed.launch do, for scripts that read it from argv (local-rank: --local-rank=N, "
             "torch.distributed.launch since torch 2.0)")
    init_args: str | None = _flag(
        "--init-args", metavar=_choices(initargs.SHAPES) + "[:URL,RANK,WORLD]",
        bare=("rank", initargs.is_value),
        help="give each rank the rendezvous URL, its rank and the world size as arguments after the script's own: "
             "rank (the default, --init-args alone): --init_method URL --rank R --world_size N (ModelArts); node: "
             "node rank and node count (one task per node); name the flags after a colon, e.g. "
             "node:dist-url,rank,world-size (pytorch/examples' imagenet)")
    no_init: bool | None = _flag(
        "--no-init",
        help="start no process group of ours: each rank gets its world (env://, CLUSTER_SPEC, ...) and the script "
             "calls init_process_group itself, with its own backend, timeout and settings (torchtitan's "
             "init_distributed, which skips its set-up where a group exists)")
    cluster_spec: str | None = _flag(
        "--cluster-spec", metavar=_choices(CLUSTER_SPEC_SHAPES),
        help="CLUSTER_SPEC's shape: ai-platform (master/worker, one entry per rank; the default) or vertex "
             "(Vertex AI's workerpool0..3, one entry per replica, environment cloud)", api=True)
    requeue: bool | None = _flag("--requeue/--no-requeue",
                                 help="let the job be requeued (default: on with --signal)")
    signal: str | None = _flag("--signal", help="preemption signal to the ranks, [R:]SIG[@SECONDS], e.g. USR1@60")
    python: str = "python3"  # the submitting interpreter; the site's `python` wins
    job_root: str = "~/.slurmtorch/jobs"  # absolute in practice; the CLI resolves it
    command: tuple[str, ...] = ()  # argv that made this, for the provenance header
    # `slurmtorch alloc` and its `slurmtorch run`: the ranks start from a shell in an
    # salloc allocation, not from a batch script (submit/launch/interactive.py).
    interactive: bool = False
    roles: tuple[str, ...] = _flag(  # raw ROLE=COUNT strings
        "--role", metavar="ROLE=NODES[:partition=P][:gpus=N][:tasks=N][:spare=N]", default=(),
        help="a role job: master|chief=1, worker=N, ps=N, evaluator=N (counts in NODES; repeatable). Each rank gets CLUSTER_SPEC/TF_CONFIG with every role's host:port list; the torch "
             "world is master/chief + workers; ps/evaluator get MASTER_ADDR/PORT but no process group. "
             "--role chief=1 names the leader chief in CLUSTER_SPEC too. A role's own partition (its node "
             "type), GPUs per node or tasks per node (default: one per GPU, else one), e.g. "
             "worker=4:partition=gpu:gpus=4:tasks=4: roles on different resources run as one Slurm "
             "heterogeneous job; spare=N (with --max-restarts): N spare nodes of the role's kind")
    ray: bool | None = _flag(
        "--ray", api=True,
        help="start a Ray cluster in the job (the head on the first node, on the site's fabric interface; a "
             "worker on every other node; one task per node with its CPUs and GPUs), then run the script once "
             "on the head as its Ray driver, with RAY_ADDRESS set; a Ray node that dies ends the job, naming "
             "it; Ray is stopped on every node at the end. Ray must be installed where the job's python runs")
    container_image: str | None = _flag("--container-image", metavar="IMAGE",
                                        help="run every rank in IMAGE (default: the preset's, else the site's container)")
    container_runtime: str | None = _flag("--container-runtime", metavar=_choices(CONTAINER_RUNTIMES),
                                          help="what runs --container-image (default: the preset's or the site's "
                                               "container's, else pyxis)")
    role_images: tuple[str, ...] = _flag("--role-image", metavar="ROLE=IMAGE", default=(),  # raw ROLE=IMAGE strings
                                         help="image for one role of a --role job (repeatable)")
    array: str | None = _flag(
        "--array", metavar="INDICES[%MAX]",
        help="a Slurm job array of multi-node jobs, e.g. 0-19%4; with --sweep the indices are trial ids and "
             "a bare %MAX limits how many run at once")
    sweep: tuple[str, ...] = _flag(  # raw NAME=V1,V2 strings
        "--sweep", metavar="NAME=V1,V2", default=(),
        help="a grid sweep (the product of every --sweep), one array task per trial; trial K gets "
             "SLURMTORCH_TRIAL=K, SLURMTORCH_SWEEP_<NAME>=V, SLURMTORCH_PARAMS (JSON) and --NAME V appended "
             "to the script arguments")

    # sbatch's own options, passed on as #SBATCH lines after a check (submit/launch/sbatch_options.py).
    constraint: str | None = _flag("-C", "--constraint", metavar="FEATURES",
                                   help="node features, in sbatch's syntax (e.g. 'a100&ib', '[rack1|rack2]')",
                                   sbatch="constraint", api=True)
    mem: str | None = _flag("--mem", metavar="SIZE[K|M|G|T]",
                            help="memory per node (0: all of it); checked against the node type's memory_gb",
                            sbatch="mem", api=True)
    mem_per_cpu: str | None = _flag("--mem-per-cpu", metavar="SIZE[K|M|G|T]", help="memory per CPU",
                                    sbatch="mem-per-cpu", api=True)
    mem_per_gpu: str | None = _flag("--mem-per-gpu", metavar="SIZE[K|M|G|T]", help="memory per GPU",
                                    sbatch="mem-per-gpu", api=True)
    exclusive: bool | None = _flag("--exclusive", help="do not share the nodes with other jobs",
                                   sbatch="exclusive", api=True)
    dependency: str | None = _flag("-d", "--dependency", metavar="TYPE:JOBID[:JOBID...]",
                                   help="start after other jobs, e.g. afterok:1234, or singleton",
                                   sbatch="dependency", api=True)
    begin: str | None = _flag("--begin", metavar="TIME",
                              help="start no earlier than TIME, e.g. now+1hour, 2026-01-31T20:00, tomorrow",
                              sbatch="begin", api=True)
    gres: str | None = _flag("--gres", metavar="NAME[:TYPE][:COUNT]",
                             help="generic resources other than GPUs (those: --gpus-per-node), e.g. nvme:1",
                             sbatch="gres", api=True)
    reservation: str | None = _flag("--reservation", metavar="NAME", help="run in this reservation",
                                    sbatch="reservation", api=True)
    nodelist: str | None = _flag("-w", "--nodelist", metavar="HOSTLIST", help="nodes the job must include, e.g. gpu[01-04]",
                                 sbatch="nodelist", api=True)
    exclude: str | None = _flag("-x", "--exclude", metavar="HOSTLIST", help="nodes the job must not use",
                                sbatch="exclude", api=True)
    mail_type: str | None = _flag("--mail-type", metavar="TYPE[,TYPE...]", help="mail on BEGIN, END, FAIL, ALL, ...",
                                  sbatch="mail-type", api=True)
    mail_user: str | None = _flag("--mail-user", metavar="ADDRESS", help="who gets --mail-type's mail",
                                  sbatch="mail-user", api=True)
    comment: str | None = _flag("--comment", help="a comment Slurm keeps with the job", sbatch="comment", api=True)
    # Recovery without a human (submit/launch/recovery.py checks them; submit/batchnode/supervisor.py runs them).
    max_restarts: int | None = _flag(
        "--max-restarts", metavar="N",
        help="after a failure, start the step again, up to N times in all: on spare nodes (--spare-nodes) "
             "without the node it blames, else by requeueing the job without it; a failure of the script "
             "itself is retried once. The script resumes from slurmtorch.checkpoint_dir() when "
             "slurmtorch.restart_count() > 0", api=True)
    spare_nodes: int | None = _flag(
        "--spare-nodes", metavar="K",
        help="with --max-restarts: hold K nodes more than --nodes, to replace a failed node at once", api=True)
    hang_timeout: int | None = _flag(
        "--hang-timeout", metavar="SECONDS",
        help="with --max-restarts: end and restart a step in which a rank has stopped, or is stuck in its "
             "own code while the others wait for it, for SECONDS (well below --timeout); with --ray: how long "
             "the Ray cluster may take to form (default 300)", api=True)
    replace_straggler: float | None = _flag(
        "--replace-straggler", metavar="MARGIN",
        help="with --max-restarts and --spare-nodes: a rank slower than the median by MARGIN (0.2: 20%) in 3 "
             "live samples running has its node replaced by a spare, as a failed node is: the step ends and "
             "starts again without that node", api=True)
    # The escape hatch: anything else, as typed, quoted on the one path.
    sbatch_args: tuple[str, ...] = _flag(
        "--sbatch-arg", metavar="--OPTION[=VALUE]", default=(),
        help="another sbatch option as an #SBATCH line, e.g. --sbatch-arg=--licenses=fs:1 (repeatable); "
             "options slurmtorch sets itself are refused", api=True)
    srun_args: tuple[str, ...] = _flag(
        "--srun-arg", metavar="--OPTION[=VALUE]", default=(),
        help="an option for every srun that starts ranks, e.g. --srun-arg=--gpu-bind=closest (repeatable)", api=True)
    mpirun_args: tuple[str, ...] = _flag(
        "--mpirun-arg", metavar="ARG", default=(),
        help="an argument for mpirun, after slurmtorch's own (repeatable; one word each, so an option's value "
             "is one more: --mpirun-arg=-x --mpirun-arg=NAME=VALUE), e.g. --mpirun-arg=--tag-output")

    @classmethod
    def given(cls, values: Mapping[str, Any], **edge: Any) -> Options:
        """Options from what a front end was given: None (not given) keeps the default, a
        list becomes a tuple; `edge`, values the front end resolved itself, win."""
        kept: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in {**values, **edge}.items()
                                if v is not None}
        return cls(**kept)

    def pick(self, preset: Mapping[str, Any], name: str, default: Any = None) -> Any:
        """The option `name`: as given, else the preset's, else `default`."""
        value = getattr(self, name)
        return value if value is not None else preset.get(name, default)


def positive(name: str, value: int, tip: str | None = None) -> int:
    """`value` if it is at least 1, else a SpecError naming the option."""
    if value < 1:
        raise SpecError(f"{name} must be at least 1, got {value}", tip=tip)
    return value


# The `#SBATCH` options passed on as typed once checked (field -> name), and the Distributor's
# keywords: read off the table above, so no front end lists them again.
SBATCH_PASSED_ON = {f.name: f.metadata["sbatch"] for f in fields(Options) if f.metadata.get("sbatch")}
API_KEYWORDS = tuple(f.name for f in fields(Options) if f.metadata.get("api"))


def split_script(script_and_args: list[str] | None, module: str | None) -> tuple[str | None, list[str]]:
    """SCRIPT [--] [ARGS...] or -m MODULE [--] [ARGS...]; SCRIPT must exist and becomes absolute.

    Everything after SCRIPT (or MODULE) is the program's, as with sbatch and torchrun; a
    `--` right after it only separates, and is dropped. The one filesystem check of the
    spec side, called at the edge (CLI, Distributor) before `build_spec`, so a missing
    SCRIPT never reaches a job folder.
    """
    items = list(script_and_args or [])
    if module is not None:
        return None, items[1:] if items[:1] == ["--"] else items
    if not items:
        raise SpecError("missing SCRIPT", tip=f"e.g. {typed('sbatch train.py --lr 0.1')}, or -m pkg.train")
    script, args = items[0], items[1:]
    problem = file_problem(script)
    if problem:
        shown = repr(script) if problem == "contains a newline" else script
        raise SpecError(f"SCRIPT {shown} {problem}", tip="check the path; use -m MODULE for a module")
    return os.path.abspath(script), args[1:] if args[:1] == ["--"] else args
