"""`slurmtorch stacks` on the real testbed (issue 26): 8 ranks on 4 nodes, rank 5 stuck.

Rank 5 blocks in a collective its partner never joins, or sleeps in its data loader, or
vanishes (os._exit) while its peers wait: `slurmtorch stacks` names it and its line in
under 5 s (its summary lines; the native frames py-spy adds follow); with --hang-timeout
the supervisor says the grouped stacks before it ends the step.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

import helpers
from helpers import read, st

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "stuck_rank.py"
GUARD_S = 240


def wait_for(predicate, what: str):
    return helpers.wait_for(predicate, what, GUARD_S)


def submit(testbed, home: Path, mode: str, *opts: str) -> tuple[str, Path]:
    out = st(testbed, home, ["sbatch", "--site", "testbed", "--nodes", "4", "--ntasks-per-node", "2",
                             "--timeout", "200", "-t", "5", *opts, str(SCRIPT), mode, "5"])
    assert out.returncode == 0, out.stderr
    job = re.search(r"job (\d+)", out.stdout + out.stderr).group(1)
    return job, home / "jobs" / job


def stuck(folder: Path) -> None:
    """Rank 5 said FAULT and every rank has answered its first requests' worth of steps."""
    # in rank-5.err, or torchrun's node-2.err
    wait_for(lambda: "FAULT" in "".join(read(p) for p in folder.glob("*.err")), "rank 5's fault")
    time.sleep(2)  # the others reach the collective that waits for it


@pytest.mark.timeout(GUARD_S + 60)
@pytest.mark.parametrize("mode, rank5", [
    ("collective", r"rank 5 on node3: all_reduce <- stuck_rank\.py:\d+ step\(\)"),
    ("loader", r"rank 5 on node3: stuck_rank\.py:\d+ __next__\(\)"),
    ("dead", r"rank 5 on node3: dead \(its process is gone\)"),
])
def test_stacks_names_the_stuck_rank_and_its_line_within_5_s(testbed, has_torch, tmp_path, mode, rank5):
    job, folder = submit(testbed, tmp_path / "home", mode)
    try:
        stuck(folder)
        t = time.monotonic()
        proc = subprocess.Popen([testbed.python, "-m", "slurmtorch.cli.main", "stacks", job], text=True,
                                env={**testbed.env, "SLURMTORCH_HOME": str(tmp_path / "home")},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = [proc.stdout.readline(), proc.stdout.readline()]
        named = time.monotonic() - t  # the summary lines are printed before the native frames come
        rest, err = proc.communicate(timeout=120)
        took = time.monotonic() - t
        lines = [ln.rstrip("\n") for ln in first] + rest.splitlines()
        print(f"\n{mode}: slurmtorch stacks named the ranks in {named:.2f} s, all with native frames in "
              f"{took:.2f} s\n" + "\n".join(lines) + f"\n{err}")
        assert proc.returncode == 0, err
        assert re.fullmatch(rank5, lines[0]), lines  # the odd one out first
        assert re.fullmatch(r"ranks 0-4,6-7 \(7\): all_reduce <- stuck_rank\.py:\d+ step\(\)", lines[1]), lines
        assert named < 5
        # py-spy (pinned in the test venv): the ranks in all_reduce show the C++ they wait in
        waiting = lines.index("ranks 0-4,6-7, main thread (most recent call last, native frames by py-spy):")
        assert "  [native] c10d::Work::wait (libtorch_cpu.so)" in lines[waiting:], lines
        assert "native frames: none" not in err, err
    finally:
        testbed.run(["scancel", job])


@pytest.mark.timeout(GUARD_S + 60)
@pytest.mark.parametrize("mode, rank5", [
    ("loader", r"rank 5 on node3: stuck_rank\.py:\d+ __next__\(\)"),
    ("dead", r"rank 5 on node3: dead \(its process is gone\)"),
])
def test_a_hang_timeout_says_the_grouped_stacks_before_it_ends_the_step(testbed, has_torch, tmp_path, mode, rank5):
    job, folder = submit(testbed, tmp_path / "home", mode, "--max-restarts", "1", "--hang-timeout", "15")
    try:
        # No spare node on the 4-node testbed: after the hang the job is requeued without node3.
        batch = wait_for(lambda: "start 0 failed" in read(folder / "batch.out") and read(folder / "batch.out"),
                         "the supervisor's verdict on the hang")
        said = batch[:batch.index("start 0 failed")]
        print(f"\n{mode}:\n{said}")
        ending = said.index("ending the step")
        stacks = [ln.split("stacks: ", 1)[1] for ln in said.splitlines() if ln.startswith("slurmtorch: stacks: ")]
        assert said.index("slurmtorch: stacks: ") > ending  # said once the hang is named
        assert said.index("slurmtorch: stacks: ") < said.index("srun: ")  # before the step is ended
        assert re.fullmatch(rank5, stacks[0]), stacks
        assert re.fullmatch(r"ranks 0-4,6-7 \(7\): all_reduce <- stuck_rank\.py:\d+ step\(\)", stacks[1]), stacks
        status = st(testbed, tmp_path / "home", ["status", job]).stdout
        assert "stacks when start 0 hung:" in status and stacks[0] in status, status
    finally:
        testbed.run(["scancel", job])


@pytest.mark.timeout(GUARD_S + 60)
def test_a_hang_timeout_says_the_grouped_stacks_when_every_rank_waits_in_a_collective(testbed, has_torch, tmp_path):
    """Rank 5 in a collective its partner never joins, the others in theirs: nobody is in its
    own code to blame, so nothing is restarted, but the stacks are said long before the
    group's timeout (200 s here) ends the job."""
    job, folder = submit(testbed, tmp_path / "home", "collective", "--max-restarts", "1", "--hang-timeout", "15")
    try:
        batch = wait_for(lambda: "slurmtorch: stacks: ranks" in read(folder / "batch.out") and read(folder / "batch.out"),
                         "the supervisor's stacks of the waiting ranks")
        print(f"\ncollective:\n{batch}")
        said = batch.splitlines()
        stood = next(i for i, ln in enumerate(said) if "all 8 ranks have stood still in torch for" in ln)
        stacks = [ln.split("stacks: ", 1)[1] for ln in said[stood + 1:] if ln.startswith("slurmtorch: stacks: ")]
        assert re.fullmatch(r"rank 5 on node3: all_reduce <- stuck_rank\.py:\d+ step\(\)", stacks[0]), stacks
        assert re.fullmatch(r"ranks 0-4,6-7 \(7\): all_reduce <- stuck_rank\.py:\d+ step\(\)", stacks[1]), stacks
        assert "ending the step" not in batch and "start 0 failed" not in batch  # nobody blamed, nothing ended
        status = st(testbed, tmp_path / "home", ["status", job]).stdout
        assert "RUNNING" in status and "stacks when start 0 hung:" in status and stacks[0] in status, status
    finally:
        testbed.run(["scancel", job])


@pytest.mark.timeout(GUARD_S + 60)
@pytest.mark.parametrize("launcher", ["mpirun", "torchrun"])
@pytest.mark.slurm_versions
def test_stacks_reach_every_rank_whatever_launched_them(testbed, has_torch, tmp_path, launcher):
    """mpirun's ranks on the batch node sit in the batch step, which scancel --batch reaches
    only as far as its shell (they are sessions of their own): they are signalled again by pid.
    torchrun's ranks are children of its agent, in sessions of their own too."""
    job, folder = submit(testbed, tmp_path / "home", "loader", "--launcher", launcher)
    try:
        stuck(folder)
        out = st(testbed, tmp_path / "home", ["stacks", job, "--native-wait-s", "0"])
        print(f"\n{launcher}:\n{out.stdout}{out.stderr}")
        lines = out.stdout.splitlines()
        assert out.returncode == 0, out.stderr
        assert re.fullmatch(r"rank 5 on node3: stuck_rank\.py:\d+ __next__\(\)", lines[0]), lines
        assert re.fullmatch(r"ranks 0-4,6-7 \(7\): all_reduce <- stuck_rank\.py:\d+ step\(\)", lines[1]), lines
    finally:
        testbed.run(["scancel", job])


def test_stacks_on_a_folder_that_is_not_a_slurm_job_says_so_and_touches_nothing(testbed, tmp_path):
    """Issue 44: a job folder with a job.json whose id Slurm does not know (made by hand, or
    its job long forgotten): said in one line before any file there is removed or made."""
    home = tmp_path / "home"
    folder = home / "jobs" / "987655"
    (folder / "stacks").mkdir(parents=True)
    for level in (home, home / "jobs", folder, folder / "stacks"):
        level.chmod(0o700)
    (folder / "job.json").write_text('{"launcher": "srun", "nodes": 1, "ntasks": 2, "ntasks_per_node": 2}\n')
    (folder / "stacks" / "rank-0.txt").write_text("an earlier answer\n")
    (folder / "stacks" / "rank-1.native.txt").write_text("an earlier native answer\n")

    def contents() -> dict[str, str]:
        return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}

    before = contents()
    r = st(testbed, home, ["stacks", "987655"])
    assert r.returncode == 1 and r.stderr.startswith("error: job 987655 is not known to Slurm"), r.stderr
    assert r.stdout == "" and contents() == before
