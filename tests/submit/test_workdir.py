"""Where a job runs and where its files go (docs/users-guide.md#where-a-job-runs): the code
from the job's snapshot, relative files in the folder it was submitted from, each array task
(trial) in a folder of its own below it; a folder outside git too big to copy runs anyway."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from slurmtorch.submit import sites

from slurmtorch.submit.launch import render
from slurmtorch.submit.edge import git as edge_git
from slurmtorch.submit.jobfolder import codecopy, snapshot
from slurmtorch.submit.jobfolder.snapshot import Snapshot
from slurmtorch.submit.launch.spec import build_spec
from slurmtorch.submit.jobfolder.trialfolders import MAX_FOLDER_NAME, trial_folder

from test_render import bash_syntax_ok, golden_options

REPO = Path(__file__).resolve().parents[2]


def trial_section(text: str) -> str:
    """The batch script's lines from the trial's set-up to its `cd`, to run in a real bash."""
    start = text.index('SLURMTORCH_TRIAL="$SLURM_ARRAY_TASK_ID"')
    cd = text.index('\nmkdir -p -- "$trial_dir" && cd -- "$trial_dir"', start)
    return text[start:text.index("\n", cd + 1) + 1]


@pytest.mark.parametrize("kw, folders", [
    (dict(sweep=("lr=1e-3,1e-4", "bs=32,64")), ["lr=1e-3,bs=32", "lr=1e-3,bs=64", "lr=1e-4,bs=32", "lr=1e-4,bs=64"]),
    (dict(array="0-3"), ["trial-0", "trial-1", "trial-2", "trial-3"]),
])
def test_each_trial_starts_in_its_own_folder_below_the_submission_folder(tmp_path, kw, folders):
    text = render.render_sbatch(build_spec(sites.load_site("testbed"), golden_options("testbed", nodes=2, **kw)))
    bash_syntax_ok(text)
    section = trial_section(text)
    for trial, name in enumerate(folders):
        (tmp_path / "ckpt.pt").write_text("the submission folder's own\n")
        out = subprocess.run(["bash", "-c", f"SLURMTORCH_JOB_DIR={tmp_path}\n{section}\npwd; ls"],
                             env={**os.environ, "SLURM_ARRAY_TASK_ID": str(trial)}, cwd=tmp_path,
                             capture_output=True, text=True, check=True)
        assert out.stdout.splitlines() == [str(tmp_path / "trials" / name)], out  # and empty: no other trial's files
        (tmp_path / "trials" / name / "ckpt.pt").write_text(f"trial {trial}\n")


def test_a_trials_folder_is_named_by_its_parameters_so_the_same_trial_finds_it_again():
    assert trial_folder(0, (("lr", "1e-3"), ("bs", "32"))) == trial_folder(5, (("lr", "1e-3"), ("bs", "32")))
    assert trial_folder(0, (("lr", "1e-3"),)) != trial_folder(0, (("lr", "1e-4"),))
    assert trial_folder(3, ()) == "trial-3"
    assert trial_folder(0, (("p", "a/../b c$'"),)) == "p=a%2F..%2Fb%20c%24%27"
    long = trial_folder(0, (("p", "x" * 300),))
    assert long.startswith("params-") and long == trial_folder(1, (("p", "x" * 300),))
    assert long != trial_folder(0, (("p", "x" * 301),)) and len(long) < MAX_FOLDER_NAME


@pytest.mark.parametrize("launcher", ["srun", "mpirun", "torchrun"])
def test_a_snapshot_job_runs_the_copy_but_starts_in_the_submission_folder(launcher):
    snap = Snapshot(root="/home/user/p", git=True, script="src/train.py", cwd="")
    spec = build_spec(sites.load_site("testbed"), golden_options("testbed", launcher=launcher,
                                                                 script="/home/user/p/src/train.py"))
    text = render.render_sbatch(replace(spec, snapshot=snap))
    bash_syntax_ok(text)
    assert '"$SLURMTORCH_CODE"/src/train.py' in text
    assert 'cd "$SLURMTORCH_CODE"' not in text and "\ncd " not in text
    assert '[ -d "$SLURMTORCH_CODE" ] || die ' in text  # a removed job folder still fails in one line


def test_a_module_of_a_snapshot_job_is_imported_from_the_copy():
    snap = Snapshot(root="/home/user/p q", git=True, script=None, cwd="a b")
    spec = build_spec(sites.load_site("testbed"), golden_options("testbed", script=None, module="pkg.train"))
    text = render.render_sbatch(replace(spec, snapshot=snap))
    assert "--import-from \"$SLURMTORCH_CODE\"/'a b' -m pkg.train" in text


def test_the_bootstrap_imports_a_module_from_the_copy_while_running_in_the_working_folder(tmp_path):
    code, work = tmp_path / "code", tmp_path / "work"
    for folder, version in ((code, "submitted"), (work, "edited")):
        (folder / "pkg").mkdir(parents=True)
        (folder / "pkg" / "__init__.py").write_text("")
        (folder / "pkg" / "train.py").write_text(f"import os\nprint({version!r}, os.getcwd())\n")
    out = subprocess.run([sys.executable, "-m", "slurmtorch.bootstrap", "--from", "single", "--no-init",
                          "--import-from", str(code), "-m", "pkg.train"], cwd=work, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["submitted", str(work)]


# --------------------------------------------------------------------------- a big folder outside git


def big_folder(tmp_path: Path, data: dict[str, bytes]) -> Path:
    root = tmp_path / "exp"
    (root / "models").mkdir(parents=True)
    (root / "train.py").write_text("import models.net\n")
    (root / "utils.py").write_text("")
    (root / "models" / "__init__.py").write_text("")
    (root / "models" / "net.py").write_text("")
    (root / "data").mkdir()
    for name, blob in data.items():
        (root / "data" / name).write_bytes(blob)
    return root


@pytest.mark.parametrize("what, data, limit", [
    ("more than 20000 files", {f"{i}.npy": b"" for i in range(snapshot.MAX_FILES + 1)}, 1 << 30),
    ("2.0 MiB, over the 1.0 MiB limit", {"big.npy": b"\0" * (2 << 20)}, 1 << 20),
])
def test_a_folder_outside_git_too_big_to_copy_runs_with_its_python_code_and_says_so(tmp_path, capsys, what, data,
                                                                                   limit):
    root = big_folder(tmp_path, data)
    folder = tmp_path / "home" / "jobs" / "1"
    folder.mkdir(parents=True)
    record = codecopy.take(snapshot.locate(str(root / "train.py"), None, str(root)), folder, edge_git.git, limit)
    assert sorted(m[0] for m in record["manifest"]) == ["models/__init__.py", "models/net.py", "train.py", "utils.py"]
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"slurmtorch: snapshot: {root} is not a git work tree and holds {what}: copied its Python "
                           "code only (4 .py files")


@pytest.mark.skipif(shutil.which("setpriv") is None or os.geteuid() != 0, reason="needs root and setpriv")
def test_a_folder_outside_git_with_others_private_files_runs_with_its_python_code(world_readable_tmp):
    # /tmp as a user sees it: another user's private folder and file beside the script.
    root = world_readable_tmp / "exp"
    (root / "theirs").mkdir(parents=True, mode=0o700)
    (root / "theirs.bin").write_text("private")
    os.chmod(root / "theirs.bin", 0o600)
    os.chmod(root, 0o755)
    for name in ("train.py", "helper.py"):
        (root / name).write_text("")
        os.chmod(root / name, 0o644)
    probe = ("from slurmtorch.submit.edge import git as edge_git\n"
             "from slurmtorch.submit.jobfolder import codecopy, snapshot\n"
             f"r = {str(root)!r}; notes = []\n"
             "snap = snapshot.locate(r + '/train.py', None, r)\n"
             "print(sorted(e.path for e in codecopy.list_entries(snap, edge_git.git, 1 << 30, '/nonexistent', [], notes)))\n"
             "print(*notes)\n")
    out = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c", probe],
                         capture_output=True, text=True, timeout=60, cwd=str(world_readable_tmp),
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    listed, note = out.stdout.splitlines()
    assert listed == "['helper.py', 'train.py']"
    assert note.startswith(f"slurmtorch: snapshot: {root} is not a git work tree and holds a ")
    assert "cannot read (theirs" in note and "copied its Python code only (2 .py files" in note


# --------------------------------------------------------------------------- a sweep's --wait


def test_a_sweeps_wait_streams_every_trials_rank_0_each_line_marked_with_its_trial(tmp_path):
    import io

    from slurmtorch.submit.follow.waiting import trial_tails

    for trial in (0, 1, 10):
        (tmp_path / f"trial-{trial}").mkdir()
        (tmp_path / f"trial-{trial}" / "rank-0.out").write_text(f"resumed at epoch 0\ntrial {trial}  10%\rtrial {trial} 100%")
        (tmp_path / f"trial-{trial}" / "rank-1.out").write_text("not rank 0's\n")
    (tmp_path / "trial-1" / "rank-0.err").write_text("a warning\n")
    out, err = io.StringIO(), io.StringIO()
    tails = trial_tails(tmp_path, out, err)
    assert sorted(tails) == [0, 1, 10]
    for pair in tails.values():
        for t in pair:
            t.pump()
            t.finish()  # a progress bar's line: its final state, marked once
    assert out.getvalue() == "".join(f"[trial {k}] resumed at epoch 0\n[trial {k}] trial {k} 100%" for k in (0, 1, 10))
    assert err.getvalue() == "[trial 1] a warning\n"


# --------------------------------------------------------------------------- local runs: the same rule


RESUME = REPO / "tests" / "scripts" / "relative_resume.py"


@pytest.mark.mpi
def test_a_local_mpirun_writes_relative_files_where_it_was_started_and_a_second_run_resumes(tmp_path, mpi_env):
    work = tmp_path / "work"
    work.mkdir()
    env = {**mpi_env, "SLURMTORCH_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "slurmtorch.cli.main", "mpirun", "-n", "2", str(RESUME), "2"]
    for expected in ("trained 2 epochs from 0", "trained 0 epochs from 2"):
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert f"{expected} in {work}\n" in proc.stdout, proc.stdout
    assert (work / "ckpt.pt").read_text() == "2\n"


@pytest.mark.mpi
def test_a_local_distributor_writes_relative_files_where_it_was_started(tmp_path, mpi_env, has_torch):
    work = tmp_path / "work"
    work.mkdir()
    code = ("from slurmtorch import Distributor\n"
            f"Distributor(num_processes=2, local_mode=True).run({str(RESUME)!r}, '3', 'outputs/ckpt.pt')\n")
    env = {**mpi_env, "SLURMTORCH_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=work, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (work / "outputs" / "ckpt.pt").read_text() == "3\n"
