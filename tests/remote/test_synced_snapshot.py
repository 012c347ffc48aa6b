"""A snapshot taken on the cluster of code a laptop synced: exactly the files the laptop's
record lists (never what else the mirror holds), each checked against the hash taken on
the laptop, and the laptop's commit and tree in snapshot.json. Real files, no ssh (the
record is what remote.sync sends; the testbed's tests send it over ssh)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from slurmtorch.errors import SpecError, SubmitError
from slurmtorch.protocol import CODE_DIR
from slurmtorch.submit.edge.git import git
from slurmtorch.submit.jobfolder import codecopy, snapshot


def mirror(tmp_path: Path, files: dict[str, str]) -> tuple[Path, dict]:
    root = tmp_path / "sync" / "proj-0123456789ab"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    manifest = [[name, hashlib.sha256(text.encode()).hexdigest(), ""] for name, text in files.items()]
    record = {"root": "/home/me/proj", "git": True, "commit": "3f2c1a9e0b1d" * 3, "dirty": True, "script": "train.py",
              "cwd": "", "files": len(files), "bytes": 0, "manifest": manifest, "mirror": str(root),
              "origin": "laptop:/home/me/proj"}
    return root, record


def take(tmp_path: Path, snap: snapshot.Snapshot) -> tuple[Path, dict]:
    folder = tmp_path / "home" / "jobs" / "1"
    folder.mkdir(parents=True)
    return folder, codecopy.take(snap, folder, git, 1 << 30)


def test_only_the_files_the_laptop_sent_are_taken_and_the_laptops_commit_is_recorded(tmp_path):
    root, record = mirror(tmp_path, {"train.py": "print(1)\n", "pkg/m.py": "x = 1\n"})
    (root / "deleted_on_the_laptop.py").write_text("stale\n")  # an earlier sync's file the mirror keeps
    record["manifest"].append(["link.py", "link", "train.py"])
    snap = snapshot.from_sync(record, str(root / "train.py"), str(root))
    folder, taken = take(tmp_path, snap)
    code = folder / CODE_DIR
    assert sorted(str(p.relative_to(code)) for p in code.rglob("*") if not p.is_dir()) == ["link.py", "pkg/m.py",
                                                                                          "train.py"]
    assert os.readlink(code / "link.py") == "train.py"
    assert (taken["commit"], taken["dirty"], taken["root"]) == (record["commit"], True, "laptop:/home/me/proj")
    assert snapshot.summary(taken) == "code=3f2c1a9e0b1d-dirty"
    assert snap.script == "train.py" and snap.cwd == ""


def test_a_file_changed_in_the_mirror_since_the_laptop_sent_it_is_refused(tmp_path):
    root, record = mirror(tmp_path, {"train.py": "print(1)\n"})
    (root / "train.py").write_text("print(2)\n")  # another submission from the same tree synced meanwhile
    snap = snapshot.from_sync(record, str(root / "train.py"), str(root))
    with pytest.raises(SubmitError, match="is not as the laptop sent it") as err:
        take(tmp_path, snap)
    assert "submit again" in (err.value.tip or "")


def test_a_file_missing_from_the_mirror_is_refused(tmp_path):
    root, record = mirror(tmp_path, {"train.py": "print(1)\n", "gone.py": ""})
    (root / "gone.py").unlink()
    with pytest.raises(SubmitError, match="gone.py in the synced copy"):
        take(tmp_path, snapshot.from_sync(record, str(root / "train.py"), str(root)))


def test_a_script_outside_the_synced_tree_is_refused(tmp_path):
    root, record = mirror(tmp_path, {"train.py": ""})
    with pytest.raises(SpecError, match="is not in the code synced from /home/me/proj"):
        snapshot.from_sync(record, str(tmp_path / "elsewhere.py"), str(root))


def test_the_working_folder_inside_the_mirror_is_where_the_job_starts(tmp_path):
    root, record = mirror(tmp_path, {"exp/train.py": ""})
    snap = snapshot.from_sync(record, str(root / "exp" / "train.py"), str(root / "exp"))
    assert (snap.script, snap.cwd) == ("exp/train.py", "exp")


def test_a_manifest_that_writes_through_a_link_it_makes_is_refused_and_nothing_lands_outside(tmp_path):
    """A laptop's record listing ld -> (somewhere outside) and ld/s.py (was: the cluster's copy
    wrote s.py outside the job folder, and it stayed after the failed submission)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    root, record = mirror(tmp_path, {"ld/s.py": "print('s')\n"})
    record["manifest"].insert(0, ["ld", "link", str(outside)])
    with pytest.raises(SubmitError, match=r"^snapshot failed: ld/s\.py in the synced copy .* is reached through "
                                          r"the link ld"):
        take(tmp_path, snapshot.from_sync(record, str(root / "ld" / "s.py"), str(root)))
    assert list(outside.iterdir()) == []
