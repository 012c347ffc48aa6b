"""Issue 44: a pull's two edges on one machine's files: the cluster side's checks of the folder a
pull reads (pullsource), and the laptop's staging folder and placing (placing)."""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path

import pytest

from slurmtorch.errors import ClusterError, SpecError, SubmitError
from slurmtorch.remote import placing, pullsource
from slurmtorch.remote.ledger import Placed
from slurmtorch.remote.pullplan import DIR, DIRLINK, FILE, LINK, MISSING, plan
from slurmtorch.submit.jobfolder.jobstatus import scontrol_record

# --------------------------------------------------------------------------- the cluster side


def test_the_folder_a_pull_reads_is_this_users_and_has_no_link_from_its_top_down(tmp_path):
    top = tmp_path / "mirror"
    (top / "sub").mkdir(parents=True)
    assert pullsource.checked_folder("7", str(top), "sub") == str(top / "sub")
    assert pullsource.checked_folder("7", str(top), "") == str(top)
    (top / "out").symlink_to("/etc")
    with pytest.raises(SubmitError, match=r"leads through a link, .*/mirror/out: nothing is pulled"):
        pullsource.checked_folder("7", str(top), "out")
    (tmp_path / "linked").symlink_to(top)
    with pytest.raises(SubmitError, match="leads through a link"):  # the job swapped its mirror for a link
        pullsource.checked_folder("7", str(tmp_path / "linked"), "sub")
    with pytest.raises(SubmitError, match="cannot be read"):
        pullsource.checked_folder("7", str(top), "gone")
    for top_, cwd in (("relative", ""), (str(top), "../x"), (str(top), "/etc"), (str(top), "a//b")):
        with pytest.raises(SpecError, match="not a folder a pull reads"):
            pullsource.checked_folder("7", top_, cwd)


def test_a_pull_never_goes_through_a_link_inside_the_jobs_folder(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "ln").symlink_to("/etc")
    with pytest.raises(SubmitError, match="PATH ln/hostname of job 7 leads through a link, ln"):
        pullsource._through_no_link("7", str(tmp_path), "ln/hostname")
    pullsource._through_no_link("7", str(tmp_path), "ln")  # itself: rsync skips it, the answer names it
    pullsource._through_no_link("7", str(tmp_path), "real/x")


def test_the_answer_names_git_folders_and_links_at_any_depth_and_counts_past_its_limit(tmp_path, monkeypatch):
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / "sub" / "vendor" / ".git").mkdir(parents=True)
    (tmp_path / "leak").symlink_to("/etc/hostname")
    (tmp_path / "sub" / "x.txt").write_text("x")
    never, more = pullsource._never_pulled(str(tmp_path), [""])
    assert never == [".git (a git folder)", "leak (a link to /etc/hostname)", "sub/vendor/.git (a git folder)"]
    assert more == 0
    assert pullsource._never_pulled(str(tmp_path), ["sub"]) == (["sub/vendor/.git (a git folder)"], 0)
    monkeypatch.setattr(pullsource, "NAMED", 1)
    assert pullsource._never_pulled(str(tmp_path), [""]) == ([".git (a git folder)"], 2)


def test_the_listing_after_the_transfer_says_each_files_size_and_time_and_nothing_outside(tmp_path):
    (tmp_path / "log").write_text("12345")
    (tmp_path / "ln").symlink_to(tmp_path / "log")
    st = (tmp_path / "log").stat()
    out = pullsource.listing({"job": "7", "top": str(tmp_path), "cwd": "",
                              "files": ["log", "ln", "gone", "../log", "/etc/hostname"]})
    assert out == {"log": [5, st.st_mtime_ns], "ln": None, "gone": None, "../log": None, "/etc/hostname": None}
    back = pullsource.read_listing(json.dumps(out).encode(), "hpc")
    assert back["log"] == (5, st.st_mtime_ns) and back["ln"] is None


def test_the_laptop_reads_the_where_answer_or_says_in_one_line_it_cannot():
    good = {"top": "/s/m", "cwd": "sub", "code": ["train.py"], "state": "RUNNING", "never": [], "unnamed": 0}
    src = pullsource.read_source(b"noise\n" + json.dumps(good).encode() + b"\n", "hpc")
    assert src.folder == "/s/m/sub" and src.running and src.code == ("train.py",)
    assert not pullsource.read_source(json.dumps({**good, "state": "COMPLETED"}).encode(), "hpc").running
    assert not pullsource.read_source(json.dumps({**good, "state": ""}).encode(), "hpc").running
    for bad in (b"", b"{", json.dumps({**good, "never": 3}).encode(), json.dumps({"top": "/x"}).encode()):
        with pytest.raises(ClusterError, match="gave no answer slurmtorch reads"):
            pullsource.read_source(bad, "hpc")
    for folder in ({"top": "rel"}, {"cwd": "../up"}):
        with pytest.raises(ClusterError, match="named no usable folder"):
            pullsource.read_source(json.dumps({**good, **folder}).encode(), "hpc")


def test_scontrol_show_job_gives_the_workdir_whole_with_its_spaces():
    text = ("JobId=7 JobName=train\n   UserId=me(1000) GroupId=me(1000) MCS_label=N/A\n"
            "   JobState=RUNNING Reason=None Dependency=(null)\n   WorkDir=/home/me/my project\n"
            "   StdOut=/home/me/out 7.txt\n\nJobId=8 JobName=other\n   WorkDir=/elsewhere\n")
    fields = scontrol_record(text)
    assert fields["WorkDir"] == "/home/me/my project" and fields["JobState"] == "RUNNING"
    assert fields["UserId"] == "me(1000)" and fields["JobId"] == "7"


def test_without_a_record_the_folder_is_slurms_workdir_of_this_users_job_while_it_knows_it():
    mine = {"WorkDir": "/w", "UserId": f"me({os.getuid()})"}
    assert pullsource._workdir_of("7", mine) == "/w"
    with pytest.raises(SubmitError, match="no record of job 7, and Slurm no longer knows it"):
        pullsource._workdir_of("7", {})
    with pytest.raises(SubmitError, match="is another user's"):
        pullsource._workdir_of("7", {**mine, "UserId": f"them({os.getuid() + 1})"})


# --------------------------------------------------------------------------- the laptop side


def stage_and_plan(stage: Path, dest: Path, ledger=None):
    staged = placing.staged_entries(str(stage))
    here = placing.laptop_entries(str(dest), staged, ledger or {})
    now = {s.path: (s.size, s.mtime_ns) for s in staged if s.kind == FILE}
    return staged, here, plan(staged, here, ledger or {}, now, 0o022)


def test_what_is_staged_is_placed_without_a_link_a_deletion_or_a_mode_of_the_mirrors(tmp_path):
    dest = tmp_path / "proj"
    (dest / "data").mkdir(parents=True)
    dest.chmod(0o755)
    (dest / "data").chmod(0o750)
    (dest / "results").write_text("mine")
    big = tmp_path / "bigdisk"
    big.mkdir()
    (dest / "outputs").symlink_to(big)
    with placing.staging(str(dest)) as stage_s:
        stage = Path(stage_s)
        assert stat.S_IMODE(stage.stat().st_mode) == 0o700 and stage.name.startswith(".slurmtorch-pull-")
        for folder in ("data", "results", "outputs", "fresh"):
            (stage / folder).mkdir()
        (stage / "data" / "new.txt").write_text("new")
        (stage / "results" / "m.json").write_text("{}")
        (stage / "outputs" / "run.txt").write_text("run")
        (stage / "fresh" / "run.sh").write_text("#!/bin/sh\n")
        (stage / "fresh" / "run.sh").chmod(0o700)
        (stage / "ckpt.pt").write_text("w")
        (stage / "ckpt.pt").chmod(0o600)
        staged, here, p = stage_and_plan(stage, dest)
        assert here["outputs"].kind == DIRLINK and here["results"].kind == FILE and here["fresh"].kind == MISSING
        done = placing.apply(p, stage_s, str(dest))
    assert not stage.exists()
    assert sorted(done) == ["ckpt.pt", "data/new.txt", "fresh/run.sh", "outputs/run.txt"]
    assert (dest / "results").read_text() == "mine" and (dest / "outputs").is_symlink()
    assert (big / "run.txt").read_text() == "run"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755 and stat.S_IMODE((dest / "data").stat().st_mode) == 0o750
    assert stat.S_IMODE((dest / "ckpt.pt").stat().st_mode) == 0o644
    assert stat.S_IMODE((dest / "fresh").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "fresh" / "run.sh").stat().st_mode) == 0o755
    st = (dest / "ckpt.pt").stat()
    assert done["ckpt.pt"] == Placed(1, st.st_mtime_ns, placing.sha256(str(dest / "ckpt.pt")))


def test_a_file_placed_before_and_left_alone_is_replaced_one_changed_since_is_kept(tmp_path):
    dest = tmp_path / "proj"
    dest.mkdir()
    for name in ("ckpt.pt", "edited.pt"):
        (dest / name).write_text("old")
        (dest / name).chmod(0o640)
    old = {n: Placed(3, (dest / n).stat().st_mtime_ns, placing.sha256(str(dest / n))) for n in ("ckpt.pt", "edited.pt")}
    (dest / "edited.pt").write_text("mine")
    with placing.staging(str(dest)) as stage_s:
        for name in ("ckpt.pt", "edited.pt"):
            (Path(stage_s) / name).write_text("new!")
        _, here, p = stage_and_plan(Path(stage_s), dest, old)
        done = placing.apply(p, stage_s, str(dest))
    assert (dest / "ckpt.pt").read_text() == "new!" and stat.S_IMODE((dest / "ckpt.pt").stat().st_mode) == 0o640
    assert (dest / "edited.pt").read_text() == "mine" and p.kept == (("edited.pt", "changed here since pulled"),)
    assert list(done) == ["ckpt.pt"]


def test_a_new_file_never_replaces_one_made_after_the_plan(tmp_path):
    dest = tmp_path / "proj"
    dest.mkdir()
    with placing.staging(str(dest)) as stage_s:
        (Path(stage_s) / "x").write_text("job's")
        _, _, p = stage_and_plan(Path(stage_s), dest)
        (dest / "x").write_text("made meanwhile")
        with pytest.raises(ClusterError, match=r"placing .*/x failed: File exists; 0 files placed before it"):
            placing.apply(p, stage_s, str(dest))
    assert (dest / "x").read_text() == "made meanwhile"


def test_the_staging_folder_is_removed_on_an_error_and_on_a_signal(tmp_path):
    dest = tmp_path / "proj"
    dest.mkdir()
    with pytest.raises(RuntimeError):
        with placing.staging(str(dest)) as stage_s:
            (Path(stage_s) / "a").mkdir()
            (Path(stage_s) / "a" / "half").write_text("x")
            raise RuntimeError("boom")
    with pytest.raises(KeyboardInterrupt):  # TERM ends a pull as Ctrl-C does
        with placing.staging(str(dest)) as stage_s:
            os.kill(os.getpid(), signal.SIGTERM)
    assert list(dest.iterdir()) == []


def test_a_destination_that_cannot_be_written_is_one_line(tmp_path):
    with pytest.raises(ClusterError, match="cannot write into"):
        with placing.staging(str(tmp_path / "missing")):
            pass


def test_links_and_files_here_are_told_apart(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "dl").symlink_to(tmp_path)
    (tmp_path / "fl").symlink_to(tmp_path / "f")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    from slurmtorch.remote.pullplan import Staged

    staged = [Staged(n, DIR) for n in ("f", "dl", "fl", "dangling", "f/under")]
    here = placing.laptop_entries(str(tmp_path), staged, {})
    assert {k: v.kind for k, v in here.items()} == {"f": FILE, "dl": DIRLINK, "fl": LINK, "dangling": LINK,
                                                   "f/under": MISSING}
