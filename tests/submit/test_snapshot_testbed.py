"""A job runs the code as it was submitted, whatever is edited after: on the real testbed,
the edit made right after `sbatch` returns, before a restart (--max-restarts) and before a
requeue (`scontrol requeue`, as an admin or a preemption does). The job's tree is a real git
repository; the script imports a module beside it and reads a data file by a path relative
to the folder it was submitted from (which the ranks start in: the live folder, not the
copy), and records what it saw outside the tree."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers import read, st, wait_for

TRAIN = '''\
"""Appends one line per start to OUT/starts.log: what this start ran and saw."""
import os, sys, time
from pathlib import Path
from helper import VERSION
out, mode = Path(sys.argv[1]), sys.argv[2]
log = out / "starts.log"
n = len(log.read_text().splitlines()) if log.exists() else 0
data = Path("data/config.txt").read_text().strip()
with open(log, "a") as f:
    f.write(f"{n} {VERSION} {data} train-{TRAIN_VERSION} {__file__} {os.getcwd()} {sys.path[0]}\\n")
if mode == "restart-then-requeue" and n == 0:
    while not (out / "go").exists():
        time.sleep(0.2)
    sys.exit(3)  # the script fails: the supervisor starts it again
if mode == "restart-then-requeue" and n == 1:
    time.sleep(600)  # the test requeues the job now
'''


def write_tree(root: Path, version: str) -> None:
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    (root / "src" / "train.py").write_text(TRAIN.replace("{TRAIN_VERSION}", version))
    (root / "src" / "helper.py").write_text(f"VERSION = {version!r}\n")
    (root / "data" / "config.txt").write_text(f"data-{version}\n")


@pytest.fixture
def project(tmp_path):
    """A git repository with src/train.py, src/helper.py and data/config.txt at v1, committed."""
    root = tmp_path / "proj"
    write_tree(root, "v1")
    for argv in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@example.invalid", "-c", "user.name=t",
                                                 "commit", "-qm", "v1"]):
        subprocess.run(["git", "-C", str(root), *argv], check=True, capture_output=True)
    out = tmp_path / "out"
    out.mkdir()
    return root, out


def submit(testbed, home: Path, root: Path, out: Path, mode: str, *opts: str) -> str:
    sub = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "1", "-t", "5", "--timeout", "60", *opts,
                             "src/train.py", str(out), mode], cwd=str(root), timeout=60)
    assert sub.returncode == 0, sub.stderr
    return sub.stdout.split()[0]


def starts(out: Path) -> list[list[str]]:
    return [line.split(" ") for line in read(out / "starts.log").splitlines()]


def assert_ran_the_submitted_code(line: list[str], folder: Path, root: Path) -> None:
    """The script and its imports from the job's copy; its working folder the one it was
    submitted from (docs/users-guide.md#where-a-job-runs), where relative paths lead."""
    code = folder / "code"
    assert (line[1], line[3]) == ("v1", "train-v1"), line
    assert line[4:] == [str(code / "src" / "train.py"), str(root), str(code / "src")], line


@pytest.mark.timeout(240)
def test_a_script_edited_right_after_submission_runs_as_submitted(testbed, has_torch, tmp_path, project):
    root, out = project
    home = tmp_path / "home"
    # --begin: the edit below surely comes before the start (this test is red without snapshots).
    job = submit(testbed, home, root, out, "once", "--begin", "now+4")
    write_tree(root, "v2")
    folder = home / "jobs" / job
    wait_for(lambda: (folder / "exit-code").exists(), "the job to end", 180)
    assert read(folder / "exit-code").strip() == "0", read(folder / "batch.out") + read(folder / "rank-0.err")
    (line,) = starts(out)
    assert_ran_the_submitted_code(line, folder, root)
    assert line[2] == "data-v2"  # a relative path: the submission folder's file, as it is now

    status = st(testbed, home, ["status", job]).stdout
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert status.startswith(f"job={job} state=COMPLETED exit_code=0 ") and f" code={commit[:12]}\n" in status
    (record,) = json.loads(st(testbed, home, ["status", "--json", job]).stdout)
    assert record["code"]["commit"] == commit.strip() and record["code"]["dirty"] is False
    assert record["code"]["root"] == str(root) and record["code"]["files"] == 3


@pytest.mark.timeout(300)
def test_a_restart_and_a_requeue_run_the_submitted_code_after_an_edit(testbed, has_torch, tmp_path, project):
    root, out = project
    home = tmp_path / "home"
    (root / "notes.txt").write_text("not committed yet\n")  # untracked, not ignored: in the snapshot, tree dirty
    job = submit(testbed, home, root, out, "restart-then-requeue", "--max-restarts", "2", "--requeue")
    folder = home / "jobs" / job
    try:
        wait_for(lambda: len(starts(out)) == 1, "start 0", 120)
        write_tree(root, "v2")
        (out / "go").touch()  # start 0 fails now; the supervisor restarts the script
        wait_for(lambda: len(starts(out)) == 2, "the restart (start 1)", 120)
        requeue = testbed.run(["scontrol", "requeue", job])
        assert requeue.returncode == 0, requeue.stderr
        wait_for(lambda: len(starts(out)) == 3, "the requeued job (start 2)", 150)
        wait_for(lambda: read(folder / "exit-code").strip() == "0", "the requeued job to end", 60)
    finally:
        testbed.run(["scancel", job])
    assert "Restarts=1" in testbed.run(["scontrol", "-o", "show", "job", job]).stdout  # the requeue happened
    for line in starts(out):
        assert_ran_the_submitted_code(line, folder, root)
    assert st(testbed, home, ["status", job]).stdout.split("\n")[0].endswith("-dirty")
    (record,) = json.loads(st(testbed, home, ["status", "--json", job]).stdout)
    assert record["code"]["dirty"] is True and record["code"]["files"] == 4
