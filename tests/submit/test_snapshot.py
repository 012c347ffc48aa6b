"""Snapshots: which tree and which files a job's copy of its code holds (pure), and the copy
itself on real trees made with the real git (names that break shells, links out of the
tree, a submodule, a huge untracked file, an unreadable one). No Slurm here: the testbed's
tests are in test_snapshot_testbed.py."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from slurmtorch.errors import SpecError, SubmitError
from slurmtorch.protocol import CODE_DIR, SNAPSHOT
from slurmtorch.submit.edge import sbatch
from slurmtorch.submit.edge import git as edge_git
from slurmtorch.submit.jobfolder import codecopy, snapshot
from slurmtorch.submit.jobfolder.snapshot import Entry, Snapshot

GIT_ID = ["-c", "user.email=t@example.invalid", "-c", "user.name=t", "-c", "protocol.file.allow=always"]


def git(folder: Path, *args: str) -> None:
    subprocess.run(["git", *GIT_ID, "-C", str(folder), *args], check=True, capture_output=True)


def repo(path: Path, files: dict[str, str], ignore: str = "") -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    if ignore:
        (path / ".gitignore").write_text(ignore)
    git(path, "add", "-A")
    git(path, "commit", "-qm", "first")
    return path


def take(snap: Snapshot, home: Path, limit: int = 1 << 30) -> tuple[Path, dict]:
    """A snapshot into a fresh folder under `home`/jobs, as scheduler.submit makes it."""
    folder = home / "jobs" / "1"
    folder.mkdir(parents=True)
    return folder, codecopy.take(snap, folder, edge_git.git, limit)


def listed(tmp_path: Path, root: Path, script: str) -> set[str]:
    snap = snapshot.locate(str(root / script), None, str(root))
    return {e.path for e in codecopy.list_entries(snap, edge_git.git, 1 << 30, str(tmp_path / "home"))}


# --------------------------------------------------------------------------- pure


def test_a_script_in_a_git_work_tree_snapshots_the_tree_and_runs_from_the_same_folder_inside_it():
    tree = {"/r/.git", "/r/src/train.py"}
    snap = snapshot.locate("/r/src/train.py", None, "/r/src", exists=tree.__contains__)
    assert snap == Snapshot(root="/r", git=True, script="src/train.py", cwd="src")


def test_a_script_outside_git_snapshots_its_folder_and_a_cwd_outside_the_tree_stays_where_it_is():
    snap = snapshot.locate("/w/exp/train.py", None, "/data", exists=lambda p: False)
    assert snap == Snapshot(root="/w/exp", git=False, script="train.py", cwd=None)


def test_a_module_snapshots_the_cwds_work_tree_or_the_cwd_only_where_the_module_is():
    assert snapshot.locate(None, "pkg.train", "/r/sub", exists={"/r/.git"}.__contains__) == Snapshot(
        root="/r", git=True, script=None, cwd="sub")
    assert snapshot.locate(None, "pkg.train", "/w", exists={"/w/pkg"}.__contains__) == Snapshot(
        root="/w", git=False, script=None, cwd="")
    assert snapshot.locate(None, "torch.utils.collect_env", "/home/u", exists=lambda p: False) is None


def test_a_path_that_only_starts_like_the_root_is_outside_it():
    assert snapshot.inside("/r2/x", "/r") is None
    assert snapshot.inside("/r", "/r") == ""
    assert snapshot.inside("/r/a/b", "/r") == "a/b"


def test_gits_listing_is_split_on_nul_once_per_path_with_any_bytes_kept():
    out = b"a b\0new\nline\0a b\0caf\xe9.py\0vendor/x/\0"
    assert snapshot.git_paths(out) == ["a b", "new\nline", os.fsdecode(b"caf\xe9.py"), "vendor/x"]


def test_links_are_copied_as_links_and_one_leading_out_of_the_tree_keeps_its_place():
    assert snapshot.link_target("data", "../datasets/x", "/r") == "/datasets/x"
    assert snapshot.link_target("a/cfg", "../conf/b.yaml", "/r") == "../conf/b.yaml"
    assert snapshot.link_target("a/cfg", "/etc/hosts", "/r") == "/etc/hosts"
    assert snapshot.link_target("up", "..", "/r/t") == "/r"


def test_only_files_and_links_are_copied():
    fifo = os.stat_result((stat.S_IFIFO | 0o600, 0, 0, 1, 0, 0, 0, 0, 0, 0))
    reg = os.stat_result((stat.S_IFREG | 0o755, 0, 0, 1, 0, 0, 12, 0, 0, 0))
    assert snapshot.entry("p", fifo) is None
    assert snapshot.entry("gone", None) is None
    assert snapshot.entry("run.sh", reg) == Entry("run.sh", "file", size=12, executable=True)


def test_a_tree_over_the_limit_is_refused_in_one_line_naming_its_largest_file_and_the_fix():
    entries = [Entry("a.py", "file", size=10), Entry("weights.bin", "file", size=3 << 20)]
    with pytest.raises(SubmitError) as err:
        snapshot.check_size(entries, "/r", 1 << 20)
    text = err.value.render()
    assert "over the 1.0 MiB limit (largest: weights.bin, 3.0 MiB)" in text
    assert "--no-snapshot" in text and snapshot.LIMIT_SETTING in text
    assert len(err.value.message.splitlines()) == 1


def test_the_setting_turns_snapshots_off_and_the_flag_wins_over_it():
    assert snapshot.wanted(None, {}) is True
    assert snapshot.wanted(None, {"SLURMTORCH_SNAPSHOT": "off"}) is False
    assert snapshot.wanted(True, {"SLURMTORCH_SNAPSHOT": "0"}) is True
    assert snapshot.wanted(False, {}) is False
    with pytest.raises(SpecError, match="neither on nor off"):
        snapshot.wanted(None, {"SLURMTORCH_SNAPSHOT": "maybe"})
    assert snapshot.limit_bytes({"SLURMTORCH_SNAPSHOT_MAX_MB": "5"}) == 5 << 20
    with pytest.raises(SpecError):
        snapshot.limit_bytes({"SLURMTORCH_SNAPSHOT_MAX_MB": "-1"})


def test_status_says_which_commit_ran_and_whether_the_tree_was_dirty():
    record = {"root": "/r", "git": True, "commit": "0123456789abcdef", "dirty": True, "files": 3, "bytes": 2048}
    assert snapshot.summary(record) == "code=0123456789ab-dirty"
    assert snapshot.summary({**record, "dirty": False}) == "code=0123456789ab"
    assert snapshot.summary({**record, "commit": None}) == "code=uncommitted"
    assert snapshot.summary({**record, "git": False}) == "code=folder"
    assert snapshot.summary(None) == "code=in-place"


# --------------------------------------------------------------------------- real trees, real git


def test_tracked_and_untracked_files_are_taken_and_ignored_ones_never(tmp_path):
    root = repo(tmp_path / "r", {"train.py": "print(1)\n", "lib/util.py": "X = 1\n"}, ignore=".env\ndata/\n")
    (root / ".env").write_text("TOKEN=secret\n")
    (root / "data").mkdir()
    (root / "data" / "big.csv").write_text("1,2\n")
    (root / "notes.py").write_text("new, not yet added\n")
    (root / "lib" / "util.py").unlink()  # tracked, deleted since: nothing to copy
    assert listed(tmp_path, root, "train.py") == {"train.py", "notes.py", ".gitignore"}


def test_the_named_script_is_copied_even_where_ignored_and_the_starting_folder_always_exists(tmp_path):
    root = repo(tmp_path / "r", {"train.py": ""}, ignore="scratch/\nruns/\n")
    (root / "scratch").mkdir()
    (root / "scratch" / "try.py").write_text("print('trying')\n")
    (root / "scratch" / "other.py").write_text("")
    (root / "runs" / "a").mkdir(parents=True)
    snap = snapshot.locate(str(root / "scratch" / "try.py"), None, str(root / "runs" / "a"))
    folder, record = take(snap, tmp_path / "home")
    code = folder / CODE_DIR
    assert (code / "scratch" / "try.py").read_text() == "print('trying')\n"
    assert not (code / "scratch" / "other.py").exists() and (code / "runs" / "a").is_dir()
    assert record["files"] == 3  # train.py, .gitignore and the script


def test_names_that_break_shells_are_copied_byte_for_byte(tmp_path):
    names = ["a b.py", "new\nline.py", "q'uote\".py", "$(touch pwned).py", "-dash.py"]
    root = repo(tmp_path / "r", {"train.py": "", **{n: n for n in names}})
    folder, record = take(snapshot.locate(str(root / "train.py"), None, str(root)), tmp_path / "home")
    for n in names:
        assert (folder / CODE_DIR / n).read_text() == n
    assert not (tmp_path / "pwned").exists() and not (folder / CODE_DIR / "pwned").exists()
    assert record["git"] and record["commit"] and record["dirty"] is False and record["files"] == 6


def test_a_link_out_of_the_tree_is_copied_as_a_link_to_the_same_place_and_nothing_out_there_is_copied(tmp_path):
    outside = tmp_path / "datasets"
    outside.mkdir()
    (outside / "huge.bin").write_bytes(b"x" * 1000)
    root = repo(tmp_path / "r", {"train.py": "", "conf/a.yaml": "a: 1\n"})
    os.symlink("../datasets", root / "data")
    os.symlink("conf/a.yaml", root / "a.yaml")
    folder, record = take(snapshot.locate(str(root / "train.py"), None, str(root)), tmp_path / "home")
    code = folder / CODE_DIR
    assert os.readlink(code / "data") == str(outside) and (code / "data" / "huge.bin").exists()
    assert os.readlink(code / "a.yaml") == "conf/a.yaml" and (code / "a.yaml").read_text() == "a: 1\n"
    assert record["bytes"] == len("a: 1\n") and record["dirty"] is True


def test_a_checked_out_submodules_files_are_in_the_snapshot(tmp_path):
    lib = repo(tmp_path / "lib", {"helper.py": "H = 1\n"})
    root = repo(tmp_path / "r", {"train.py": ""})
    git(root, "submodule", "add", "-q", str(lib), "vendor/lib")
    git(root, "commit", "-qm", "submodule")
    assert listed(tmp_path, root, "train.py") >= {"train.py", ".gitmodules", "vendor/lib/helper.py"}
    repo(root / "nested", {"tool.py": ""})  # a repository inside the tree, not a submodule: its files too
    assert "nested/tool.py" in listed(tmp_path, root, "train.py")


def test_a_folder_outside_git_is_copied_without_slurmtorchs_home_or_caches(tmp_path):
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "home" / "jobs" / "7").mkdir(parents=True)
    (tmp_path / "home" / "jobs" / "7" / "batch.out").write_text("old job\n")
    os.mkfifo(tmp_path / "pipe")
    assert listed(tmp_path, tmp_path, "train.py") == {"train.py"}


def test_an_executable_keeps_its_bit_and_the_manifest_names_each_file_by_its_content(tmp_path):
    root = repo(tmp_path / "r", {"train.py": "print(1)\n", "run.sh": "#!/bin/sh\n"})
    os.chmod(root / "run.sh", 0o755)
    folder, record = take(snapshot.locate(str(root / "train.py"), None, str(root)), tmp_path / "home")
    assert os.access(folder / CODE_DIR / "run.sh", os.X_OK)
    manifest = {m[0]: m[1] for m in record["manifest"]}
    assert manifest["train.py"] == hashlib.sha256(b"print(1)\n").hexdigest()
    assert json.loads((folder / SNAPSHOT).read_text())["files"] == 2


def refused_submission(tmp_path: Path, snap: Snapshot, limit: int) -> SubmitError:
    """sbatch.submit with a snapshot that fails: sbatch must never be reached."""
    def no_sbatch(argv, **kw):
        raise AssertionError(f"ran {argv} after a failed snapshot")

    root = tmp_path / "home" / "jobs"
    with pytest.raises(SubmitError) as err:
        sbatch.submit("#!/bin/bash\n", root, runner=no_sbatch, snapshot=snap, snapshot_limit=limit)
    assert os.listdir(root) == [], "a failed snapshot left a folder behind"
    return err.value


def test_a_huge_untracked_file_refuses_the_submission_and_leaves_no_folder(tmp_path):
    root = repo(tmp_path / "r", {"train.py": ""})
    with open(root / "checkpoint.pt", "wb") as f:
        f.truncate(200 << 20)  # sparse: 200 MiB listed, no disk used
    err = refused_submission(tmp_path, snapshot.locate(str(root / "train.py"), None, str(root)), 100 << 20)
    assert "largest: checkpoint.pt, 200.0 MiB" in err.message


def test_a_tree_git_refuses_is_one_line_with_gits_own_words(tmp_path):
    root = repo(tmp_path / "r", {"train.py": ""})
    (root / ".git" / "HEAD").write_text("garbage\n")  # no longer a repository git can read
    err = refused_submission(tmp_path, snapshot.locate(str(root / "train.py"), None, str(root)), 1 << 30)
    assert err.message.startswith(f"snapshot failed: git could not list the files of {root}: fatal: ")
    assert "\n" not in err.message and "--no-snapshot" in err.tip


@pytest.mark.skipif(shutil.which("setpriv") is None or os.geteuid() != 0, reason="needs root and setpriv")
def test_an_unreadable_file_is_named_in_one_line_and_leaves_no_folder(world_readable_tmp):
    # root reads everything: the snapshot runs as nobody, over a tree it may read but for one file.
    base = world_readable_tmp
    root = repo(base / "r", {"train.py": "", "secret.py": "K = 1\n"})
    os.chmod(root / "secret.py", 0o000)
    (base / "home").mkdir()
    shutil.chown(base / "home", "nobody")
    probe = ("import os, pathlib\n"
             "from slurmtorch.submit.edge import sbatch\n"
             "from slurmtorch.submit.jobfolder import snapshot\n"
             "from slurmtorch.errors import SubmitError\n"
             f"r = {str(root)!r}; jobs = pathlib.Path({str(base / 'home' / 'jobs')!r})\n"
             "try:\n"
             "    sbatch.submit('#!/bin/bash\\n', jobs, snapshot=snapshot.locate(r + '/train.py', None, r),\n"
             "                     snapshot_limit=1 << 30, runner=None)\n"
             "except SubmitError as e:\n"
             "    print(e.render()); print(os.listdir(jobs))\n")
    env = {**os.environ, "HOME": str(base / "home"), "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory",
           "GIT_CONFIG_VALUE_0": "*"}
    out = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c",
                          probe], env=env, capture_output=True, text=True, timeout=60, cwd=str(base))
    assert "error: snapshot failed: cannot read " + str(root / "secret.py") + ": Permission denied" in out.stdout, out
    assert out.stdout.strip().endswith("[]"), out.stdout


# --------------------------------------------------------------------------- the batch script


@pytest.mark.parametrize("launcher", ["srun", "mpirun", "torchrun"])
def test_every_launcher_runs_the_copy_by_a_path_bash_reads_back_as_it_was(launcher):
    from test_render import bash_syntax_ok, check_golden, golden_options

    from slurmtorch.submit import sites

    from slurmtorch.submit.launch import render
    from slurmtorch.submit.launch.spec import build_spec

    snap = Snapshot(root="/home/user/p q", git=True, script="a b/$x's.py", cwd="a b")
    spec = build_spec(sites.load_site("testbed"), golden_options("testbed", launcher=launcher,
                                                                 script="/home/user/p q/a b/$x's.py"))
    text = render.render_sbatch(replace(spec, snapshot=snap))
    bash_syntax_ok(text)
    # torchrun gives each `$` of a worker's argument to string.Template: doubled, it reads back as one.
    path = "'a b/$$x'\"'\"'s.py'" if launcher == "torchrun" else "'a b/$x'\"'\"'s.py'"
    assert f'"$SLURMTORCH_CODE"/{path}' in text
    assert "SLURMTORCH_CODE=/home/user/.slurmtorch/jobs/\"${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}\"/code\n" in text
    assert '[ -d "$SLURMTORCH_CODE" ] || die ' in text and 'cd "$SLURMTORCH_CODE"' not in text
    if launcher == "srun":
        check_golden("sbatch-testbed-snapshot.sh", text)


@pytest.mark.parametrize("flags, env, copied", [
    ([], {}, True), (["--no-snapshot"], {}, False), ([], {"SLURMTORCH_SNAPSHOT": "off"}, False),
    (["--snapshot"], {"SLURMTORCH_SNAPSHOT": "off"}, True)])
def test_no_snapshot_and_the_setting_run_the_script_in_place(tmp_path, flags, env, copied):
    (tmp_path / "train.py").write_text("print(1)\n")
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed", "--dry-run",
                           *flags, "train.py"], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={**os.environ, "SLURMTORCH_HOME": str(tmp_path / "home"), **env})
    assert proc.returncode == 0, proc.stderr
    in_place = f"--from slurm {tmp_path / 'train.py'}\n"
    assert ('"$SLURMTORCH_CODE"/train.py\n' in proc.stdout, in_place in proc.stdout) == (copied, not copied)


# --------------------------------------------------------------------------- a script named through a link


def test_a_script_named_through_a_linked_folder_is_copied_once_and_runs_through_the_copied_link(tmp_path):
    """`sbatch ld/s.py` where ld -> d: the copy holds d/s.py and the link, and never writes
    through the link it made (was: "File exists" from writing ld/s.py onto d/s.py)."""
    root = repo(tmp_path / "r", {"d/s.py": "print('s')\n"})
    os.symlink("d", root / "ld")
    folder, record = take(snapshot.locate(str(root / "ld" / "s.py"), None, str(root)), tmp_path / "home")
    code = folder / CODE_DIR
    assert os.readlink(code / "ld") == "d" and (code / "ld" / "s.py").read_text() == "print('s')\n"
    assert sorted(m[0] for m in record["manifest"]) == ["d/s.py", "ld"]


def test_a_script_named_through_an_ignored_link_brings_the_link_along(tmp_path):
    root = repo(tmp_path / "r", {"d/s.py": "print('s')\n"}, ignore="ld\n")
    os.symlink("d", root / "ld")
    folder, _ = take(snapshot.locate(str(root / "ld" / "s.py"), None, str(root)), tmp_path / "home")
    assert (folder / CODE_DIR / "ld" / "s.py").read_text() == "print('s')\n"


def test_a_script_reached_through_a_link_out_of_the_tree_is_refused_in_one_line(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "s.py").write_text("")
    root = repo(tmp_path / "r", {"train.py": ""})
    os.symlink("../elsewhere", root / "out")
    err = refused_submission(tmp_path, snapshot.locate(str(root / "out" / "s.py"), None, str(root)), 1 << 30)
    assert err.message == (f"snapshot refused: the script out/s.py is reached through the link out, which leads "
                           f"out of {root}: the copy would not hold it")
    assert os.listdir(tmp_path / "elsewhere") == ["s.py"]


# --------------------------------------------------------------------------- repositories inside the tree


def nested_tree(tmp_path: Path, how: str) -> Path:
    """A tree whose .gitignore keeps `vendor/lib/secret.txt` and `*.key` out, with vendor/lib a
    repository of its own (`clone`: an untracked clone; `submodule`) that tracks both."""
    lib = repo(tmp_path / "lib", {"helper.py": "H = 1\n", "secret.txt": "TOKEN\n", "deploy.key": "KEY\n",
                                  "notes.tmp": "own rules\n"}, ignore="*.tmp\n")
    git(lib, "add", "-f", "notes.tmp")
    git(lib, "commit", "-qm", "tracked despite its own rule")
    (lib / "untracked.tmp").write_text("its own rule keeps this out\n")
    root = repo(tmp_path / "r", {"train.py": ""}, ignore="vendor/lib/secret.txt\n*.key\n")
    if how == "clone":
        git(root, "clone", "-q", str(lib), "vendor/lib")
        (root / "vendor" / "lib" / "untracked.tmp").write_text("its own rule keeps this out\n")
    else:
        git(root, "submodule", "add", "-q", str(lib), "vendor/lib")
        git(root, "commit", "-qm", "submodule")
    (root / "vendor" / "lib" / "secret.txt").write_text("TOKEN\n")
    return root


@pytest.mark.parametrize("how", ["clone", "submodule"])
def test_a_file_the_trees_gitignore_keeps_out_stays_out_inside_a_nested_repository(tmp_path, how):
    """A rank read vendor/lib/secret.txt on the cluster: the nested repository's own listing
    took it although the tree the user is in ignores it (issue 34)."""
    root = nested_tree(tmp_path, how)
    files = listed(tmp_path, root, "train.py")
    assert "vendor/lib/secret.txt" not in files and "vendor/lib/deploy.key" not in files
    assert "vendor/lib/untracked.tmp" not in files and "vendor/lib/notes.tmp" not in files  # its own rules too,
    assert {"vendor/lib/helper.py", "vendor/lib/.gitignore", "train.py"} <= files  # even on a file it tracks by force


@pytest.mark.parametrize("how", ["clone", "submodule"])
def test_the_snapshot_says_which_repositories_it_took_by_their_own_rules(tmp_path, how, capsys):
    root = nested_tree(tmp_path, how)
    folder, record = take(snapshot.locate(str(root / "train.py"), None, str(root)), tmp_path / "home")
    assert not (folder / CODE_DIR / "vendor" / "lib" / "secret.txt").exists()
    assert record["nested"] == [{"path": "vendor/lib", "kind": how, "left_out": 3}]
    assert capsys.readouterr().err == (f"slurmtorch: snapshot: vendor/lib is a git repository of its own ({how}): "
                                       "taken as its own .gitignore and the tree's say; 3 files they ignore left out\n")


# --------------------------------------------------------------------------- a run's own files (issue 44)


def test_a_sweep_trials_working_folder_is_told_by_the_names_slurmtorch_gives_them():
    from slurmtorch.submit.jobfolder.trialfolders import trial_folder

    for params in [(), (("lr", "1e-3"), ("bs", "32")), (("opt", "it's $x"),), (("long", "v" * 200),)]:
        assert snapshot.in_trials(f"trials/{trial_folder(3, params)}/ckpt.pt"), params
        assert snapshot.in_trials(f"exp/trials/{trial_folder(3, params)}/rank-0.log"), params
    for kept in ["trials/notes.md", "trials/analysis/plot.py", "src/trials.py", "trials.py", "lr=1/trials/x.py"]:
        assert not snapshot.in_trials(kept), kept


def test_untracked_checkpoints_and_big_files_are_named_in_one_line_biggest_first():
    entries = [Entry("train.py", "file", 900), Entry("ckpt.pt", "file", 3 << 20), Entry("tiny.ckpt", "file", 10),
               Entry("data.csv", "file", 5 << 20), Entry("model.bin", "file", 9 << 20), Entry("w.safetensors", "link"),
               Entry("big.py", "file", 2 << 20)]
    untracked = {"ckpt.pt", "tiny.ckpt", "data.csv", "w.safetensors", "train.py", "big.py"}  # model.bin: tracked
    assert snapshot.outputs_line(entries, untracked) == (
        "slurmtorch: snapshot: 4 untracked files look like a run's output, not code, and each job copies them "
        "(10.0 MiB): data.csv (5.0 MiB), ckpt.pt (3.0 MiB), big.py (2.0 MiB) and 1 more; add them to .gitignore, "
        "or --no-snapshot runs the code in place")
    assert snapshot.outputs_line(entries[:3], {"tiny.ckpt"}).startswith(
        "slurmtorch: snapshot: an untracked file looks like a run's output, not code, and each job copies it (0.0 MiB): "
        "tiny.ckpt (0.0 MiB); add it to .gitignore")
    assert snapshot.outputs_line(entries, {"train.py"}) is None


def outputs_tree(tmp_path: Path) -> Path:
    """A tree after a sweep and a run: trials' folders and an untracked checkpoint and log."""
    root = repo(tmp_path / "r", {"train.py": "print(1)\n", "model.bin": "tracked on purpose\n"})
    for rel, size in {"trials/lr=1e-3/ckpt.pt": 4 << 20, "trials/lr=1e-3/rank-0.log": 10, "trials/trial-2/out": 10,
                      "ckpt.pt": 3 << 20, "trials/notes.md": 10, "metrics.jsonl": 2 << 20}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        with open(root / rel, "wb") as f:
            f.truncate(size)
    return root


def test_sweep_trials_stay_out_of_the_copy_and_untracked_outputs_are_named_at_submission(tmp_path, capsys):
    """Issue 44: every later job copied the trials' folders and the untracked checkpoint, silently."""
    root = outputs_tree(tmp_path)
    folder, record = take(snapshot.locate(str(root / "train.py"), None, str(root)), tmp_path / "home")
    assert {m[0] for m in record["manifest"]} == {"train.py", "model.bin", "ckpt.pt", "metrics.jsonl", "trials/notes.md"}
    assert not (folder / CODE_DIR / "trials" / "lr=1e-3").exists()
    assert capsys.readouterr().err.splitlines() == [
        "slurmtorch: snapshot: 2 untracked files look like a run's output, not code, and each job copies them "
        "(5.0 MiB): ckpt.pt (3.0 MiB), metrics.jsonl (2.0 MiB); add them to .gitignore, or --no-snapshot runs the "
        "code in place"]


def test_the_code_sent_to_a_cluster_is_listed_and_said_as_a_snapshot_is(tmp_path, capsys):
    """`--cluster` sends what a snapshot here would take (remote.sync lists with its own git) and
    says the same line."""
    from slurmtorch.usecases import codesync

    root = outputs_tree(tmp_path)
    snap = snapshot.locate(str(root / "train.py"), None, str(root))
    notes: list[str] = []
    sent = {e.path for e in codecopy.list_entries(snap, codesync._git, 1 << 30, str(tmp_path / "home"), [], notes)}
    _, record = take(snap, tmp_path / "home")
    assert sent == {m[0] for m in record["manifest"]} and notes == capsys.readouterr().err.splitlines()


def test_a_folder_outside_git_leaves_its_sweep_trials_out(tmp_path):
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "trials" / "lr=1e-3").mkdir(parents=True)
    (tmp_path / "trials" / "lr=1e-3" / "ckpt.pt").write_bytes(b"\0" * 100)
    assert listed(tmp_path, tmp_path, "train.py") == {"train.py"}
