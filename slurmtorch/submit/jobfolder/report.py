"""What a job's folder says at its end, as lines for the terminal: what went wrong in a
failed one, and a sweep's table of trials.

`failures.parse_failures` (pure) over the folder's batch.out and rank logs, read here:
the first line names the likely root cause (its rank, host, exit code and the line of the
user's code that raised), the next the ranks that failed after it, the last the command
that shows the failing rank's whole log. Every front end (`--wait`, `logs`, `status`,
`Job.result()`, `Distributor.run()`) ends a failed job with these same lines (`describe`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from slurmtorch import protocol, readback
from slurmtorch.errors import BootstrapError, typed
from slurmtorch.protocol import parse_summary
from slurmtorch.rankfiles import parse_stacks
from slurmtorch.roles import RoleLayout, parse_roles
from slurmtorch.submit.jobfolder.jobstatus import JobStatus, clock, exit_code_of
from slurmtorch.submit.jobfolder.terminaltext import final_text, visible
from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.submit.jobfolder.codecopy import read_record
from slurmtorch.submit.jobfolder.batchlines import batch_failures, latest_start, ran_out_of_time
from slurmtorch.submit.jobfolder.failures import RankFailure, is_timeout, latest_exits, parse_failures
from slurmtorch.submit.jobfolder.snapshot import origin
from slurmtorch.submit.jobfolder.story import Story
from slurmtorch.submit.jobfolder.stacks import summary_lines


def failure_report(folder: Path, launcher_log: str = jobdir.BATCH_OUT) -> list[RankFailure]:
    """`parse_failures` over a job folder's batch.out (a Distributor's local run folder:
    mpirun's launcher.out), rank-*.err / node-*.err and the rank-*.exit notes of ranks whose
    script returned; of a restarted job (--max-restarts), what its latest start wrote. A frame
    in the job's copy of the code is named in the tree it was copied from (snapshot.json)."""
    errs = {rank: latest_start(text) for rank, text in jobdir.error_logs(folder).items()}
    layout = role_layout((jobdir.read_job(folder) or {}).get("roles"))
    nodes = readback.text_or_empty(folder / protocol.ROLE_NODES_FILE, readback.RECORD, cut=None).split()
    # A role job's host of every rank, from its nodes in role order (the role nodes file).
    hosts = layout.rank_hosts(nodes) if layout is not None and len(nodes) >= layout.nodes else nodes
    report = parse_failures(latest_start(jobdir.read_log(folder / launcher_log)), errs,
                            latest_exits(jobdir.exit_notes(folder)), hosts, origin(read_record(folder)))
    return with_roles(report, layout)


def role_layout(roles: object) -> RoleLayout | None:
    """job.json's `roles`, read; None for a job without roles, or a job.json of another version."""
    try:
        return parse_roles(roles) if isinstance(roles, str) and roles else None
    except BootstrapError:
        return None


def with_roles(report: list[RankFailure], layout: RoleLayout | None) -> list[RankFailure]:
    """A role job's failures, each with its rank's role and index there (`worker 0`)."""
    if layout is None:
        return report
    return [replace(f, role="%s %d" % layout.role_of(f.rank)) if 0 <= f.rank < layout.total else f for f in report]


def failure_lines(folder: Path, limit: int = 8, launcher_log: str = jobdir.BATCH_OUT,
                  log: Callable[[RankFailure], str] | None = None) -> list[str]:
    """Human lines naming rank, host and cause; the first is the likely root cause. Causes
    and hosts are the ranks' own words: their control characters are made `visible`.
    `launcher_log`: where srun's (a local run's: mpirun's) lines are; `log`: the command that
    shows a failed rank's whole log (default: `slurmtorch logs`, for a job folder)."""
    batch_out = latest_start(jobdir.read_log(folder / launcher_log))
    if ran_out_of_time(batch_out):  # its ranks were ended by it: no rank's failure
        return [visible(line) for line in (*time_limit_lines(folder), *end_stack_lines(folder))]
    before = batch_failures(batch_out, jobdir.read_log(folder / jobdir.NODE_PROLOGUE_ERR))
    if before:  # no rank ran, or what would restart them was killed
        return [visible(f"failed: {cause}") for cause in before[:limit]]
    report = failure_report(folder, launcher_log)
    if log is None:
        job_id = _job_id_of(folder)
        torchrun = jobdir.torchrun_layout(jobdir.read_job(folder)) is not None
        log = (lambda f: log_command(job_id, f, torchrun)) if job_id else None
    lines = describe(report, limit, log)
    if any(f.cause.startswith("hung") or is_timeout(f.cause) for f in report):
        lines += [visible(line) for line in end_stack_lines(folder)]
    return lines


def time_limit_lines(folder: Path) -> list[str]:
    """A job Slurm ended at its time limit: the limit, and what would have kept the run (the
    job's own --time, --signal and --requeue, from its script)."""
    said = jobdir.read_directives(folder)
    limit = f"its time limit (--time {said['time']})" if said.get("time") else "its partition's default time limit"
    if not said.get("signal"):
        tip = ("ask for more with --time, or save and go on: --signal USR1@60 runs the slurmtorch.on_preempt hooks "
               "60 s before the limit and requeues the job, which resumes where slurmtorch.restart_count() > 0")
    elif "requeue" not in said:
        tip = (f"--signal {said['signal']} ran the on_preempt hooks, but the job could not be requeued "
               "(--no-requeue): without it, the job goes on from what its hooks saved")
    else:
        tip = (f"with --signal {said['signal']} it should have been requeued: its lines in batch.out and the rank "
               "logs (`preemption hook ... failed`, `requeue failed`) say why it was not")
    return [f"failed: the job ran past {limit} and Slurm ended it (TIMEOUT)", f"tip: {tip}"]


def describe(report: list[RankFailure], limit: int = 8,
             log: Callable[[RankFailure], str] | None = None) -> list[str]:
    """`failure_report`'s findings as lines (pure): each primary failure with where it
    raised and its exit code, then one line for the ranks that failed because of it, then
    `log`'s command for the first one's whole log (its traceback, what it printed before)."""
    primary = [f for f in report if f.primary]
    secondary = [f for f in report if not f.primary]
    lines = [f"failed: {f.line()}{_at(f)}" for f in primary[:limit]]
    if secondary:
        who = ", ".join(f"{f.rank} ({f.host})" for f in secondary[:limit])
        more = f" and {len(secondary) - limit} more" if len(secondary) > limit else ""
        verb = "then failed" if primary else "failed"
        lines.append(f"{verb}: ranks {who}{more}: {secondary[0].cause}")
    first = primary or secondary
    command = log(first[0]) if first and log is not None else ""
    if command:
        lines.append(f"rank {first[0].rank}'s whole log: {command}")
    return [visible(line) for line in lines]


def _at(failure: RankFailure) -> str:
    """` (at train.py:9, exit 1)`: where the rank's own code raised and its exit code, as known."""
    said = [f"at {failure.where}"] if failure.where else []
    said += [f"exit {failure.code}"] if failure.code is not None else []
    return f" ({', '.join(said)})" if said else ""


def log_command(job_id: str, failure: RankFailure, torchrun: bool) -> str:
    """The command that prints a failed rank's whole log, as the user types it (errors.typed):
    `slurmtorch logs 42 --rank 2`; a trial's (`42_3`) with `--trial 3`; a torchrun job logs
    per node, so `--node N` (the node log it reported in; else srun's task, which is its node)."""
    base, _, trial = job_id.partition("_")
    words = f"logs {base}" + (f" --trial {trial}" if trial else "")
    which = failure.log if failure.log is not None else failure.rank
    return typed(f"{words} --node {which}" if torchrun else f"{words} --rank {failure.rank}")


def _job_id_of(folder: Path) -> str:
    """The job id a job folder (jobs/42) or trial folder (jobs/42/trial-3: `42_3`) stands
    for; '' for another folder (a Distributor's local run)."""
    name, parent = folder.name, folder.parent.name
    if name.startswith("trial-") and name[6:].isdigit() and parent.isdigit():
        return f"{parent}_{name[6:]}"
    return name if name.isdigit() else ""


def end_stack_lines(folder: Path) -> list[str]:
    """Where the ranks stood as they ended (a timed-out collective's stack, or a SIGTERM's
    dump: bootstrap.stacks), grouped; [] when none left one."""
    ended = {}
    for path in (folder / protocol.STACKS).glob(protocol.end_stacks_name("*")):
        stacks = parse_stacks(readback.text_or_empty(path, readback.STACKS, below=folder, cut=None))
        if stacks is not None and stacks.threads:
            ended[stacks.rank] = stacks
    lines = summary_lines(ended)
    return ["stacks as the ranks ended:", *(f"  {line}" for line in lines)] if lines else []


def exit_code(folder: Path, status: JobStatus,
              launcher_log: str = jobdir.BATCH_OUT) -> tuple[int, RankFailure | None, int]:
    """(the code a user expects, the failed rank it comes from, the job's own) of an ended job.

    The job's own code is the launch step's (srun's 143 when it ended the step because a
    rank failed, 137 after a SIGKILL), which says little; what a person expects, as from a
    local run, is the failing rank's own: 1 for an exception, n for sys.exit(n), 128+signal
    for a kill. That is the first primary failure's code where the folder tells it (its
    rank is returned too), else the job's.
    """
    job = exit_code_of(status)
    if job == 0:
        return 0, None, 0
    rank = next((f for f in failure_report(folder, launcher_log) if f.primary and f.code), None)
    return (rank.code, rank, job) if rank is not None and rank.code is not None else (job, None, job)


def restart_lines(folder: Path, told: Story) -> list[str]:
    """A --max-restarts job's restarts from its record: how many of how many, the excluded
    nodes, then the ranks' stacks when a start hung; [] for others. (Each failed start and
    what followed is a line of the story.)"""
    most = told.submitted.get("max_restarts") if told.submitted is not None else None
    lines = []
    if told.restarts or most:
        excluded = list(dict.fromkeys(str(n) for e in told.restarts for n in e.get("excluded") or []))
        lines.append(f"restarts: {told.restarts_spent} of {most if most is not None else '?'}"
                     + (f"; excluded: {','.join(excluded)}" if excluded else ""))
    return [visible(line) for line in (*lines, *stack_lines(folder))]


def stack_lines(folder: Path) -> list[str]:
    """The ranks' grouped stacks the restart supervisor took when a rank hung (before it
    ended the step), headed by which start; [] when none hung."""
    said = parse_summary(readback.text_or_empty(folder / protocol.STACKS / protocol.SUMMARY, readback.STACKS,
                                                below=folder, cut=None))
    if said is None:
        return []
    start, lines = said
    return [visible(line) for line in (f"stacks when start {start} hung:", *(f"  {line}" for line in lines))]


def last_line(path: Path, tail_bytes: int = 4096) -> str:
    """The last non-empty line of a log (its last `tail_bytes` only), '' when none."""
    text = final_text(readback.text_or_empty(path, tail_bytes))  # a progress bar: its last state
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def sweep_table(trials, last_lines: dict[int, str], width: int = 100) -> list[str]:
    """The end of a sweep: per trial its parameters, state, exit code, how long it ran and
    rank 0's last line (pure; `trials` are TrialStatus, `last_lines` by trial), its end where
    it is longer than `width`: a final line ends with what it reports (`final loss 0.012`)."""
    rows = []
    for t in sorted(trials, key=lambda t: t.trial):
        ran = t.status.elapsed()
        params = ",".join(f"{k}={v}" for k, v in t.params.items()) or "-"
        code = exit_code_of(t.status)
        rows.append((str(t.trial), params, t.status.state, "-" if code is None else str(code),
                     clock(ran) if ran is not None else "-", _end_of(visible(last_lines.get(t.trial, "")), width) or "-"))
    head = ("TRIAL", "PARAMS", "STATE", "EXIT", "ELAPSED", "LAST LINE")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r[:5], widths)) + "  " + r[5] for r in [head, *rows]]


def _end_of(text: str, width: int) -> str:
    """`text`, or its last `width` characters after `...` where it is longer (pure)."""
    return text if len(text) <= width else "..." + text[len(text) - width + 3:]
