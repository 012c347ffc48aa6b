"""`logs`: which of a job's logs to show, shown whole or followed to the job's end.

A rank's stdout and stderr (torchrun: a node's), the batch script's own output, or every
rank's marked `[rank R]`; an array job's trial named. Shown whole, each line in its final
state and then the failure's lines; followed (`--follow`), to the end line and report that
`--wait` gives (`launch.ended`). The front end passes its streams and prints what comes back.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, cast

from slurmtorch import readback
from slurmtorch.errors import SubmitError, typed
from slurmtorch.submit.follow import waiting
from slurmtorch.submit.follow.tail import Prefixed, Tail, last_lines_offset
from slurmtorch.submit.edge import queries
from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.submit.jobfolder.report import failure_lines
from slurmtorch.usecases import records, story


def target(job_id: str, rank: int | None, node: int | None, trial: int | None,
           batch: bool) -> tuple[str, Path, list[tuple[Path, str]]]:
    """Whose logs: (the job's or trial's id, its folder, each log with "out" or "err"): the
    batch script's batch.out, else the rank's (torchrun: the node's) stdout and stderr. An
    array job needs its trial, which must be one of its own."""
    folder = jobdir.checked(jobdir.job_dir(job_id))
    if not folder.is_dir():
        raise SubmitError(f"no job folder {folder}", tip="was the job submitted by slurmtorch with this SLURMTORCH_HOME?")
    story.not_cleaned(job_id, folder)
    record = jobdir.read_trials(folder)
    if record is not None:
        ids = sorted(int(t) for t in record["trials"])
        if trial is None:
            raise SubmitError(f"job {job_id} is an array of {len(ids)} trials: say which",
                              tip=typed(f"logs {job_id} --trial {ids[0]} [--rank R]"))
        if trial not in ids:
            raise SubmitError(f"job {job_id} has no trial {trial}", tip=f"trials: {', '.join(map(str, ids))}")
        folder = jobdir.checked(jobdir.trial_dir(job_id, trial))
        job_id = f"{job_id}_{trial}"
    elif trial is not None:
        raise SubmitError(f"job {job_id} is not an array job; --trial does not apply")
    if batch:
        return job_id, folder, [(folder / jobdir.BATCH_OUT, "out")]
    out, err = jobdir.rank_log_paths(folder, rank, node)
    return job_id, folder, [(out, "out"), (err, "err")]


def streams(folder: Path, logs: list[tuple[Path, str]], all_ranks: bool, out: IO[str],
            err: IO[str]) -> list[tuple[Path, IO[str]]]:
    """Each log with the stream it goes to: `logs`' own, or (`all_ranks`) every rank's (torchrun:
    every node's), each line marked with its rank."""
    if not all_ranks:
        return [(path, out if kind == "out" else err) for path, kind in logs]
    return [(path, cast(IO[str], Prefixed(stream, mark)))  # write/flush/isatty, as a stream
            for mark, o, e in all_rank_logs(folder) for path, stream in ((o, out), (e, err))]


def all_rank_logs(folder: Path) -> list[tuple[str, Path, Path]]:
    """Every rank's (torchrun: every node's) stdout and stderr in a job or trial folder, in
    rank order, each with the mark its lines get (`[rank 3] `, `[node 1] `)."""
    job = jobdir.read_job(folder) or {}
    layout = jobdir.torchrun_layout(job)
    if layout is not None:
        return [(f"[node {n}] ", *jobdir.rank_log_paths(folder, None, n)) for n in range(layout[0])]
    found = {r for p in folder.glob("rank-*.out") if (r := readback.numbered(p.name, "rank-", ".out")) is not None}
    ranks = sorted(found | set(range(jobdir.job_number(job, "ntasks") or 0)))
    return [(f"[rank {r}] ", *jobdir.rank_log_paths(folder, r)) for r in ranks or [0]]


def follow(job_id: str, folder: Path, paths: list[tuple[Path, IO[str]]], cancel_on_interrupt: bool,
           last: int | None):
    """The logs printed as they grow until the job ends (none printed: `paths` empty), then its
    end as `--wait` says it (`launch.Ended`: the exit code, the lines and the report)."""
    from slurmtorch.usecases import launch  # lazy: its render and sites would cost every other verb

    return launch.ended(job_id, folder, waiting.follow(job_id, paths, cancel_on_interrupt=cancel_on_interrupt,
                                                       last=last))


def record(job_id: str, folder: Path, logs: list[tuple[Path, str]], rep=None) -> dict:
    """`logs --json`: the logs' paths and the job's report (its record's story, as it stands
    now where `rep` is None) as one JSON-ready object (docs/json.md)."""
    if rep is None:
        rep = story.report(job_id, folder, queries.job_status(job_id, jobdir.jobs_root()))
    return records.logs(rep, logs)


def show(job_id: str, folder: Path, paths: list[tuple[Path, IO[str]]], batch: bool, last: int | None) -> list[str]:
    """Each log whole (or its last `last` lines), each line in its final state; then the
    failure's lines. None written yet: SubmitError saying so."""
    if not any(p.exists() for p, _ in paths):
        raise SubmitError(
            f"no output yet for {'the batch step' if batch else paths[0][0].stem.replace('-', ' ')} "
            f"of job {job_id} in {folder}",
            tip=f"is it still pending? {typed(f'status {job_id}')}",
        )
    for p, stream in paths:
        tail = Tail(p, stream)
        tail.live = False  # the whole log at once: each line in its final state
        if last is not None:
            tail.offset = last_lines_offset(p, last)
        tail.pump()
        tail.finish()
    return [f"slurmtorch: {line}" for line in failure_lines(folder)]
