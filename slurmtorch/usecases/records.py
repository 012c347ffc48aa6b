"""Every reporting verb's `--json`, for scripts and agents: built from the same values its lines
come from (`story.Report`, the live samples, the stacks), each object naming the schema's
version (`VERSION`). docs/json.md documents every key; tests/test_json_schema.py holds each
builder to it. Pure, but for what `story.report` reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from slurmtorch.rankfiles import LiveSample, RankStacks
from slurmtorch.submit.jobfolder.jobstatus import JobStatus, TrialStatus
from slurmtorch.submit.jobfolder import codecopy, jobdir
from slurmtorch.submit.jobfolder.stacks import Silent
from slurmtorch.submit.jobfolder.story import VERSION, cleaned_line
from slurmtorch.usecases.story import Report, report

__all__ = ["VERSION", "status", "ended", "array", "logs", "top", "stacks", "chain", "chain_submitted"]


def status(rep: Report, name: str, **more) -> dict:
    """`status --json`, a record per job (or trial): Slurm's view (state, reason, nodes, times,
    source) beside the report's (exit codes, failures, the end line, the story), and what it ran."""
    st, told = rep.status, rep.story
    record = {**rep.as_dict(), "name": name,
              "elapsed": told.elapsed(time.time()) if told.attempts else st.elapsed(),
              "reason": st.why, "nodes": st.nodes or told.nodes, "submitted": st.submitted, "started": st.started,
              "source": st.source, "folder": str(rep.folder), "code": _code(rep.folder),
              "cleaned": cleaned_line(told.cleaned) if told.cleaned is not None else None}
    record.update(more)
    return record


def ended(rep: Report) -> dict:
    """`sbatch --wait --json` and `logs --follow --json`: the followed job's end."""
    return rep.as_dict()


def array(job_id: str, root: Path, code: int, trials: Sequence[TrialStatus]) -> dict:
    """`sbatch --wait --json` of an array job: its exit code and every trial's `status` record."""
    records = [status(report(f"{job_id}_{t.trial}", jobdir.trial_dir(job_id, t.trial, root), t.status), "",
                      trial=t.trial, params=t.params) for t in trials]
    return {"version": VERSION, "job_id": job_id, "exit_code": code, "trials": records}


def logs(rep: Report, paths: Sequence[tuple[Path, str]]) -> dict:
    """`logs --json`: where the job's logs are (not their text) and its report as it stands."""
    files = []
    for path, stream in paths:
        try:
            size: int | None = path.stat().st_size
        except OSError:
            size = None
        files.append({"path": str(path), "stream": stream, "bytes": size})
    return {**rep.as_dict(), "folder": str(rep.folder), "logs": files}


def top(job_id: str, status: JobStatus, samples: Mapping[int, LiveSample], lines: Sequence[str],
        rep: Report) -> dict:
    """`top --json`: the ranks' latest samples (the latest start's), the table's or the end's
    lines, the job's state and its report."""
    ranks = [{"rank": s.rank, "host": s.host, "steps": s.steps, "step_s": s.step_s, "own_s": s.own_s,
              "mean_step_s": s.mean_step_s, "cpu": s.cpu, "rss": s.rss, "gpu": s.gpu, "written": s.written,
              "ended": s.ended} for s in sorted(samples.values(), key=lambda s: s.rank)]
    return {**rep.as_dict(), "state": status.state, "describe": status.describe(), "done": status.done,
            "ranks": ranks, "lines": list(lines)}


def stacks(folder: Path, ranks: int, got: Mapping[int, RankStacks], silent: Iterable[Silent],
           summary: Sequence[str], details: Sequence[str], flight: Sequence[str], notes: Sequence[str]) -> dict:
    """`stacks --json`: which ranks answered and which did not (and why), the grouped summary,
    each group's stack, torch's flight recorder, and the notes, as the lines say them."""
    return {"version": VERSION, "folder": str(folder), "ranks": ranks,
            "answered": [{"rank": s.rank, "host": s.host, "pid": s.pid} for _, s in sorted(got.items())],
            "silent": [{"rank": s.rank, "host": s.host, "why": s.why} for s in sorted(silent, key=lambda s: s.rank)],
            "summary": list(summary), "details": list(details), "flight": list(flight), "notes": list(notes)}


def chain(names: Sequence[str], job_ids: Sequence[str], afters: Sequence[str], states: Sequence[str],
          reports: Sequence[Report | None], failed: str | None, code: int | None, lines: Sequence[str]) -> dict:
    """`chain --wait --json`: every part with its state and report (None: an array's, whose
    trials `status --json` gives), the first failed part, the exit code, and the lines the
    chain ended with."""
    parts = [{"name": n, "job_id": j, "after": a, "state": s, "report": r.as_dict() if r is not None else None}
             for n, j, a, s, r in zip(names, job_ids, afters, states, reports)]
    return {"version": VERSION, "parts": parts, "failed": failed, "exit_code": code, "lines": list(lines)}


def chain_submitted(names: Sequence[str], job_ids: Sequence[str], folders: Sequence[Path]) -> dict:
    """`chain --json` without --wait: each part's job id and folder, as submitted."""
    return {"version": VERSION, "parts": [{"name": n, "job_id": j, "folder": str(f)}
                                          for n, j, f in zip(names, job_ids, folders)]}


def _code(folder: Path) -> dict | None:
    """What the job ran: its snapshot (tree, commit, dirty, counts; not the file list), None: in place."""
    record = codecopy.read_record(folder)
    return None if record is None else {k: v for k, v in record.items() if k != "manifest"}
