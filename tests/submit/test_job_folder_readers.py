"""Verbs that read or write a job folder (`stacks`, `logs`, `status`) apply the submit side's
ownership rules first, before any scheduler program runs, and `stacks` signals only
processes it can prove are the job's (issue 34).

Real folders really owned by a second local user (`nobody`; these tests run as root, whom
permissions never stop), the real CLI with no Slurm program on PATH (reaching one would be
a different error), real processes holding real locks."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slurmtorch import protocol
from slurmtorch import rankfiles
from slurmtorch.submit.edge import srun
from slurmtorch.submit.follow import stackrequest

REPO = Path(__file__).resolve().parent.parent.parent
OTHER = pwd.getpwnam("nobody").pw_uid
HOST = os.uname().nodename


def cli(home: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLURMTORCH_HOME": str(home), "PYTHONPATH": str(REPO), "PATH": "/nonexistent"}
    return subprocess.run([sys.executable, "-m", "slurmtorch", *argv], env=env, capture_output=True, text=True,
                          timeout=60)


def job(folder: Path, ntasks: int = 1, launcher: str = "srun") -> Path:
    folder.mkdir(parents=True, mode=0o700)
    (folder / protocol.JOB).write_text(json.dumps({"launcher": launcher, "ntasks": ntasks, "nodes": 1}))
    (folder / "rank-0.out").write_text("their words\n")
    return folder


@pytest.fixture
def theirs(tmp_path) -> Path:
    """The issue's case: SLURMTORCH_HOME another user owns, job 99 in it, and its stacks/ a
    link (theirs) to a 0700 folder of mine holding a file of mine."""
    home = tmp_path / "theirs"
    folder = job(home / "jobs" / "99")
    job(home / "jobs" / "98" / "trial-1")
    (home / "jobs" / "98" / protocol.TRIALS).write_text(json.dumps({"trials": {"1": {}}}))
    job(home / "local" / "1", launcher="mpirun").joinpath(protocol.JOB).write_text(
        json.dumps({"launcher": "mpirun", "ntasks": 1, "local": True}))
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    (mine / protocol.stacks_name(0)).write_text("mine\n")
    (folder / protocol.STACKS).symlink_to(mine)
    for path in [home, *home.rglob("*")]:
        os.lchown(path, OTHER, -1)
    os.chmod(home, 0o755)
    return home


def refused(done: subprocess.CompletedProcess, path: Path, why: str) -> None:
    assert done.returncode == 1 and done.stdout == "", done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"error: {path} ") and why in lines[0], done.stderr
    assert len(lines) == 2 and lines[1].startswith("tip: "), done.stderr


def test_stacks_in_a_home_another_user_owns_touches_nothing_and_runs_no_scheduler_program(theirs, tmp_path):
    """Was: rank-0.txt in my folder deleted, native-wanted made there, then scancel run."""
    done = cli(theirs, "stacks", "99")
    refused(done, theirs, f"(SLURMTORCH_HOME) belongs to nobody (uid {OTHER}), not to you")
    assert sorted(os.listdir(tmp_path / "mine")) == [protocol.stacks_name(0)]


@pytest.mark.parametrize("argv", [["logs", "99"], ["status", "99"], ["status"], ["stacks", "98_1"],
                                  ["stacks", "local-1"], ["stacks"], ["logs", "98", "--trial", "1"]])
def test_every_verb_that_reads_a_job_folder_refuses_a_home_another_user_owns(theirs, argv):
    refused(cli(theirs, *argv), theirs, "belongs to nobody")


@pytest.mark.parametrize("owner, mode, why", [(OTHER, 0o700, "belongs to nobody"),
                                              (None, 0o770, "is writable by its group (mode 0770)")])
def test_a_job_folder_of_mine_in_my_home_but_not_mine_or_writable_by_others_is_refused(tmp_path, owner, mode, why):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    folder = job(home / "jobs" / "99")
    os.chmod(folder, mode)
    if owner is not None:
        os.chown(folder, owner, -1)
    refused(cli(home, "logs", "99"), folder, f"(in SLURMTORCH_HOME {home}) {why}")


def test_a_stacks_folder_planted_as_another_users_link_is_refused_before_anything_is_asked(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    folder = job(home / "jobs" / "99")
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    (mine / protocol.stacks_name(0)).write_text("mine\n")
    (folder / protocol.STACKS).symlink_to(mine)
    os.lchown(folder / protocol.STACKS, OTHER, -1)
    refused(cli(home, "stacks", "99"), folder / protocol.STACKS, f"is a symbolic link owned by nobody (uid {OTHER})")
    assert sorted(os.listdir(mine)) == [protocol.stacks_name(0)]


def test_a_missing_job_folder_is_still_the_plain_not_found_line_and_nothing_is_made(tmp_path):
    done = cli(tmp_path / "home", "logs", "7")
    assert done.returncode == 1 and done.stderr.startswith("error: no job folder ") and not (tmp_path / "home").exists()


# --------------------------------------------------------------------------- which processes are signalled

WATCHER = textwrap.dedent('''\
    import os, signal, sys, time
    from pathlib import Path
    signal.signal(signal.SIGWINCH, lambda *a: Path(sys.argv[1]).write_text("signalled"))
    print("ready", flush=True)
    time.sleep(60)
''')

HOLDER = textwrap.dedent('''\
    import sys, time
    from slurmtorch.bootstrap.stacks import hold_alive
    hold_alive(sys.argv[1], sys.argv[2])
    print("ready", flush=True)
    time.sleep(60)
''')


RANK = textwrap.dedent('''\
    import os, signal, sys, time
    from pathlib import Path
    from slurmtorch import rankfiles
    from slurmtorch.bootstrap.stacks import hold_alive
    signal.signal(signal.SIGWINCH, lambda *a: Path(sys.argv[2]).write_text("signalled"))
    hold_alive(sys.argv[1], rankfiles.alive_line(os.uname().nodename, os.getpid()))
    print("ready", flush=True)
    time.sleep(60)
''')


def wait_for_file(path: Path) -> None:
    for _ in range(600):  # a bound for a broken handler only: the signal lands in microseconds
        if path.exists():
            return
        signal.sigtimedwait([], 0.05)
    raise AssertionError(f"{path} never appeared")


def start(code: str, *args: str, **env: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO), **env})
    assert proc.stdout.readline() == "ready\n"
    return proc


def test_a_pid_whose_process_does_not_hold_the_alive_lock_is_never_signalled(tmp_path):
    """A local run's alive file naming a process of mine (not the rank), its lock held by
    another: was signalled, because some process held the lock."""
    (tmp_path / protocol.STACKS).mkdir()
    victim = start(WATCHER, str(tmp_path / "hit"))
    alive = tmp_path / protocol.STACKS / protocol.alive_name(0)
    holder = start(HOLDER, str(alive), rankfiles.alive_line(HOST, victim.pid))
    rank = start(RANK, str(tmp_path / protocol.STACKS / protocol.alive_name(1)), str(tmp_path / "rank"))
    try:
        assert stackrequest.lock_holder(alive) == holder.pid
        stackrequest.signal_here(tmp_path, 2, HOST)
        wait_for_file(tmp_path / "rank")  # the rank, holding its own lock, got it
        assert not (tmp_path / "hit").exists()
    finally:
        for p in (victim, holder, rank):
            p.kill()
            p.wait()
    assert stackrequest.lock_holder(alive) is None  # its holder gone


def test_on_a_node_only_processes_of_the_job_get_the_signal_by_pid(tmp_path):
    """The step `signal_pids` runs on each node kills a pid only where its environment is
    the job's (SLURM_JOB_ID), so a pid read from a file cannot reach another process of mine."""
    calls = []
    srun.signal_pids("43", {"node1": [5, 6]}, runner=lambda argv, **kw: calls.append(argv))
    (argv,) = calls
    assert argv[:9] == ["srun", "--overlap", "--jobid=43", "--nodelist=node1", "--nodes=1", "--ntasks=1", "--quiet",
                        "sh", "-c"]
    script = argv[9]
    assert argv[10:] == ["sh", "43", "5", "6"]
    ours = start(WATCHER, str(tmp_path / "ours"), SLURM_JOB_ID="43")
    other = start(WATCHER, str(tmp_path / "other"), SLURM_JOB_ID="44")
    try:
        subprocess.run(["sh", "-c", script, "sh", "43", str(ours.pid), str(other.pid), "999999999"], check=True,
                       timeout=30)
        wait_for_file(tmp_path / "ours")
        assert not (tmp_path / "other").exists()
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()


def test_a_ranks_stacks_folder_is_private_whatever_the_umask_so_stacks_accepts_it(tmp_path):
    """A group-writable stacks/ is refused (others could plant what `stacks` acts on), so the
    ranks make it 0700 even under umask 002 (a user-private group's usual umask)."""
    from slurmtorch.submit.jobfolder import jobdir

    home = tmp_path / "home"
    folder = job(home / "jobs" / "5")
    code = ("import os, sys; os.umask(0o002); from slurmtorch.bootstrap import stacks; "
            "assert stacks.install(0, 'nodeX', {'SLURMTORCH_JOB_DIR': sys.argv[1]})")
    subprocess.run([sys.executable, "-c", code, str(folder)], check=True, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (folder / protocol.STACKS).stat().st_mode & 0o777 == 0o700
    assert jobdir.checked(folder / protocol.STACKS, home) == folder / protocol.STACKS


def test_an_allocations_folder_another_user_made_first_is_refused_before_a_file_is_written(tmp_path):
    """`slurmtorch run` in an allocation writes script.sh into jobs/<id>: made privately, or
    refused where it exists and is not this user's alone (was: written into whatever was there)."""
    from slurmtorch.errors import SubmitError
    from slurmtorch.submit.jobfolder import jobdir

    root = tmp_path / "home" / "jobs"
    root.mkdir(parents=True, mode=0o700)
    os.chmod(root.parent, 0o700)
    planted = root / "12"
    planted.mkdir(mode=0o777)
    os.chown(planted, OTHER, -1)
    with pytest.raises(SubmitError, match=rf"^{planted} \(in SLURMTORCH_HOME .*\) belongs to nobody"):
        jobdir.allocation_run(root, "12", "#!/bin/bash\n", {"ntasks": 1})
    assert list(planted.iterdir()) == []
    folder = jobdir.allocation_run(root, "13", "#!/bin/bash\n", {"ntasks": 1})
    assert folder.stat().st_mode & 0o777 == 0o700 and (folder / protocol.SCRIPT).read_text() == "#!/bin/bash\n"
