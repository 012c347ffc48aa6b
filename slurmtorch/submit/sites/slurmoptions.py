"""Which Slurm options a user (--sbatch-arg, --srun-arg) or a site (`directives:`,
`srun_args:`) may pass, and why not the others: the refusal tables and the option grammar.
The site model checks a site's directives with them; the launch checks the user's and writes
the #SBATCH lines (launch/sbatch_options.py)."""

from __future__ import annotations

import re

from slurmtorch import shell
from slurmtorch.errors import SpecError
from slurmtorch.options import SBATCH_PASSED_ON

# Options field -> #SBATCH name, for the ones passed on as typed after their check (the table's).
PASSED_ON = SBATCH_PASSED_ON

# Options the escape hatch refuses: name -> (why, tip). First the #SBATCH lines slurmtorch
# writes itself (spec.sbatch_header) or has an option for: through --sbatch-arg they would
# contradict the layout the ranks derive their world from, the job folder's log paths or
# the array's trial table; then those that would break the submission.
_SETS = "slurmtorch sets it"
_LAYOUT = "slurmtorch sets it (the ranks derive their world from it)"
_LOGS = ("slurmtorch sets it: the job folder holds the logs", "leave it out; `slurmtorch logs JOBID` shows them")
SBATCH_REFUSED: dict[str, tuple[str, str]] = {
    "nodes": (_LAYOUT, "use --nodes"), "ntasks": (_LAYOUT, "use -n/--ntasks"),
    "ntasks-per-node": (_LAYOUT, "use --ntasks-per-node"), "cpus-per-task": (_SETS, "use -c/--cpus-per-task"),
    "gpus-per-node": (_LAYOUT, "use --gpus-per-node"), "array": (_SETS, "use --array"),
    **{name: (_SETS, f"use --{name}") for name in ("partition", "job-name", "time", "account", "qos", "signal",
                                                    "requeue", "no-requeue")},
    "output": _LOGS, "error": _LOGS, "open-mode": (_SETS + " (append when the job may be requeued)", "leave it out"),
    **{name: ("slurmtorch has an option for it", f"use --{name}") for name in PASSED_ON.values()},
    "cpus-per-gpu": ("sbatch takes it or --cpus-per-task, which slurmtorch sets", "use -c/--cpus-per-task"),
    "wrap": ("the job is slurmtorch's script", "leave it out"),
    "wait": ("sbatch would block instead of printing the job id", "use slurmtorch's --wait"),
    "test-only": ("sbatch would submit nothing", "use --dry-run"),
    # edge.sbatch.submit submits held and releases the job once its folder is in place.
    "hold": ("slurmtorch submits the job held and releases it once its folder is ready, which would undo it",
             "hold it after submitting: scontrol hold JOBID"),
    # CSCS's Container Engine on the batch step: "experimental", and srun then fails to load
    # its Slurm plugins (docs/software/alps-extended-images.md in eth-cscs/cscs-docs).
    "environment": ("CSCS's Container Engine belongs on the ranks' srun, not on sbatch",
                    "use --container-runtime cscs-ce --container-image IMAGE (or the site's container)"),
}
# srun options of the launch lines (launchplan.plan) slurmtorch sets, and those that would
# start something other than one bootstrap per rank in this job.
_STEP = ("every rank must run slurmtorch's bootstrap in this job's step", "leave it out")
SRUN_REFUSED: dict[str, tuple[str, str]] = {
    "nodes": (_LAYOUT, "use --nodes"), "ntasks": (_LAYOUT, "use -n/--ntasks"),
    "ntasks-per-node": (_LAYOUT, "use --ntasks-per-node"), "cpus-per-task": (_LAYOUT, "use -c/--cpus-per-task"),
    "relative": (_LAYOUT, "use --role"), "output": _LOGS, "error": _LOGS, "open-mode": (_SETS, "leave it out"),
    "kill-on-bad-exit": (_SETS + ": a failed rank ends the step at once, not after the process-group timeout",
                         "leave it out"),
    "mpi": (_SETS + " from the site's srun_mpi", "set srun_mpi in the site config (or a preset)"),
    "container-image": (_SETS, "use --container-image"), "container-mounts": (_SETS, "set the site's container mounts"),
    "environment": (_SETS + " for a cscs-ce container (the EDF it writes into the job folder, with the job "
                    "folder mounted and the image's python)",
                    "use --container-runtime cscs-ce --container-image IMAGE (or the site's container)"),
    "export": ("--export=NONE would start the ranks without PATH or the script's exports", "use --env NAME=VALUE"),
    "multi-prog": _STEP, "pty": _STEP, "jobid": _STEP, "het-group": _STEP,
}
# A site's `directives:` (site, partition, preset) may set or remove (null) any #SBATCH line
# but those slurmtorch writes from the job itself or keeps an option for (SBATCH_REFUSED,
# less the options passed on as typed, which a site may default). Of those, only
# `partition` may be removed: a QOS-routed site (NERSC Perlmutter: `-q regular -C gpu`)
# submits without one. The others carry the layout the ranks derive their world from, the
# job folder's logs, or the job's identity. Each with the fix a site file has.
SITE_REMOVABLE = frozenset({"partition"})
_SITE_TIPS = {
    "partition": "a job's partition is a `partitions:` entry (-p): slurm_partition: NAME sends an entry to another "
                 "Slurm partition (several QOS on one); null removes the line on a QOS-routed site",
    "time": "set partitions.NAME.default_time, or time: in a preset",
    "account": "set account: on the partition or in a preset",
    "qos": "set qos: on the partition or in a preset",
    "job-name": "leave it out: jobs are named after their script (-J)",
    "signal": "set signal: in a preset", "requeue": "set requeue: in a preset",
    "no-requeue": "set requeue: false in a preset",
    "nodes": "set nodes: in a preset", "ntasks-per-node": "set ntasks_per_node: in a preset",
    "cpus-per-task": "set cpus_per_task: in a preset", "gpus-per-node": "set gpus_per_node: in a preset",
}
# Real sbatch options that are prefixes of refused ones: getopt reads any other unambiguous
# prefix as the option it starts (`--part=x` is --partition), so those prefixes are refused.
REAL_PREFIXES = {"gpus"}
_NAME_RE = r"[a-z][a-z0-9-]*"


def option_names(args) -> list[str]:
    """The long option names of `--name[=value]` strings (others are left to escape_hatch)."""
    return [str(a)[2:].partition("=")[0] for a in args if str(a).startswith("--")]


def check_refused(names, refused: dict[str, str], partition: str, flag: str) -> None:
    """Refuse the first option in `names` the site's `refused_options` lists, with the centre's reason."""
    for name in names:
        if name in refused:
            shown = f"{flag}=--{name}" if flag else f"--{name}"
            raise SpecError(f"{shown} is refused on partition {partition!r}: {refused[name]}",
                            tip=f"leave --{name} out (the site's refused_options)")


def site_directive_problem(name: str, value: object) -> tuple[str, str] | None:
    """(problem, tip) of a site's `directives:` entry (None: remove the line), or None if fine."""
    if name == "gres" and isinstance(value, str) and any(item.split(":")[0].lower() == "gpu"
                                                         for item in value.split(",")):
        # Beside the job's own GPU request it would be a second one (JSC, IDRIS: gres).
        return ("a GPU request here would be the job's second one",
                "set gpu_request: gres (the count comes from the node type's gpus; --gpus-per-node changes it)")
    site_refused = {k: v for k, v in SBATCH_REFUSED.items() if k not in PASSED_ON.values()}
    full = refused_name(name, site_refused, REAL_PREFIXES)
    if full is None:
        return None
    read_as = "" if full == name else f"read as --{full}; "
    if value is None and full in SITE_REMOVABLE:
        return None if full == name else (f"{read_as}write the option's full name", f"{full}: null")
    tip = _SITE_TIPS.get(full, site_refused[full][1] if site_refused[full][1] != "leave it out" else "leave it out")
    if value is None:
        return f"{read_as}the #SBATCH --{full} line cannot be removed: {site_refused[full][0]}", tip
    return f"{read_as}{site_refused[full][0]}", tip


def shorten(arg: str, most: int = 60) -> str:
    """`arg` for an error line: a long mask list cut, with '...'."""
    return arg if len(arg) <= most else arg[:most] + "..."


def escape_hatch(args: tuple[str, ...], flag: str, refused: dict[str, tuple[str, str]], real_prefixes: set[str]
                 ) -> dict[str, str | bool]:
    """`--name[=value]` strings -> {name: value (True: a bare flag)}; one line for the first bad one."""
    out: dict[str, str | bool] = {}
    for arg in args:
        text = str(arg)
        problem = option_problem(text, refused, real_prefixes)
        if problem is not None:
            why, tip = problem
            shown = f"{text!r}" if why.startswith("expected") else text
            raise SpecError(f"{flag}={shown}: {why}",
                            tip=f"e.g. {flag}=--licenses=fs:1 (a value joins its option with '=', not a space)"
                            if why.startswith("expected") else tip)
        name, eq, value = text[2:].partition("=")
        if name in out:
            raise SpecError(f"{flag}: --{name} given twice", tip="give each option once")
        shell.directive_value(value, what=f"{flag} --{name} value")  # one line, no NUL, UTF-8
        out[name] = value if eq else True
    return out


def option_problem(text: str, refused: dict[str, tuple[str, str]], real_prefixes: set[str]
                   ) -> tuple[str, str] | None:
    """(problem, tip) of one `--name[=value]` string, or None when it may pass.

    The one rule for options slurmtorch keeps for itself, read by the escape hatch
    (--sbatch-arg, --srun-arg) and by site validation (srun_args, directives).
    """
    name = text[2:].partition("=")[0]
    if not text.startswith("--") or not re.fullmatch(_NAME_RE, name):
        return "expected --OPTION or --OPTION=VALUE, with the long option name", ""
    full = refused_name(name, refused, real_prefixes)
    if full is None:
        return None
    why, tip = refused[full]
    return ("" if full == name else f"read as --{full}; ") + why, tip


def refused_name(name: str, refused: dict[str, tuple[str, str]], real_prefixes: set[str]) -> str | None:
    """The refused option `name` is, or abbreviates (getopt reads any unambiguous prefix)."""
    if name in refused:
        return name
    if name in real_prefixes:
        return None
    return next((known for known in refused if known.startswith(name)), None)
