"""Signals to slurmtorch itself (issue 14, items 5 and 6; issue 24, item 14), with real
mpirun, real Slurm and real signals.

- A SIGTERM/SIGHUP to `slurmtorch mpirun`'s pid alone, or a SIGTERM to a Python process
  in `Distributor(local_mode=True).run`, must end prterun and every rank (they ran to
  completion before: Python died at once, bash alone with it).
- A SIGTERM/SIGHUP to `slurmtorch sbatch`'s process group during submission must leave
  no held job and no `.submitting-*` folder: all or nothing, then one line, exit
  128+signal. Wrappers named sbatch/scontrol first on PATH sleep before exec'ing the real
  command, so that the signal lands inside the window.
- Ctrl-C (SIGINT to the foreground process group) ends a run with 130 and one line, as
  `python x.py` ends with 130: no MPI_ABORT box, no traceback, no line per rank.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SLEEPER = """\
import os, sys, time
open(os.path.join(sys.argv[1], f"pid-{os.getpid()}"), "w").close()
time.sleep(30)
"""

DISTRIBUTOR_CALLER = """\
import os, sys, time
from slurmtorch import Distributor

def sleep_and_tell(folder):
    open(os.path.join(folder, f"pid-{os.getpid()}"), "w").close()
    time.sleep(30)

Distributor(num_processes=2, local_mode=True, progress=False).run(sleep_and_tell, sys.argv[1])
"""


# --------------------------------------------------------------------------- processes


def default_signals() -> None:
    """The child starts with TERM/HUP/INT at their defaults, whatever ran pytest: a run under
    `nohup` (or a CI runner that ignores HUP) passes SIG_IGN on through exec, and slurmtorch
    rightly keeps ignoring a signal its caller chose to ignore."""
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) from /proc, or None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def launch_of(ranks: set[int], caller: int) -> set[int]:
    """The ranks and every process above them up to `caller` (prterun, bash, ...): what a
    signal to `caller` must end. Walked upwards, so a launch that was detached from its
    caller (the old Distributor's) is found too."""
    found = set()
    for pid in ranks:
        while pid not in (caller, 1, 0) and pid not in found:
            found.add(pid)
            stat = _stat(pid)
            if stat is None:
                break
            pid = stat[1]
    return found


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def rank_pids(folder: Path) -> set[int]:
    return {int(p.name.split("-")[1]) for p in folder.glob("pid-*")}


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.05)


def started(proc: subprocess.Popen, folder: Path, ranks: int) -> set[int]:
    """The launch below `proc` once all `ranks` ranks have written their pid."""
    def ready() -> bool:
        assert proc.poll() is None, f"exited early ({proc.returncode}): {read(folder / 'stderr')}"
        return len(rank_pids(folder)) == ranks
    wait_for(ready, 90, f"{ranks} ranks to start")
    tree = launch_of(rank_pids(folder), proc.pid)
    assert "prterun" in {comm(p) for p in tree}, tree
    return tree


def read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def kill_leftovers(pids: set[int]) -> None:
    """The old code leaves ranks running for 30 s: end them so they burden no later test."""
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- item 5: a local launch


@pytest.mark.timeout(150)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_mpirun_cli_ends_prterun_and_every_rank(mpi_env, tmp_path, signum):
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    proc = subprocess.Popen([sys.executable, "-m", "slurmtorch.cli.main", "mpirun", "-n", "3", str(script),
                             str(tmp_path)], env=dict(mpi_env, SLURMTORCH_HOME=str(tmp_path / "home")), cwd=REPO,
                            stdout=subprocess.DEVNULL,
                            stderr=(tmp_path / "stderr").open("w"), start_new_session=True,
                            preexec_fn=default_signals)
    tree: set[int] = set()
    try:
        tree = started(proc, tmp_path, 3)
        os.kill(proc.pid, signum)  # the pid only, not its group: Ctrl-C reaches the group already
        t0 = time.monotonic()
        proc.wait(timeout=30)
        err = read(tmp_path / "stderr")
        assert proc.returncode == 128 + signum, err
        assert err.splitlines()[-1] == f"error: {signum.name}: stopped mpirun and its ranks", err
        wait_for(lambda: not any(alive(p) for p in tree), 10, "prterun and the ranks to end")
        assert time.monotonic() - t0 < 10
    finally:
        proc.kill()
        kill_leftovers(tree)


@pytest.mark.timeout(150)
def test_sigterm_to_a_distributor_caller_ends_its_local_ranks(mpi_env, has_torch, tmp_path):
    """No handler of ours in the user's process: the guard's parent-death signal does it."""
    script = tmp_path / "caller.py"
    script.write_text(DISTRIBUTOR_CALLER)
    env = dict(mpi_env, SLURMTORCH_HOME=str(tmp_path / "home"), PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env, stdout=subprocess.DEVNULL,
                            stderr=(tmp_path / "stderr").open("w"), start_new_session=True,
                            preexec_fn=default_signals)
    tree: set[int] = set()
    try:
        tree = started(proc, tmp_path, 2)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGTERM  # Python's own default: we installed nothing
        wait_for(lambda: not any(alive(p) for p in tree), 10, "prterun and the ranks to end")
    finally:
        proc.kill()
        kill_leftovers(tree)


# --------------------------------------------------------------------------- Ctrl-C


def ctrl_c(argv: list[str], env: dict, folder: Path, ranks: int) -> tuple[int, str, str]:
    """Start `argv` as a terminal starts a foreground job (a process group of its own, SIGINT
    at its default), and once `ranks` ranks run, SIGINT its whole group as Ctrl-C does;
    (exit code as a shell shows it, stdout, stderr)."""
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=(folder / "stdout").open("w"),
                            stderr=(folder / "stderr").open("w"), start_new_session=True, preexec_fn=default_signals)
    ran: set[int] = set()
    try:
        def ready() -> bool:
            assert proc.poll() is None, f"exited early ({proc.returncode}): {read(folder / 'stderr')}"
            return len(rank_pids(folder)) == ranks
        wait_for(ready, 90, f"{ranks} ranks to start")
        ran = rank_pids(folder)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
        wait_for(lambda: not any(alive(p) for p in ran), 10, "the ranks to end")
    finally:
        proc.kill()
        kill_leftovers(ran)
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    return code, read(folder / "stdout"), read(folder / "stderr")


def no_noise(err: str) -> None:
    for noise in ("MPI_ABORT", "Abort is in progress", "Traceback", "failed:"):
        assert noise not in err, err


@pytest.mark.timeout(150)
def test_ctrl_c_to_the_mpirun_cli_exits_130_with_one_line(mpi_env, tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    code, _, err = ctrl_c([sys.executable, "-m", "slurmtorch.cli.main", "mpirun", "-n", "2", str(script),
                           str(tmp_path)], dict(mpi_env, SLURMTORCH_HOME=str(tmp_path / "home")), tmp_path, 2)
    # torch's own C++ warnings (`[W1125 ...] [c10d] ...`, where a host name does not resolve) are the host's
    ours = [ln for ln in err.splitlines() if not re.match(r"\[W\d{4} ", ln)]
    started = "slurmtorch: run local-1 (2 ranks; where each stands: slurmtorch stacks local-1)"  # said at the start
    assert (code, ours) == (130, [started, "error: interrupted (Ctrl-C): stopped mpirun and its ranks"]), err


@pytest.mark.timeout(150)
def test_ctrl_c_to_a_rank_without_a_launcher_exits_130_with_one_line(tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "SLURM_"))}
    code, _, err = ctrl_c([sys.executable, "-m", "slurmtorch.bootstrap", "--no-init", str(script), str(tmp_path)],
                          env, tmp_path, 1)
    assert (code, err) == (130, f"rank 0 on {os.uname().nodename}: interrupted (Ctrl-C)\n")


@pytest.mark.timeout(150)
def test_ctrl_c_under_torchrun_gives_one_line_from_the_ranks(has_torch, tmp_path):
    """torchrun's own words (its SignalException traceback, exit 1) are torchrun's; the ranks
    add one line, not a report per rank."""
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "SLURM_"))}
    _, _, err = ctrl_c([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m",
                        "slurmtorch.bootstrap", "--no-init", str(script), str(tmp_path)], env, tmp_path, 2)
    ours = [ln for ln in err.splitlines() if ln.startswith("rank ")]
    assert ours == [f"rank 0 on {os.uname().nodename}: interrupted (Ctrl-C)"], err
    assert "MPI_ABORT" not in err and "rank 1" not in err


# --------------------------------------------------------------------------- item 6: a submission

# Each wrapper touches MARKER when it enters its window, then sleeps 3 s there.
SLOW_RELEASE = """#!/bin/bash
for a in "$@"; do
  if [ "$a" = release ]; then : >"{marker}"; sleep 3; fi
done
exec {real} "$@"
"""
# sbatch has made the (held) job, but its id has not reached slurmtorch yet.
SLOW_SBATCH_ANSWER = """#!/bin/bash
out=$({real} "$@"); rc=$?
: >"{marker}"; sleep 3
printf '%s\\n' "$out"
exit $rc
"""


def slow(folder: Path, name: str, template: str, testbed) -> Path:
    """A `name` first on PATH that opens a 3 s window around the real one; its marker."""
    real = shutil.which(name, path=testbed.env["PATH"])
    assert real, f"{name} not on the testbed's PATH"
    marker = folder / f"{name}-in-window"
    wrapper = folder / name
    wrapper.write_text(template.format(real=real, marker=marker))
    wrapper.chmod(0o755)
    return marker


def queued_states(testbed, name: str) -> list[str]:
    """`state reason` of every job named `name` squeue still knows, ended ones included."""
    proc = testbed.run(["squeue", "-h", "-t", "all", "-n", name, "-o", "%T %r"], timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def signalled_in_window(proc: subprocess.Popen, marker: Path, err: Path, signum: int, what: str,
                        group: bool = True) -> None:
    """Once the wrapper says it is in its window, `signum` to the CLI's process group (as a
    terminal's hangup or Ctrl-C) or to its process alone; then until the CLI has ended."""
    try:
        wait_for(lambda: marker.exists() or proc.poll() is not None, 60, what)
        assert proc.poll() is None, read(err)
        (os.killpg if group else os.kill)(proc.pid, signum)
        proc.wait(timeout=60)
    finally:
        proc.kill()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("command, template", [("scontrol", SLOW_RELEASE), ("sbatch", SLOW_SBATCH_ANSWER)])
@pytest.mark.slurm_versions
def test_a_signal_during_submission_leaves_no_held_job_and_no_folder(testbed, tmp_path, command, template,
                                                                      signum):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = slow(bin_dir, command, template, testbed)
    home = tmp_path / "home"
    name = f"sig{os.getpid()}{command[:2]}{int(signum)}"
    env = dict(testbed.env, SLURMTORCH_HOME=str(home), PATH=f"{bin_dir}{os.pathsep}{testbed.env['PATH']}")
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    proc = subprocess.Popen([sys.executable, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed",
                             "--nodes", "1", "--job-name", name, str(REPO / "examples" / "probe.py")], env=env, cwd=REPO,
                            stdout=out.open("w"), stderr=err.open("w"), start_new_session=True,
                            preexec_fn=default_signals)
    signalled_in_window(proc, marker, err, signum, f"{command} to enter its window")
    assert proc.returncode == 128 + signum, read(err)
    assert read(out) == ""  # no id printed: the job must not exist
    assert read(err).splitlines()[-1].startswith(f"error: {signum.name}: submission undone"), read(err)
    # Bounded poll: a job left behind would show PENDING (JobHeldUser) here for good.
    wait_for(lambda: all(s.startswith("CANCELLED") for s in queued_states(testbed, name)), 15,
             f"no job named {name} but cancelled ones: {queued_states(testbed, name)}")
    jobs = home / "jobs"
    assert not jobs.exists() or list(jobs.iterdir()) == []  # no .submitting-*, no job folder


# The release went through and the job started: its script writes in its folder (as a
# checkpointing script does) while the signal is undone.
RELEASED_AND_RUNNING = """#!/bin/bash
{real} "$@" || exit
for a in "$@"; do
  if [ "$a" = release ]; then
    for i in $(seq 100); do [ "$(squeue -h -j "${{@: -1}}" -o %T)" = RUNNING ] && break; sleep 0.2; done
    sleep 1; : >"{marker}"; sleep 3
  fi
done
"""
WRITES_IN_ITS_FOLDER = """import os, pathlib
while True:
    pathlib.Path(os.environ["SLURMTORCH_JOB_DIR"], "checkpoints").mkdir(parents=True, exist_ok=True)
"""


@pytest.mark.timeout(120)
@pytest.mark.slurm_versions
def test_a_signal_after_the_release_cancels_the_running_job_before_its_folder_goes(testbed, tmp_path):
    """CI on Slurm 24.11: a job released as the signal came started at once, and wrote its
    folder again after the undo had removed it (the undo removed first, cancelled second)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = slow(bin_dir, "scontrol", RELEASED_AND_RUNNING, testbed)
    script = tmp_path / "writes.py"
    script.write_text(WRITES_IN_ITS_FOLDER)
    home = tmp_path / "home"
    name = f"sigrun{os.getpid()}"
    env = dict(testbed.env, SLURMTORCH_HOME=str(home), PATH=f"{bin_dir}{os.pathsep}{testbed.env['PATH']}")
    err = tmp_path / "stderr"
    proc = subprocess.Popen([sys.executable, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed",
                             "--nodes", "1", "--job-name", name, str(script)], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=err.open("w"), start_new_session=True,
                            preexec_fn=default_signals)
    signalled_in_window(proc, marker, err, signal.SIGTERM, "the job to start after its release")
    assert proc.returncode == 128 + signal.SIGTERM, read(err)
    wait_for(lambda: all(s.startswith("CANCELLED") for s in queued_states(testbed, name)), 15,
             f"no job named {name} but cancelled ones: {queued_states(testbed, name)}")
    time.sleep(2)  # a job still writing would have made its folder again by now
    jobs = home / "jobs"
    assert not jobs.exists() or list(jobs.iterdir()) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_term_and_hup_stop_a_wait_as_ctrl_c_does_and_carry_their_signal(signum, request):
    """stops_as_interrupts: the signal raises a KeyboardInterrupt (what a waiter answers);
    the waiter's line names it and the exit code is 128 + it. Handlers restored after."""
    from slurmtorch.submit.interrupts import StopSignal, stops_as_interrupts
    from slurmtorch.submit.follow.waiting import interrupted

    outer = signal.signal(signum, signal.SIG_DFL)  # live, whatever the runner left (nohup ignores HUP)
    request.addfinalizer(lambda: signal.signal(signum, outer))
    before = signal.getsignal(signum)
    with pytest.raises(KeyboardInterrupt) as e, stops_as_interrupts():
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the handler runs at once: never reached
    assert isinstance(e.value, StopSignal) and e.value.signum == signum
    assert signal.getsignal(signum) is before
    stopped = interrupted("12", None, cancel=False, signum=signum)
    assert stopped.exit_code == 128 + signum
    assert stopped.render() == (f"slurmtorch: stopped waiting ({signal.Signals(signum).name}): job 12 is still "
                                "queued or running; slurmtorch cancel 12 stops it")
    assert interrupted("12", None, cancel=False).render() == \
        "slurmtorch: job 12 is still queued or running; slurmtorch cancel 12 stops it"


# --------------------------------------------------------------------------- a chain's submission

# The Nth call of the wrapped program (N: {nth}) opens the window: sbatch after the real one
# made the held job, before its id reaches slurmtorch; scontrol before the real release.
NTH_CALL = """#!/bin/bash
n=$(( $(cat "{count}" 2>/dev/null || echo 0) + 1 )); echo $n >"{count}"
[ "{when}" = before ] && [ $n = {nth} ] && {{ : >"{marker}"; sleep 3; }}
out=$({real} "$@"); rc=$?
[ "{when}" = after ] && [ $n = {nth} ] && {{ : >"{marker}"; sleep 3; }}
printf '%s\\n' "$out"
exit $rc
"""
CHAIN_PART = "import sys; print(sys.argv[1], 'ran')\n"


def chain_submission(testbed, tmp_path: Path, name: str, program: str, when: str, nth: int):
    """`slurmtorch chain` of three parts named `name` (one held job each), with `program`'s
    `nth` call slowed `when` the real one runs; (process, marker, home, stdout, stderr)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = shutil.which(program, path=testbed.env["PATH"])
    marker = bin_dir / "in-window"
    (bin_dir / program).write_text(NTH_CALL.format(real=real, marker=marker, count=bin_dir / "calls", when=when,
                                                   nth=nth))
    (bin_dir / program).chmod(0o755)
    (tmp_path / "part.py").write_text(CHAIN_PART)
    (tmp_path / "chain.yaml").write_text("site: testbed\nparts:\n" + "".join(
        f"  - {{name: {p}, script: part.py, args: [{p}], job_name: {name}, time: '2'}}\n"
        for p in ("train", "evaluate", "export")))
    home = tmp_path / "home"
    env = dict(testbed.env, SLURMTORCH_HOME=str(home), PATH=f"{bin_dir}{os.pathsep}{testbed.env['PATH']}")
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    proc = subprocess.Popen([sys.executable, "-m", "slurmtorch.cli.main", "chain", "chain.yaml"], env=env,
                            cwd=tmp_path, stdout=out.open("w"), stderr=err.open("w"), start_new_session=True,
                            preexec_fn=default_signals)
    return proc, marker, home, out, err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum, program, when, nth", [
    (signal.SIGTERM, "sbatch", "after", 2),   # part 1 held, part 2's job made but its id not read yet
    (signal.SIGINT, "sbatch", "before", 3),   # parts 1 and 2 held, part 3 not submitted
])
def test_a_chain_killed_while_its_parts_go_in_leaves_no_held_job_and_no_folder(testbed, tmp_path, signum, program,
                                                                              when, nth):
    """Issue 44: every part already in is cancelled and no `.submitting-*` folder is left,
    with one line and 128+signal; nothing printed as submitted."""
    name = f"chain{os.getpid()}{int(signum)}"
    proc, marker, home, out, err = chain_submission(testbed, tmp_path, name, program, when, nth)
    # the process alone: sbatch, in a session of its own, goes on
    signalled_in_window(proc, marker, err, signum, f"{program} call {nth} to enter its window", group=False)
    assert proc.returncode == 128 + signum, read(err)
    assert read(out) == "", read(out)
    said = "interrupted (Ctrl-C)" if signum == signal.SIGINT else signum.name
    assert read(err).splitlines()[-1] == f"error: {said}: chain submission undone: no part left queued", read(err)
    wait_for(lambda: all(s.startswith("CANCELLED") for s in queued_states(testbed, name)), 15,
             f"no job named {name} but cancelled ones: {queued_states(testbed, name)}")
    jobs = home / "jobs"
    assert not jobs.exists() or list(jobs.iterdir()) == [], list(jobs.iterdir())


@pytest.mark.timeout(120)
def test_a_chain_killed_as_its_parts_are_released_is_all_in_and_says_its_ids(testbed, tmp_path):
    """A HUP during the release: past the last point of no return, so the whole chain is in,
    every part's id printed, then the process ends as the signal says."""
    name = f"chainrel{os.getpid()}"
    proc, marker, home, out, err = chain_submission(testbed, tmp_path, name, "scontrol", "before", 1)
    signalled_in_window(proc, marker, err, signal.SIGHUP, "the release to enter its window")
    ids = dict(line.split() for line in read(out).splitlines())
    assert list(ids) == ["train", "evaluate", "export"], (read(out), read(err))
    assert proc.returncode == -signal.SIGHUP, read(err)  # sent again once the chain was in: it ends as it would have
    assert not [s for s in queued_states(testbed, name) if "JobHeldUser" in s], queued_states(testbed, name)
    assert sorted(p.name for p in (home / "jobs").iterdir()) == sorted(ids.values())
