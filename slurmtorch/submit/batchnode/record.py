"""What the batch node leaves for `status`, `--wait` and the next start: its lines in
batch.out, and the job's restart history (restarts.json)."""

from __future__ import annotations

import sys
from pathlib import Path

from slurmtorch import events
from slurmtorch.submit.batchnode.restarts import Plan, RestartState
from slurmtorch.submit.jobfolder import jobdir


def say(line: str) -> None:
    """One line to batch.out (the batch script's stderr), where status and --wait look."""
    sys.stderr.write(f"slurmtorch: {line}\n")
    sys.stderr.flush()


def load_state(folder: Path) -> RestartState:
    record = jobdir.read_restarts(folder)
    return RestartState.from_dict(record) if record else RestartState()


def noted(folder: Path, plan: Plan, max_restarts: int) -> None:
    """A failed start and what follows it (the plan's last event), kept in restarts.json, said
    in batch.out and appended to the job's record."""
    save_state(folder, plan.state, max_restarts)
    event = plan.state.events[-1]
    say(f"{event.line()} ({plan.why})")
    events.append(folder, "restarting", start=event.start, cause=event.cause, action=event.action,
                  nodes=list(event.nodes), excluded=list(event.excluded))


def save_state(folder: Path, state: RestartState, max_restarts: int) -> None:
    try:
        jobdir.write_restarts(folder, {**state.as_dict(), "max_restarts": max_restarts})
    except OSError as exc:  # the restart still happens; only the record is missing
        say(f"warning: cannot write {folder / jobdir.RESTARTS}: {exc.strerror or exc}")
