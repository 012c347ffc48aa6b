"""`slurmtorch clean`: which job folders go (ended, older than the cut-off, this user's own),
and the verb on the testbed, where squeue says which jobs still run."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

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


def test_ended_folders_older_than_the_cut_off_go_and_running_newer_or_linked_ones_stay(tmp_path):
    now = time.time()
    for name, age in (("10", 40), ("11", 40), ("12", 5), ("13.stale-20260101-000000-1", 90), ("notes", 90)):
        job_folder(tmp_path, name, age, now)
    os.symlink(tmp_path / "10", tmp_path / "14")
    (tmp_path / "11" / "trial-0" / "rank-0.out").write_text("still writing")  # a log written now: not stale
    stale = cleaning.stale_folders(tmp_path, cleaning.parse_age("30d"), now, active={"15"}, uid=os.geteuid())
    assert [(s.folder.name, s.job_id, s.size) for s in stale] == [("13.stale-20260101-000000-1", "13", 10),
                                                                  ("10", "10", 10)]
    every = cleaning.stale_folders(tmp_path, 0, time.time() + 1, active={"10", "13"}, uid=os.geteuid())
    assert [s.folder.name for s in every] == ["12", "11"]  # oldest first; never the link 14, nor `notes`
    assert cleaning.stale_folders(tmp_path, 0, now, active=set(), uid=os.geteuid() + 1) == []  # not this user's


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
def test_clean_removes_ended_jobs_folders_and_never_a_running_ones(testbed, tmp_path):
    home = tmp_path / "home"
    script = tmp_path / "sleep.py"
    script.write_text("import time\ntime.sleep(300)\n")
    running = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "1", "--parsable", str(script)], cwd=str(tmp_path))
    assert running.returncode == 0, running.stderr
    job = running.stdout.strip()
    try:
        ended = job_folder(home / "jobs", "1", 0, time.time())
        dry = st(testbed, home, ["clean", "--older-than", "0", "--dry-run"])
        assert dry.returncode == 0 and dry.stdout == f"would remove {ended} (0.0 MiB, 0 days old)\n", dry
        assert ended.exists()
        done = st(testbed, home, ["clean", "--older-than", "0"])
        assert done.returncode == 0 and done.stdout.startswith(f"removed {ended} "), done
        assert not ended.exists() and (home / "jobs" / job).is_dir()
    finally:
        testbed.run(["scancel", job])
    bad = st(testbed, home, ["clean", "--older-than", "soon"])
    assert bad.returncode != 0 and bad.stderr.startswith("error: --older-than 'soon' is not an age"), bad
