"""`slurmtorch clean`: which job folders go (ended, older than the cut-off, this user's own),
and the verb on the testbed, where squeue says which jobs still run."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from slurmtorch.usecases import clean
from slurmtorch.errors import SpecError
from slurmtorch.submit.jobfolder import cleaning, pruning

from helpers import st

DAY = 86400.0


def job_folder(root: Path, name: str, age_days: float, now: float) -> Path:
    folder = root / name
    (folder / "trial-0").mkdir(parents=True)
    (folder / "trial-0" / "rank-0.out").write_text("x" * 10)
    for path in (folder / "trial-0" / "rank-0.out", folder / "trial-0", folder):
        os.utime(path, (now - age_days * DAY, now - age_days * DAY))
    return folder


def chosen(root: Path, older_than: float, now: float, active: set[str], uid: int | None = None) -> cleaning.Choice:
    """The folders listed, then chosen, as the CLI does (squeue's answer `active` between)."""
    listed, submitting = cleaning.list_folders(root, os.geteuid() if uid is None else uid)
    return cleaning.select(listed, older_than, now, active, submitting)


def removed(root: Path, older_than: float, now: float, active: set[str], uid: int | None = None) -> list[str]:
    return [s.folder.name for s in chosen(root, older_than, now, active, uid).removed]


def test_ended_folders_older_than_the_cut_off_go_and_running_newer_or_linked_ones_stay(tmp_path):
    now = time.time()
    for name, age in (("10", 40), ("11", 40), ("12", 5), ("13.stale-20260101-000000-1", 90), ("notes", 90)):
        job_folder(tmp_path, name, age, now)
    os.symlink(tmp_path / "10", tmp_path / "14")
    (tmp_path / "11" / "trial-0" / "rank-0.out").write_text("still writing")  # a log written now: not stale
    choice = chosen(tmp_path, cleaning.parse_age("30d"), now, active={"15"})
    assert [(s.folder.name, s.job_id, s.size) for s in choice.removed] == [("13.stale-20260101-000000-1", "13", 10),
                                                                           ("10", "10", 10)]
    assert choice.kept == {cleaning.NEWER: 2}
    assert cleaning.kept_line(choice.kept, "30d") == "2 newer than 30d"
    every = chosen(tmp_path, 0, time.time() + 1, active={"10", "13"})
    assert [s.folder.name for s in every.removed] == ["12", "11"]  # oldest first; never the link 14, nor `notes`
    assert every.kept == {cleaning.ACTIVE: 2}
    assert removed(tmp_path, 0, now, active=set(), uid=os.geteuid() + 1) == []  # not this user's


def a_distributor_job(root: Path, home: Path, name: str, read: bool | None) -> Path:
    """An ended Distributor job's folder; its run folder's answer read, never read, or (None) pruned."""
    folder = job_folder(root, name, 40, time.time())
    run = home / "distributor" / f"run-{name}"
    (folder / "job.json").write_text(json.dumps({"ntasks": 1, "run_folder": str(run)}))
    if read is not None:
        run.mkdir(parents=True)
        (run / "meta.json").write_text("{}")
        if read:
            (run / "ended").write_text("completed\n")
    return folder


def test_a_distributor_job_whose_answer_was_never_read_is_kept_until_it_is(tmp_path):
    """docs/python-api.md: an answer nobody has read yet is kept; Job.attach needs the job's folder."""
    root = tmp_path / "jobs"
    a_distributor_job(root, tmp_path, "20", read=False)
    a_distributor_job(root, tmp_path, "21", read=True)
    a_distributor_job(root, tmp_path, "22", read=None)  # its run folder was pruned: nothing to attach to
    choice = chosen(root, 0, time.time(), active=set())
    assert sorted(s.folder.name for s in choice.removed) == ["21", "22"]
    assert choice.kept == {cleaning.UNREAD: 1}
    (tmp_path / "distributor" / "run-20" / "ended").write_text("failed: x\n")  # Job.result read it
    assert removed(root, 0, time.time(), active=set()) == ["20", "21", "22"]


def a_chain(root: Path, parts: dict[str, float]) -> None:
    """A chain's parts' folders (job id -> age in days), each with the chain's record."""
    record = {"parts": [{"name": f"p{job}", "job_id": job, "folder": str(root / job), "after": "ok"}
                        for job in parts]}
    for job, age in parts.items():
        folder = job_folder(root, job, age, time.time())
        (folder / "chain.json").write_text(json.dumps(record))
        for path in (folder / "chain.json", folder):
            os.utime(path, (time.time() - age * DAY,) * 2)


def test_every_part_of_a_chain_stays_while_any_part_of_it_is_queued_or_running(tmp_path):
    a_chain(tmp_path, {"30": 40, "31": 40, "32": 0})
    a_chain(tmp_path, {"40": 40, "41": 40})
    choice = chosen(tmp_path, cleaning.parse_age("30d"), time.time(), active={"32"})
    assert [s.folder.name for s in choice.removed] == ["40", "41"]
    assert choice.kept == {cleaning.ACTIVE: 1, cleaning.CHAIN: 2}
    assert cleaning.kept_line(choice.kept, "30d") == "1 queued or running, 2 of a chain with a part queued or running"
    assert removed(tmp_path, 0, time.time(), active=set()) == ["30", "31", "40", "41", "32"]


def test_a_submission_not_finished_is_never_removed_and_is_counted(tmp_path):
    job_folder(tmp_path, ".submitting-0123456789ab", 400, time.time())
    choice = chosen(tmp_path, 0, time.time(), active=set())
    assert choice.removed == () and choice.kept == {cleaning.SUBMITTING: 1}


def test_records_a_job_could_write_are_read_bounded_and_never_through_a_link(tmp_path):
    a_chain(tmp_path, {"50": 40})
    (tmp_path / "50" / "chain.json").unlink()
    os.symlink(tmp_path / "elsewhere.json", tmp_path / "50" / "chain.json")
    (tmp_path / "elsewhere.json").write_text(json.dumps({"parts": [{"job_id": "51"}]}))
    os.mkfifo(tmp_path / "51")  # not a folder: never listed, and never opened
    folder = job_folder(tmp_path, "52", 40, time.time())
    os.mkfifo(folder / "job.json")  # reading it would block
    assert removed(tmp_path, 0, time.time(), active={"51"}) == ["50", "52"]


def test_an_array_task_or_pending_range_keeps_its_array_jobs_folder():
    assert cleaning.active_ids(["7_3", "8_[0-9%2]", "9"]) == {"7", "8", "9"}


@pytest.mark.parametrize("text, seconds", [("30d", 30 * DAY), ("12h", 43200.0), ("90m", 5400.0), ("0", 0.0),
                                           ("7", 7 * DAY)])
def test_ages_read_as_days_hours_minutes(text, seconds):
    assert cleaning.parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "-1d", "3w", "1.5d", "d"])
def test_a_bad_age_is_one_line_with_an_example(text):
    with pytest.raises(SpecError, match="is not an age"):
        cleaning.parse_age(text)


def test_a_removed_folder_is_renamed_away_first_and_gone(tmp_path):
    folder = job_folder(tmp_path, "10", 1, time.time())
    assert pruning.remove(folder) and not folder.exists() and list(tmp_path.iterdir()) == []
    assert not pruning.remove(folder)  # another remover got there first


@pytest.mark.timeout(120)
def test_clean_removes_ended_jobs_folders_and_never_a_running_ones(testbed, tmp_path, monkeypatch):
    """On the testbed, with one job that runs: a job submitted just after squeue answered is
    not removed (the folders are listed before squeue is asked, as `clean` does); then the
    verb itself, with and without --dry-run."""
    home = tmp_path / "home"
    script = tmp_path / "sleep.py"
    script.write_text("import time\ntime.sleep(300)\n")
    ended = job_folder(home / "jobs", "999999", 0, time.time())  # an id no fresh testbed reaches
    for key in ("SLURM_CONF", "PATH"):
        monkeypatch.setenv(key, testbed.env[key])
    submitted = []

    def squeue_then_a_submission() -> list[str]:
        active = clean.active_jobs()
        r = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "1", "--parsable", str(script)], cwd=str(tmp_path))
        assert r.returncode == 0, r.stderr
        submitted.append(r.stdout.strip())
        return active

    try:
        choice = clean.choose(home / "jobs", 0, squeue_then_a_submission)
        job = submitted[0]
        assert (home / "jobs" / job).is_dir()
        assert [s.folder for s in choice.removed] == [ended], (job, choice)  # never the job submitted meanwhile
        dry = st(testbed, home, ["clean", "--older-than", "0", "--dry-run"])
        assert dry.returncode == 0 and dry.stdout == f"would remove {ended} (0.0 MiB, 0 days old)\n", dry
        assert dry.stderr == ("slurmtorch: 1 job folder (0.0 MiB) would be removed (--dry-run); "
                              "kept: 1 queued or running\n"), dry.stderr
        assert ended.exists()
        done = st(testbed, home, ["clean", "--older-than", "0"])
        assert done.returncode == 0 and done.stdout.startswith(f"removed {ended} "), done
        assert os.listdir(ended) == ["events.jsonl"] and (home / "jobs" / job).is_dir()  # its tombstone
    finally:
        testbed.run(["scancel", *submitted])
    bad = st(testbed, home, ["clean", "--older-than", "soon"])
    assert bad.returncode != 0 and bad.stderr.startswith("error: --older-than 'soon' is not an age"), bad


def a_job_with_a_record(root: Path, name: str) -> Path:
    """An ended job's folder as a real one holds it: logs, its record (submitted, started, ended,
    and Slurm's word as a reader kept it)."""
    from slurmtorch import events

    folder = job_folder(root, name, 40, time.time())
    (folder / "rank-0.out").write_text("trained\n")
    for kind, fields in (("submitted", {"job": name, "name": "train"}),
                         ("started", {"attempt": 0, "nodes": "node[1-2]", "host": "node1"}),
                         ("ended", {"attempt": 0, "code": 0}),
                         ("settled", {"state": "COMPLETED", "code": 0, "nodes": "node[1-2]", "started": 1000.0,
                                      "ended": 1090.0})):
        events.append(folder, kind, **fields)
    return folder


def test_clean_leaves_the_jobs_record_and_when_it_was_cleaned_and_never_cleans_it_again(tmp_path):
    """Issue 45: after clean, `status ID` said code=in-place and `logs ID` asked whether the job
    was submitted with this SLURMTORCH_HOME. The folder is now its record alone, with a
    `cleaned` event: the story (how it ran and ended) stays, and says when it was cleaned."""
    from slurmtorch import events
    from slurmtorch.submit.jobfolder import story

    folder = a_job_with_a_record(tmp_path, "10")
    (stale,) = chosen(tmp_path, 0, time.time() + 1, active=set()).removed
    assert clean.remove(stale)
    assert sorted(os.listdir(folder)) == [events.FILE] and (os.stat(folder).st_mode & 0o777) == 0o700
    told = story.fold(events.read(folder))
    assert told.cleaned is not None and told.settled is not None and told.nodes == "node[1-2]"
    assert told.lines()[-1].startswith("its folder was cleaned at ") and told.name == "train"
    assert chosen(tmp_path, 0, time.time() + 1, active=set()).removed == ()  # a tombstone is never cleaned


def test_a_forgotten_or_cleaned_job_keeps_its_state_elapsed_and_nodes_from_its_record(tmp_path, monkeypatch,
                                                                                     capsys):
    """Issue 45: once squeue forgot a job (MinJobAge) the list showed `ELAPSED -` and no nodes."""
    from slurmtorch.cli.main import main
    from slurmtorch.submit.edge import queries
    from slurmtorch.usecases import story

    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path / "home"))
    folder = a_job_with_a_record(tmp_path / "home" / "jobs", "10")
    forgotten = queries.status_of("10", None, folder)  # squeue lists it no more
    assert (forgotten.state, forgotten.exit_code, forgotten.nodes, forgotten.elapsed()) == (
        "COMPLETED", 0, "node[1-2]", 90.0)
    assert story.row(forgotten, folder, time.time())[1:] == ("node[1-2]", 0, "")
    clean.remove(cleaning.Stale(folder, "10", 1.0, 10))
    cleaned = queries.status_of("10", None, folder)
    lines = story.report("10", folder, cleaned).status_lines()
    assert lines[0] == "job=10 state=COMPLETED exit_code=0 nodes=node[1-2] source=job folder", lines
    assert len(lines) == 2 and lines[1].startswith("its folder was cleaned at "), lines
    assert story.row(cleaned, folder, time.time())[3].startswith("folder cleaned at ")
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main(["logs", "10"])
    said = capsys.readouterr().err.splitlines()
    assert done.value.code == 1 and said[0].startswith("error: job 10: its folder was cleaned at "), said
    assert said[1:] == ["tip: slurmtorch status 10 tells how it ran, from its record"], said
