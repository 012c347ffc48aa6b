"""sbatch's own options that slurmtorch passes on, and the escape hatch for everything else.

`-C/--constraint`, `--mem`/`--mem-per-cpu`/`--mem-per-gpu`, `--exclusive`, `-d/--dependency`,
`--begin`, `--gres`, `--reservation`, `-w/--nodelist`, `-x/--exclude`, `--mail-type`,
`--mail-user` and `--comment` become `#SBATCH` lines as typed, once checked: what the
site knows (the node type's memory and GPUs, the job's node count) and the syntax sbatch
reads are refused here, in one line, rather than by sbatch or, worse, by a job that
pends forever or never starts. `--sbatch-arg=--name[=value]` adds any other `#SBATCH`
line and `--srun-arg=--name[=value]` any option to every srun that starts ranks; both
refuse the options slurmtorch sets itself (the layout the ranks are derived from, the
job folder's log paths, the array's trials) and those that would break the submission.
Values reach the script only through the one quoting path: `shell.directive_value` for
the header (`spec.sbatch_header`), `join_q` for srun lines (`launchplan.plan`).
"""

from __future__ import annotations

import re

from slurmtorch.errors import SpecError, typed
from slurmtorch.submit.sites.model import NodeType
from slurmtorch.options import Options
from slurmtorch.submit.sites.slurmoptions import (PASSED_ON, REAL_PREFIXES, SBATCH_REFUSED, SRUN_REFUSED, check_refused,
                                                 escape_hatch, option_names, shorten)

# The patterns are compiled on first use (re's cache): a job given none of these options, most
# of them, never needs one, and compiling them all was ~1 ms of every dry run.
_SIZE_RE = r"(\d+)([KMGTkmgt]?)"
_UNIT_MB = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
_JOB_ID = r"\d+(?:_(?:\d+|\*))?(?:\+\d+)?"  # 123, array task 123_4 or 123_*, +time (after) / +het offset
_DEPENDENCY_RE = rf"singleton|(?:after|afterany|afterburstbuffer|aftercorr|afternotok|afterok)(?::{_JOB_ID})+"
_DEPENDENCY_TIP = ("TYPE:JOBID[:JOBID...] joined by ',' (all) or '?' (any), e.g. afterok:1234, afterany:1234:1240, "
                   "singleton; TYPE: after, afterany, afterburstbuffer, aftercorr, afternotok, afterok")
# One token of Slurm's time syntax (parse_time.c): the tokens may be joined by blanks, '-' or 'T'.
_BEGIN_TOKEN = r"""(?ix)
    (?:today|tomorrow|midnight|noon|elevenses|fika|teatime)
  | now(?:\s*[+-]\s*\d+\s*(?:seconds?|minutes?|hours?|days?|weeks?)?)?
  | (?P<hour>\d{1,2}):(?P<minute>\d{2})(?::(?P<second>\d{2}))?(?:\s*[ap]m)?
  | \d{4}-(?P<ymonth>\d{1,2})-(?P<yday>\d{1,2})
  | (?P<month>\d{1,2})[./]?(?P<day>\d{1,2})(?:[./]?\d{2})?
"""
_BEGIN_TIP = ("e.g. now+1hour, 16:00, 2026-01-31T20:00:00, 01/31-20:00, tomorrow, midnight "
              "(sbatch's --begin: HH:MM[:SS] [AM|PM], MMDD[YY], MM/DD[/YY], YYYY-MM-DD[THH:MM[:SS]], "
              "now[+COUNT[seconds|minutes|hours|days|weeks]])")
MAIL_TYPES = ("NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT", "TIME_LIMIT",
              "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS")
_GRES_RE = r"[A-Za-z][A-Za-z0-9_]*(?::[A-Za-z0-9_.-]+)?(?::\d+[KMGTkmgt]?)?"


def sbatch_directives(o: Options, node: NodeType, partition: str, layout: tuple[int, int, int, int],
                      gpu_request: str = "gpus-per-node", refused: dict[str, str] | None = None
                      ) -> dict[str, str | bool]:
    """#SBATCH name -> value for the options passed on and every --sbatch-arg, checked.

    `layout` is (nodes, GPUs per node, most ranks on a node, CPUs per rank); `gpu_request`
    how the site asks for GPUs (gres: --gres gpu:N is the GPU request, and may be given);
    `refused` the options the site refuses, with its reason.
    """
    given = {name: getattr(o, field) for field, name in PASSED_ON.items() if getattr(o, field) not in (None, False)}
    sbatch_args = tuple(o.sbatch_args)
    if gpu_request == "gres" and "gres" not in given:
        # Where GPUs are asked for with --gres, --sbatch-arg=--gres=gpu:N says what --gres does.
        gres_arg = next((a for a in sbatch_args if str(a).startswith("--gres=")), None)
        if gres_arg is not None:
            given["gres"] = str(gres_arg)[len("--gres="):]
            sbatch_args = tuple(a for a in sbatch_args if a is not gres_arg)
    if o.kind != "sbatch" and (given or o.sbatch_args or o.srun_args):
        first = next(iter(given), None)
        flag = f"--{first}" if first else ("--sbatch-arg" if o.sbatch_args else "--srun-arg")
        raise SpecError(f"{flag} is an option of a Slurm job; slurmtorch mpirun starts no job",
                        tip=f"use {typed('sbatch')}")
    nodes, gpus, tasks, cpus = layout
    # The centre's reason first: it says more than ours (--sbatch-arg=--mem: "use --mem").
    check_refused(given, refused or {}, partition, "")
    check_refused(option_names(sbatch_args), refused or {}, partition, "--sbatch-arg")
    hatch = escape_hatch(sbatch_args, "--sbatch-arg", SBATCH_REFUSED, REAL_PREFIXES)
    check_memory(given, node, partition, gpus, tasks * cpus)
    check_node_lists(given.get("nodelist"), given.get("exclude"), nodes)
    checks = {"dependency": check_dependency, "begin": check_begin, "mail-type": check_mail_type}
    for name, value in given.items():
        if value is not True and not str(value).strip():
            raise SpecError(f"--{name} is empty", tip=f"leave --{name} out, or give it a value")
        if name in checks:
            checks[name](value)
        if name == "gres":
            check_gres(value, gpu_request, gpus)
    return {**given, **hatch}


def srun_arguments(o: Options, launcher: str, site_args: tuple[str, ...] = (),
                   refused: dict[str, str] | None = None, partition: str = "") -> tuple[str, ...]:
    """The extra options of every srun that starts ranks: the site's (`site_args`: site,
    node type, partition; checked on load) first, then --srun-arg as typed (one argv word
    each), checked here; none for the mpirun launcher, which starts its ranks without srun."""
    if launcher == "mpirun":
        if o.srun_args:
            raise SpecError("--srun-arg: launcher mpirun starts its ranks without srun", tip="use --launcher srun")
        return ()
    check_refused(option_names(o.srun_args), refused or {}, partition, "--srun-arg")
    escape_hatch(o.srun_args, "--srun-arg", SRUN_REFUSED, set())
    args = (*site_args, *o.srun_args)
    per_task = next((a for a in args if a.partition("=")[0] in ("--gpus-per-task", "--gpus")
                     or _cpus_per_task_list(a)), None)
    if launcher == "torchrun" and per_task is not None:
        # torchrun's one agent per node spawns every rank of the node: it needs all its GPUs and
        # CPUs, not the first rank's mask (LUMI's --cpu-bind=mask_cpu:... gives one per GCD).
        source = "--srun-arg" if per_task in o.srun_args else "the site's srun_args"
        what = "CPUs" if _cpus_per_task_list(per_task) else "GPUs"
        raise SpecError(f"{shorten(per_task)} (from {source}) would give torchrun's one agent per node a share of "
                        f"the node's {what}, not each rank", tip="use --launcher srun, which starts one task per rank")
    return args


def _cpus_per_task_list(arg: str) -> bool:
    """Whether `arg` binds each task to its own CPUs from a list (srun --cpu-bind=map_cpu:/mask_cpu:)."""
    name, _, value = arg.partition("=")
    return name == "--cpu-bind" and any(kind in value for kind in ("map_cpu:", "mask_cpu:", "map_ldom:", "mask_ldom:"))


def megabytes(text: str, flag: str) -> float:
    """A size in Slurm's units (no suffix: megabytes; K, M, G, T are powers of 1024)."""
    m = re.fullmatch(_SIZE_RE, str(text))
    if not m:
        raise SpecError(f"invalid {flag} {text!r}", tip=f"a size such as {flag} 64G, 500M or 1T (no unit: megabytes)")
    return int(m[1]) * _UNIT_MB[m[2].upper()]


def check_memory(given: dict, node: NodeType, partition: str, gpus: int, cpus_per_node: int) -> None:
    """At most one of --mem, --mem-per-cpu, --mem-per-gpu, and no more than a node has."""
    asked = [name for name in ("mem", "mem-per-cpu", "mem-per-gpu") if name in given]
    if len(asked) > 1:
        raise SpecError(f"--{asked[0]} and --{asked[1]} together: sbatch takes one memory request",
                        tip="per node: --mem; per CPU: --mem-per-cpu; per GPU: --mem-per-gpu")
    if not asked:
        return
    name = asked[0]
    text = given[name]
    mb = megabytes(text, f"--{name}")
    if name != "mem" and mb == 0:
        raise SpecError(f"--{name} {text} is zero", tip="use --mem 0 for all of a node's memory")
    if name == "mem-per-gpu" and gpus == 0:
        raise SpecError("--mem-per-gpu, but the job asks for no GPUs", tip="use --mem (per node) or --mem-per-cpu")
    per_node = mb * {"mem": 1, "mem-per-cpu": cpus_per_node, "mem-per-gpu": gpus}[name]
    if node.memory_gb is not None and per_node > node.memory_gb * 1024:
        times = {"mem": "", "mem-per-cpu": f" x {cpus_per_node} CPUs", "mem-per-gpu": f" x {gpus} GPUs"}[name]
        raise SpecError(f"--{name} {text}{times} is more than the {node.memory_gb}G of memory of node type "
                        f"{node.name!r} (partition {partition!r})",
                        tip=f"use --mem {node.memory_gb}G or less (--mem 0: all of it)")


def check_node_lists(nodelist: str | None, exclude: str | None, nodes: int) -> None:
    """-w/-x: Slurm host lists; -w within --nodes, and no node both asked for and excluded."""
    named = {flag: _hosts(text, flag) for flag, text in (("--nodelist", nodelist), ("--exclude", exclude)) if text}
    wanted = named.get("--nodelist", [])
    if len(wanted) > nodes:
        raise SpecError(f"--nodelist names {len(wanted)} nodes, but the job has {nodes} (--nodes)",
                        tip=f"use --nodes {len(wanted)}, or name fewer nodes")
    both = sorted(set(wanted) & set(named.get("--exclude", [])))
    if both:
        raise SpecError(f"{', '.join(both)} both in --nodelist and in --exclude", tip="name each node in one of them")


def _hosts(text: str, flag: str) -> list[str]:
    import hostlist  # lazy: only a job with -w/-x reads a host list (python-hostlist: Slurm's node[01-04])

    if "/" in text:
        # sbatch reads a value with '/' as a file of node names, which a check here cannot see.
        raise SpecError(f"{flag} {text!r} looks like a file name; slurmtorch takes the node names",
                        tip=f'pass them: {flag} "$(paste -sd, FILE)"')
    try:
        names = hostlist.expand_hostlist(text)
    except Exception as exc:  # hostlist raises BadHostlist
        raise SpecError(f"invalid {flag} {text!r}: {exc}", tip=f"a Slurm host list, e.g. {flag} node[01-04,07]") from None
    if not names:
        raise SpecError(f"{flag} {text!r} names no nodes", tip=f"e.g. {flag} node[01-04]")
    return names


def check_dependency(text: str) -> None:
    """sbatch's TYPE:JOBID[:JOBID...] list, joined by ',' (all of them) or '?' (any), not both."""
    sep = "?" if "?" in text else ","
    if "?" in text and "," in text:
        raise SpecError(f"invalid --dependency {text!r}: ',' (all) and '?' (any) cannot be mixed", tip=_DEPENDENCY_TIP)
    for item in text.split(sep):
        if not re.fullmatch(_DEPENDENCY_RE, item):
            raise SpecError(f"invalid --dependency {text!r}: {item!r} is not TYPE:JOBID", tip=_DEPENDENCY_TIP)


def check_begin(text: str) -> None:
    """A --begin time in Slurm's syntax, its clock and calendar fields in range."""
    if re.fullmatch(r"(?i)uts\d{7,}", text):  # seconds since the epoch
        return
    token, pos, seen = re.compile(_BEGIN_TOKEN), 0, False  # re's cache: compiled once
    while pos < len(text):
        if text[pos] in " \tT-":
            pos += 1
            continue
        m = token.match(text, pos)
        bad = m is None or _out_of_range(m)
        if bad or m is None:
            raise SpecError(f"invalid --begin {text!r}" + (f": {bad}" if isinstance(bad, str) else ""), tip=_BEGIN_TIP)
        pos, seen = m.end(), True
    if not seen:
        raise SpecError(f"invalid --begin {text!r}", tip=_BEGIN_TIP)


def _out_of_range(m: re.Match) -> str | None:
    g = {k: int(v) for k, v in m.groupdict().items() if v is not None}
    limits = (("hour", 23, "hour"), ("minute", 59, "minute"), ("second", 59, "second"),
              ("month", 12, "month"), ("ymonth", 12, "month"), ("day", 31, "day"), ("yday", 31, "day"))
    for key, top, what in limits:
        if key in g and not (g[key] <= top and (g[key] >= 1 or key in ("hour", "minute", "second"))):
            return f"{what} {g[key]} is out of range"
    return None


def check_mail_type(text: str) -> None:
    """A comma list of sbatch's mail events (any case, as sbatch reads them)."""
    for item in str(text).split(","):
        if item.upper() not in MAIL_TYPES:
            raise SpecError(f"invalid --mail-type {text!r}: unknown event {item!r}",
                            tip=f"events: {', '.join(MAIL_TYPES)}")


def check_gres(text: str, gpu_request: str = "gpus-per-node", gpus: int = 0) -> None:
    """NAME[:TYPE][:COUNT] items. GPUs are the job's GPUs per node (each rank's device follows
    from them): on a site that asks for them with --gres (gpu_request: gres) `gpu:N` may say
    so, and must agree; elsewhere they are --gpus-per-node's."""
    if text.lower() == "none":
        return
    for item in text.split(","):
        if not re.fullmatch(_GRES_RE, item):
            raise SpecError(f"invalid --gres {text!r}: {item!r} is not NAME[:TYPE][:COUNT]", tip="e.g. --gres nvme:1")
        if item.split(":")[0].lower() != "gpu":
            continue
        if gpu_request == "none":
            raise SpecError(f"--gres {text}: this site asks Slurm for no GPUs (a node's GPUs come with it)",
                            tip="leave the GPU out of --gres; --gpus-per-node N sets how many the job uses")
        if gpu_request != "gres":
            raise SpecError(f"--gres {text}: GPUs are asked for with --gpus-per-node",
                            tip="use --gpus-per-node N (a GPU model: -C FEATURE, or a partition of that node type)")
        count = item.rsplit(":", 1)[-1]
        if not count.isdigit() or int(count) != gpus:
            raise SpecError(f"--gres {text}: the job has {gpus} GPUs per node, which this site asks for as "
                            f"--gres=gpu:{gpus}", tip="use --gpus-per-node N to change it (or leave --gres out)")
