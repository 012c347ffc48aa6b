"""Every reporting verb's `--json` (usecases.records) names the schema's version and has exactly
the keys docs/json.md documents: the doc is read here, section by section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurmtorch import events, rankfiles
from slurmtorch.rankfiles import RankStacks
from slurmtorch.submit.jobfolder.jobstatus import JobStatus, TrialStatus
from slurmtorch.submit.jobfolder.stacks import Silent
from slurmtorch.usecases import records, story

DOC = Path(__file__).resolve().parent.parent / "docs" / "json.md"


def documented() -> dict[str, tuple[set[str], set[str]]]:
    """Each section's (required keys, optional keys), a section's `Every key of `X`` included."""
    sections: dict[str, tuple[set[str], set[str]]] = {}
    name = None
    for line in DOC.read_text().splitlines():
        head = re.fullmatch(r"## `(\w+)`", line)
        if head:
            name = head.group(1)
            sections[name] = (set(), set())
            continue
        if name is None:
            continue
        key = re.match(r"- `(\w+)`: (\*optional\*)?", line)
        if key:
            sections[name][1 if key.group(2) else 0].add(key.group(1))
        every = re.search(r"Every key of `(\w+)`", line)
        if every:
            sections[name][0].update(sections[every.group(1)][0])
    return sections


DOCUMENTED = documented()


def holds(obj: dict, section: str) -> None:
    required, optional = DOCUMENTED[section]
    assert required <= set(obj) <= required | optional, (section, set(obj) ^ required)
    if "version" in required:
        assert obj["version"] == records.VERSION == 1


@pytest.fixture
def failed(tmp_path) -> story.Report:
    """A job requeued once whose second start's rank 1 raised, as its folder and record hold it."""
    folder = tmp_path / "jobs" / "9"
    folder.mkdir(parents=True)
    (folder / "batch.out").write_text("srun: error: node2: task 1: Exited with exit code 1\n"
                                      "srun: error: node1: task 0: Terminated\n")
    (folder / "rank-1.err").write_text("rank 1 on node2 failed:\nTraceback (most recent call last):\n"
                                       '  File "t.py", line 1\nValueError: bad\n')
    (folder / "rank-0.err").write_text("")
    for kind, fields in (("submitted", {"job": "9", "name": "train"}),
                         ("started", {"attempt": 0, "nodes": "node[1-2]", "host": "node1"}), ("ended", {"attempt": 0}),
                         ("started", {"attempt": 1, "nodes": "node[1-2]", "host": "node1"}),
                         ("ended", {"attempt": 1, "code": 143})):
        events.append(folder, kind, **fields)
    return story.report("9", folder, JobStatus("9", "FAILED", exit_code=143, nodes="node[1-2]", source="squeue"))


def test_the_report_and_its_story_are_as_documented(failed):
    data = records.ended(failed)
    holds(data, "report")
    holds(data["story"], "story")
    assert [holds(a, "attempt") for a in data["story"]["attempts"]] and data["restarts"] == 1
    assert data["failures"][0].startswith("failed: rank 1 on node2: ValueError: bad")


def test_status_and_an_arrays_end_are_as_documented(failed, tmp_path):
    holds(records.status(failed, "train"), "status")
    holds(records.status(failed, "train", trial=0, params={"lr": 1}), "status")
    (tmp_path / "jobs" / "8" / "trial-0").mkdir(parents=True)
    trial = TrialStatus(0, {"lr": 1}, JobStatus("8_0", "COMPLETED", exit_code=0, source="squeue"))
    data = records.array("8", tmp_path / "jobs", 0, [trial])
    holds(data, "array")
    holds(data["trials"][0], "status")


def test_logs_and_top_are_as_documented(failed):
    data = records.logs(failed, [(failed.folder / "rank-0.out", "out"), (failed.folder / "rank-0.err", "err")])
    holds(data, "logs")
    assert [holds(entry, "log") for entry in data["logs"]] and data["logs"][0]["bytes"] is None
    sample = rankfiles.parse_live(rankfiles.live_record(
        written=2.0, since=1.0, rank=0, host="node1", steps=3, step_s=0.5, own_s=0.1, trend_s=0.5, own_mean_s=0.1,
        first_step=1.0, last_step=2.0, cpu=90.0, rss=1 << 30, gpu=None, ended=False))
    assert sample is not None
    data = records.top("9", failed.status, {0: sample}, ["a line"], failed)
    holds(data, "top")
    holds(data["ranks"][0], "rank")


def test_stacks_and_chains_are_as_documented(failed, tmp_path):
    got = {0: RankStacks(0, "node1", 123, 1, ())}
    holds(records.stacks(tmp_path, 2, got, [Silent(1, "node2", "dead (its process is gone)")], ["s"], ["d"], [], []),
          "stacks")
    data = records.chain(["train", "sweep"], ["9", "10"], ["ok", "any"], ["FAILED", "CANCELLED"], [failed, None],
                         "train", 1, ["chain failed at part 'train' (job 9):"])
    holds(data, "chain")
    assert [holds(part, "part") for part in data["parts"]] and data["parts"][1]["report"] is None
    holds(records.chain_submitted(["train"], ["9"], [tmp_path]), "chain_submitted")


def test_every_section_of_the_doc_is_one_a_builder_gives():
    assert set(DOCUMENTED) == {"report", "story", "attempt", "status", "array", "logs", "log", "top", "rank", "stacks",
                               "chain", "part", "chain_submitted"}
