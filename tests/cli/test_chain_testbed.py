"""On the testbed: chains of jobs through the real sbatch, scontrol and squeue.

Each part is a tiny script that leaves a marker file in the working folder; a part that
needs the one before checks its marker, so the order is shown by what ran, not by clocks.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from helpers import st, wait_for

# A part: fails with the code given, else checks the marker of the part before and leaves its own.
PART = """\
import os, sys
name, before, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
if before != "-" and not os.path.exists(before + ".done"):
    print(f"{name}: {before} has not ended", flush=True)
    sys.exit(4)
if code:
    print(f"{name} fails with {code}", flush=True)
    sys.exit(code)
open(name + ".done", "w").close()
print(f"{name} done", flush=True)
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def chain_file(folder: Path, parts: list[tuple[str, int, str]], extra: dict[str, str] | None = None) -> Path:
    """A chain of (name, exit code, after) parts, each running PART, on the testbed site."""
    (folder / "part.py").write_text(PART)
    lines = ["site: testbed", "parts:"]
    before = "-"
    for name, code, after in parts:
        lines.append(f"  - {{name: {name}, script: part.py, args: [{name}, '{before}', {code}], after: {after}, "
                     f"time: '2'{(', ' + extra[name]) if extra and name in extra else ''}}}")
        before = name
    path = folder / "chain.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def job_ids(stdout: str) -> dict[str, str]:
    """`name id` lines, as `slurmtorch chain` prints each part's job id."""
    return dict(line.split() for line in stdout.splitlines() if re.fullmatch(r"\S+ \d+", line))


def scontrol_state(testbed, job_id: str) -> str:
    out = testbed.run(["scontrol", "show", "job", job_id]).stdout
    m = re.search(r"JobState=(\S+)", out)
    return m.group(1) if m else ""


@pytest.mark.slurm_versions
def test_a_failed_middle_part_cancels_the_last_and_is_named(testbed, home, tmp_path):
    path = chain_file(tmp_path, [("train", 0, "ok"), ("evaluate", 1, "ok"), ("export", 0, "ok")])
    r = st(testbed, home, ["chain", path, "--wait"], cwd=tmp_path, timeout=90)
    ids = job_ids(r.stdout)
    assert r.returncode == 1, r.stderr
    assert list(ids) == ["train", "evaluate", "export"], r.stdout
    assert f"slurmtorch: chain failed at part 'evaluate' (job {ids['evaluate']}):" in r.stderr
    assert f"part 'export': job {ids['export']} never ran: cancelled: part 'evaluate' failed" in r.stderr
    assert f"job {ids['evaluate']} FAILED (exit 1 from rank 0)" in r.stderr  # the job's own failure report
    assert f"part 'train': job {ids['train']} COMPLETED (exit 0)" in r.stderr
    assert (tmp_path / "train.done").exists() and not (tmp_path / "export.done").exists()
    assert scontrol_state(testbed, ids["export"]) == "CANCELLED"
    assert not (home / "jobs" / ids["export"] / "batch.out").exists()  # it never started
    assert "Traceback" not in r.stderr
    assert_followed_as_one_from_a_new_process(testbed, home, tmp_path, ids)


def assert_followed_as_one_from_a_new_process(testbed, home: Path, tmp_path: Path, ids: dict[str, str]) -> None:
    """The chain ended, a new process finds it by any part's id (its record in every part's
    folder): `status` shows it as one, `Chain.attach(...).wait()` names the failed part."""
    for job_id in ids.values():
        assert (home / "jobs" / job_id / "chain.json").stat().st_mode & 0o777 == 0o600
    r = testbed.run([testbed.python, "-m", "slurmtorch", "status", ids["export"], ids["train"]],
                    env={"SLURMTORCH_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert r.stdout.count("chain train -> evaluate -> export") == 1, r.stdout  # two of its parts: the chain once
    assert lines[:4] == ["chain train -> evaluate -> export (3 parts):",
                         f"  part 'train': job {ids['train']} COMPLETED (exit 0)",
                         f"  part 'evaluate': job {ids['evaluate']} FAILED (exit 1)",
                         f"  part 'export': job {ids['export']} never ran: cancelled: part 'evaluate' failed"], r.stdout
    assert lines[4:6] == [f"chain failed at part 'evaluate' (job {ids['evaluate']}):",
                          f"  job {ids['evaluate']} FAILED (exit 1 from rank 0)"], r.stdout
    assert any(line.startswith("  failed: rank 0") for line in lines[6:]), r.stdout
    r = st(testbed, home, ["status", "--json", ids["train"]])
    chain = json.loads(r.stdout)[0]["chain"]
    assert chain["failed"] == "evaluate" and [p["state"] for p in chain["parts"]] == ["COMPLETED", "FAILED",
                                                                                       "CANCELLED"], r.stdout
    program = f"""\
from slurmtorch import Chain, ChainFailed
job = Chain.attach({ids['train']!r})
try:
    job.wait()
except ChainFailed as exc:
    print("failed:", exc.part, exc.job_id, job.status()["export"])
"""
    r = testbed.run([testbed.python, "-c", program], env={"SLURMTORCH_HOME": str(home)}, cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == f"failed: evaluate {ids['evaluate']} CANCELLED", r.stdout
    assert f"part 'export': job {ids['export']} never ran: cancelled: part 'evaluate' failed" in r.stderr


def test_a_chain_whose_parts_all_succeed_runs_them_in_order(testbed, home, tmp_path):
    path = chain_file(tmp_path, [("train", 0, "ok"), ("evaluate", 0, "ok"), ("export", 0, "singleton")])
    r = st(testbed, home, ["chain", path, "--wait"], cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stderr
    assert "slurmtorch: chain: all 3 parts completed" in r.stderr
    assert all((tmp_path / f"{name}.done").exists() for name in ("train", "evaluate", "export"))
    ids = job_ids(r.stdout)
    dependency = testbed.run(["scontrol", "show", "job", ids["export"]]).stdout
    assert "Dependency=" in dependency


def test_a_part_after_any_runs_though_the_part_before_failed(testbed, home, tmp_path):
    path = chain_file(tmp_path, [("train", 3, "ok"), ("export", 0, "any")])
    (tmp_path / "train.done").touch()  # export checks that train ended, which it did, failing
    r = st(testbed, home, ["chain", path, "--wait"], cwd=tmp_path, timeout=90)
    ids = job_ids(r.stdout)
    assert r.returncode == 3, r.stderr
    assert f"slurmtorch: chain failed at part 'train' (job {ids['train']}):" in r.stderr
    assert f"part 'export': job {ids['export']} COMPLETED (exit 0)" in r.stderr
    assert (tmp_path / "export.done").exists()


def test_a_part_sbatch_refuses_cancels_the_parts_already_submitted(testbed, home, tmp_path):
    path = chain_file(tmp_path, [("train", 0, "ok"), ("evaluate", 0, "ok"), ("export", 0, "ok")],
                      {"export": "reservation: no-such-reservation"})
    r = st(testbed, home, ["chain", path, "--wait"], cwd=tmp_path, timeout=90)
    lines = r.stderr.splitlines()
    assert r.returncode != 0
    error = next(line for line in lines if line.startswith("error: "))
    m = re.search(r"part 'export': .*; parts 'train', 'evaluate' \(jobs (\d+), (\d+)\) cancelled before starting",
                  error)
    assert error.startswith("error: chain not submitted: ") and m, r.stderr
    assert r.stdout == ""  # no part announced
    for job_id in m.groups():
        assert scontrol_state(testbed, job_id) in ("CANCELLED", "")
        assert not (home / "jobs" / job_id).exists()
    assert not (tmp_path / "train.done").exists()
    assert "Traceback" not in r.stderr


def test_a_python_chain_names_the_failed_part(testbed, home, tmp_path):
    (tmp_path / "part.py").write_text(PART)
    program = """\
import sys
from slurmtorch import Chain, ChainFailed
job = Chain([{"name": "train", "script": "part.py", "args": ["train", "-", 5], "time": "2"},
             {"name": "export", "script": "part.py", "args": ["export", "train", 0]}], site="testbed").submit()
print(sorted(job.status()), flush=True)
try:
    job.wait()
except ChainFailed as exc:
    print("failed:", exc.part, exc.job_id == job.job_ids["train"], job.status()["export"])
"""
    r = testbed.run([sys.executable, "-c", program], env={"SLURMTORCH_HOME": str(home)}, cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "['export', 'train']"
    assert r.stdout.splitlines()[-1] == "failed: train True CANCELLED", r.stdout


def test_clean_keeps_every_part_of_a_chain_while_a_later_part_is_queued(testbed, home, tmp_path):
    """Issue 44: the ended first part's folder went while the second was queued, and the
    chain's status then failed. The second part waits for a begin time an hour away."""
    path = chain_file(tmp_path, [("train", 0, "ok"), ("export", 0, "ok")], {"export": "begin: now+3600"})
    r = st(testbed, home, ["chain", path], cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stderr
    ids = job_ids(r.stdout)
    try:
        wait_for(lambda: scontrol_state(testbed, ids["train"]) == "COMPLETED", "part 'train' to complete", 90)
        kept = st(testbed, home, ["clean", "--older-than", "0"])
        assert kept.returncode == 0 and kept.stdout == "", kept
        assert kept.stderr.endswith(" removed; kept: 1 queued or running, 1 of a chain with a part queued or "
                                    "running\n"), kept.stderr
        status = st(testbed, home, ["status", ids["train"]])
        assert status.returncode == 0 and f"part 'train': job {ids['train']} COMPLETED" in status.stdout, status
    finally:
        testbed.run(["scancel", ids["export"]])
    wait_for(lambda: scontrol_state(testbed, ids["export"]) in ("CANCELLED", ""), "part 'export' to end", 60)
    gone = st(testbed, home, ["clean", "--older-than", "0"])
    assert gone.returncode == 0 and sorted(line.split(" (")[0] for line in gone.stdout.splitlines()) == sorted(
        f"removed {home / 'jobs' / j}" for j in ids.values()), gone


def test_a_held_job_of_a_singleton_parts_name_refuses_the_chain_in_one_line(testbed, home, tmp_path):
    """Issue 44: a held job of the same name (left held by a submission killed outright)
    keeps an `after: singleton` part waiting for good; the chain says so, submitting nothing."""
    name = f"single{os.getpid()}"
    held = testbed.run(["sbatch", "--parsable", "--hold", "-J", name, "-t", "1", "--wrap", "true"], cwd=tmp_path)
    assert held.returncode == 0, held.stderr
    orphan = held.stdout.strip()
    try:
        path = chain_file(tmp_path, [("train", 0, "ok"), ("export", 0, "singleton")], {"export": f"job_name: {name}"})
        r = st(testbed, home, ["chain", path], cwd=tmp_path, timeout=90)
        assert (r.returncode, r.stdout) == (1, ""), r
        assert r.stderr.splitlines() == [
            f"error: chain not submitted: part 'export' (after: singleton) would wait for good behind job {orphan}, "
            f"held, of the same name {name!r}",
            f"tip: slurmtorch cancel {orphan} (left held by a submission killed midway), or scontrol release {orphan} "
            "if you held it, then submit the chain again"], r.stderr
        assert not (home / "jobs").exists() or list((home / "jobs").iterdir()) == []
    finally:
        testbed.run(["scancel", orphan])

