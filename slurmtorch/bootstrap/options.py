"""The bootstrap's command line: `BootstrapOptions`, USAGE/HELP and `parse_args` (pure).

Our options stop at SCRIPT or -m MODULE; everything after belongs to the script.
Always a timeout: `--timeout` (default 600 s) goes to init_process_group, and one that
cannot be a process-group timeout is refused here (`timeout_problem`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurmtorch import initargs
from slurmtorch.backends import BACKENDS, timeout_problem
from slurmtorch.errors import BootstrapError
from slurmtorch.localrank import LOCAL_RANK_FORMS
from slurmtorch.protocol import CLUSTER_SPEC_SHAPES
from slurmtorch.roles import ROLE_ORDER

DEFAULT_TIMEOUT = 600.0
FROM = ("auto", "mpi", "slurm", "env", "torchrun", "single")

USAGE = ("usage: python -m slurmtorch.bootstrap [--backend auto|nccl|gloo|mpi] [--timeout SECONDS] "
         "[--no-init] [--from auto|mpi|slurm|env|torchrun|single] [--init-args[=rank|node][:URL,RANK,WORLD]] "
         "[--local-rank-arg[=local_rank|local-rank]] [--role ROLE] [--cluster-spec ai-platform|vertex] "
         "[--import-from DIR] "
         "(SCRIPT | -m MODULE) [ARGS...]")

HELP = USAGE + """

Derive this rank's world from the launcher (mpirun, srun, torchrun, or none), export
MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/NODE_RANK/GROUP_RANK,
CLUSTER_SPEC and TF_CONFIG, initialise torch.distributed, and run SCRIPT (or -m MODULE)
as __main__. Without SCRIPT: a self-check that prints the world and an all_reduce.

  --backend B       auto (nccl with CUDA+NCCL, else gloo) | nccl | gloo | mpi
  --timeout S       process-group timeout in seconds (default 600); also bounds MPI_Init
  --no-init         only set the environment; the script calls init_process_group
  --from F          where the world comes from: auto | mpi | slurm | env | torchrun | single
  --init-args       append --init_method tcp://ADDR:PORT --rank R --world_size N
  --init-args=node  the same per node (node rank / node count; one task per node;
                    implies --no-init, the script starts its own processes)
  --init-args=SHAPE:URL,RANK,WORLD  the same under the script's own flag names, e.g.
                    --init-args=node:dist-url,rank,world-size (pytorch/examples' imagenet)
  --local-rank-arg  put --local_rank=LOCAL_RANK before the script's arguments, as
                    DeepSpeed's launcher and torch.distributed.launch (torch < 2.0) do;
                    =local-rank: --local-rank=LOCAL_RANK (torch.distributed.launch >= 2.0)
  --cluster-spec S  CLUSTER_SPEC's shape: ai-platform (master/worker, one entry per rank;
                    the default) or vertex (Vertex AI's workerpool0..3, one per replica)
  --role ROLE       this srun step runs ROLE of a role job (master|chief|worker|ps|
                    evaluator; layout in $SLURMTORCH_ROLES); ps and evaluator ranks
                    get the contracts but no process group
  --import-from DIR -m MODULE is imported from DIR (a job's copy of its code), not from
                    the working folder the rank started in
"""


@dataclass
class BootstrapOptions:
    """What the bootstrap's command line asked for (filled in by `parse_args`)."""

    backend: str = "auto"
    timeout: float = DEFAULT_TIMEOUT
    init: bool = True
    source: str = "auto"
    init_args: str | None = None
    local_rank_arg: str | None = None
    role: str | None = None
    cluster_spec: str = "ai-platform"
    import_from: str | None = None
    script: str | None = None
    module: str | None = None
    args: list[str] = field(default_factory=list)


class UsageError(BootstrapError):
    exit_code = 2


def parse_args(argv: list[str]) -> BootstrapOptions:
    """Our options stop at SCRIPT or -m MODULE; everything after belongs to the script."""
    opts = BootstrapOptions()
    i = 0

    def value(name: str, inline: str | None) -> str:
        nonlocal i
        if inline is not None:
            return inline
        if i + 1 >= len(argv):
            raise UsageError(f"{name} needs a value", tip=USAGE)
        i += 1
        return argv[i]

    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            if i + 1 < len(argv):
                opts.script, opts.args = argv[i + 1], list(argv[i + 2:])
            break
        if arg == "-m":
            if i + 1 >= len(argv):
                raise UsageError("-m needs a module name", tip=USAGE)
            opts.module, opts.args = argv[i + 1], list(argv[i + 2:])
            break
        if arg in ("-h", "--help"):
            raise SystemExit(print(HELP) or 0)
        if not arg.startswith("-") or arg == "-":
            opts.script, opts.args = arg, list(argv[i + 1:])
            break
        name, eq, given = arg.partition("=")
        inline = given if eq else None
        if name == "--backend":
            opts.backend = value(name, inline)
            if opts.backend not in BACKENDS:
                raise UsageError(f"--backend {opts.backend!r} is not one of {', '.join(BACKENDS)}")
        elif name == "--timeout":
            text = value(name, inline)
            try:
                opts.timeout = float(text)
            except ValueError:
                raise UsageError(f"--timeout {text!r} is not a number of seconds") from None
            problem = timeout_problem(opts.timeout)
            if problem:
                raise UsageError(f"--timeout {text}: {problem}")
        elif name == "--no-init":
            opts.init = False
        elif name == "--from":
            opts.source = value(name, inline)
            if opts.source not in FROM:
                raise UsageError(f"--from {opts.source!r} is not one of {', '.join(FROM)}")
        elif name == "--cluster-spec":
            opts.cluster_spec = value(name, inline)
            if opts.cluster_spec not in CLUSTER_SPEC_SHAPES:
                raise UsageError(f"--cluster-spec {opts.cluster_spec!r} is not one of {', '.join(CLUSTER_SPEC_SHAPES)}")
        elif name == "--role":
            opts.role = value(name, inline)
            if opts.role not in ROLE_ORDER:
                raise UsageError(f"--role {opts.role!r} is not one of {', '.join(ROLE_ORDER)}")
        elif name == "--import-from":
            opts.import_from = value(name, inline)
        elif name == "--init-args":
            # Only the `=` form takes a value: `--init-args train.py` must not eat the script.
            opts.init_args = inline or "rank"
            try:
                shape, _ = initargs.parse(opts.init_args)
            except initargs.InitArgsError as exc:
                raise UsageError(str(exc), tip=initargs.TIP) from None
            if shape == "node":
                opts.init = False
        elif name == "--local-rank-arg":
            # Only the `=` form takes a value, as with --init-args.
            opts.local_rank_arg = inline or LOCAL_RANK_FORMS[0]
            if opts.local_rank_arg not in LOCAL_RANK_FORMS:
                raise UsageError(f"--local-rank-arg={opts.local_rank_arg} is not {' or '.join(LOCAL_RANK_FORMS)}")
        else:
            raise UsageError(f"unknown option {arg!r}", tip=USAGE)
        i += 1
    return opts
