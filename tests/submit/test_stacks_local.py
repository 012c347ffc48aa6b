"""`slurmtorch stacks` of a local `slurmtorch mpirun` run (issue 26): its folder, its id, its ranks asked here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import helpers
from slurmtorch import protocol
from slurmtorch.errors import SpecError, SubmitError
from slurmtorch.submit.jobfolder import localrun

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "stuck_rank.py"
LOADER_LINE = next(i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1) if "the loader's stuck read" in line)


def cli(env, *argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmtorch.cli.main", *argv], capture_output=True, text=True,
                          env=env, timeout=180, **kw)


@pytest.mark.mpi
@pytest.mark.timeout(600)
def test_stacks_of_a_local_run_name_the_rank_stuck_in_its_own_code_and_its_line(tmp_path, mpi_env, has_torch):
    """4 ranks under real mpirun; rank 2 sleeps in its data loader, the others wait in all_reduce."""
    env = dict(mpi_env, SLURMTORCH_HOME=str(tmp_path / "home"))
    err = tmp_path / "run.err"
    with open(err, "w") as e:
        run = subprocess.Popen([sys.executable, "-m", "slurmtorch.cli.main", "mpirun", "-n", "4", str(SCRIPT), "loader",
                                "2"], stdout=subprocess.DEVNULL, stderr=e, env=env, cwd=tmp_path)
    try:
        helpers.wait_for(lambda: "FAULT" in err.read_text(), "rank 2's fault", 300)
        assert err.read_text().splitlines()[0] == (
            "slurmtorch: run local-1 (4 ranks; where each stands: slurmtorch stacks local-1)")
        waiting = re.compile(r"ranks 0-1,3 \(3\): all_reduce <- stuck_rank\.py:\d+ step\(\)")
        for argv in (["stacks", "local-1"], ["stacks"]):  # without an id: the one local run running
            # The others reach the all_reduce that waits for rank 2 within a step (0.2 s); ask
            # again until they stand there, however loaded the host.
            def answered(argv=argv):
                out = cli(env, *argv)
                lines = out.stdout.splitlines()
                return out if out.returncode == 0 and len(lines) > 1 and waiting.fullmatch(lines[1]) else None
            out = helpers.wait_for(answered, "ranks 0, 1, 3 in all_reduce", 120)
            print(out.stdout, out.stderr)
            lines = out.stdout.splitlines()
            assert lines[0] == f"rank 2 on {os.uname().nodename}: stuck_rank.py:{LOADER_LINE} __next__()", lines
            # py-spy (pinned in the test venv): the waiting ranks' native frames show c10d's wait
            assert any(ln.startswith("  [native] c10d::") for ln in lines), lines
    finally:
        run.terminate()
        run.wait(120)
    assert run.returncode == 143
    out = cli(env, "stacks", "local-1")
    assert out.returncode == 1 and out.stderr.startswith("error: local run local-1 has ended (exit 143)"), out.stderr


def test_local_runs_count_up_and_only_the_newest_ended_ones_stay(tmp_path, monkeypatch):
    root = tmp_path / "home" / "local"
    folders = [localrun.create("#!/bin/bash\n", 4, root) for _ in range(3)]
    assert [localrun.run_id(f) for f in folders] == ["local-1", "local-2", "local-3"]
    assert oct(folders[0].stat().st_mode & 0o777) == "0o700"
    assert localrun.run_dir("local-2", root) == folders[1]
    with pytest.raises(SpecError, match="invalid local run id"):
        localrun.run_dir("local-x", root)
    with pytest.raises(SubmitError, match="3 local runs are running: local-1, local-2, local-3"):
        localrun.only_live_run(root)
    monkeypatch.setattr(localrun, "KEEP", 1)
    for i, f in enumerate(folders[:2]):
        (f / protocol.EXIT_CODE).write_text("0\n")
        os.utime(f / protocol.EXIT_CODE, (1000 + i, 1000 + i))
    localrun.ended(folders[1])
    assert not folders[0].exists() and folders[1].exists()  # the newest ended one stays; the running one is never touched
    assert localrun.only_live_run(root) == folders[2]
    assert localrun.run_id(localrun.create("", 1, root)) == "local-4"


@pytest.mark.mpi
def test_a_run_whose_folder_cannot_be_made_still_runs_and_says_so(tmp_path, mpi_env):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "local").write_text("a file where the local runs' folder goes\n")
    script = tmp_path / "hello.py"
    script.write_text("print('hello')\n")
    out = cli(dict(mpi_env, SLURMTORCH_HOME=str(home)), "mpirun", "-n", "1", str(script), cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == "hello\n", out.stderr
    assert out.stderr.startswith("slurmtorch: note: this run has no folder, so slurmtorch stacks cannot ask it: "), out.stderr
