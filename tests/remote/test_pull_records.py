"""Issue 44: the laptop's own record of what it submitted where, and its ledger of what pulls placed:
private, written whole, read bounded; anything malformed is one line with the fix."""

from __future__ import annotations

import os
import stat

import pytest

from slurmtorch.errors import ClusterError, SubmitError
from slurmtorch.remote import ledger, statefiles, submitted
from slurmtorch.remote.ledger import Placed
from slurmtorch.remote.submitted import Submission

SUB = Submission(cluster="hpc", host="login.hpc", job_id="42", laptop="/home/me/proj",
                 mirror="~/.slurmtorch/sync/proj-0123456789ab", cwd="sub")


@pytest.fixture
def env(tmp_path):
    return {"XDG_STATE_HOME": str(tmp_path / "state")}


def test_a_submission_is_recorded_privately_and_found_again(env, tmp_path):
    path = submitted.record(SUB, env)
    assert path == tmp_path / "state" / "slurmtorch" / "submitted" / "hpc" / "42.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "state" / "slurmtorch").stat().st_mode) == 0o700
    assert submitted.find("hpc", "login.hpc", "42", env) == SUB
    assert SUB.cluster_folder == "~/.slurmtorch/sync/proj-0123456789ab/sub"
    assert submitted.find("hpc", "login.hpc", "43", env) is None
    assert submitted.find("hpc", "other.host", "42", env) is None  # the name now means another cluster
    assert [p.name for p in path.parent.iterdir()] == ["42.json"]  # no temporary file left


def test_the_state_folder_is_refused_when_another_can_write_it(env, tmp_path):
    top = tmp_path / "state" / "slurmtorch"
    top.mkdir(parents=True)
    top.chmod(0o777)
    with pytest.raises(SubmitError, match="is writable by anyone"):
        submitted.record(SUB, env)


def test_only_the_newest_records_are_kept(env, monkeypatch):
    monkeypatch.setattr(submitted, "KEPT", 3)
    for job in ("9", "10", "11", "12", "100"):
        submitted.record(Submission(**{**SUB.__dict__, "job_id": job}), env)
    folder = statefiles.state_folder("submitted/hpc", env)
    assert sorted(p.name for p in folder.iterdir()) == ["100.json", "11.json", "12.json"]


@pytest.mark.parametrize("content", [b"{", b"[]", b'{"cluster": "hpc"}', b"\xff\xfe",
                                     b'{"cluster":"hpc","host":"h","job_id":"42","laptop":"rel","mirror":"m","cwd":""}',
                                     b'{"cluster":"hpc","host":"h","job_id":"42","laptop":"/a","mirror":"m","cwd":"../x"}'])
def test_a_malformed_record_is_one_line_with_the_fix(env, content):
    folder = statefiles.state_folder("submitted/hpc", env)
    (folder / "42.json").write_bytes(content)
    with pytest.raises(ClusterError) as err:
        submitted.find("hpc", "h", "42", env)
    assert "\n" not in err.value.message and str(folder / "42.json") in err.value.message
    assert "--to DIR" in (err.value.tip or "")


def test_a_record_is_read_bounded_and_never_through_a_link_or_fifo(env, tmp_path):
    folder = statefiles.state_folder("submitted/hpc", env)
    (folder / "1.json").write_bytes(b" " * (submitted.RECORD_MAX + 1))
    with pytest.raises(ClusterError, match="cannot be read: over"):
        submitted.find("hpc", "h", "1", env)
    (tmp_path / "elsewhere.json").write_text("{}")
    (folder / "2.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(ClusterError, match="cannot be read"):
        submitted.find("hpc", "h", "2", env)
    os.mkfifo(folder / "3.json")
    with pytest.raises(ClusterError, match="cannot be read: not a plain file"):  # never blocks
        submitted.find("hpc", "h", "3", env)


def test_a_cluster_name_that_is_no_plain_name_is_refused(env):
    with pytest.raises(ClusterError, match="invalid cluster name"):
        submitted.find("../x", "h", "1", env)


def test_the_ledger_round_trips_and_forgets_files_that_are_gone(env, tmp_path):
    dest = tmp_path / "proj"
    dest.mkdir()
    (dest / "ckpt.pt").write_text("w")
    sha = "a" * 64
    ledger.save(str(dest), {"ckpt.pt": Placed(1, 5, sha), "gone.txt": Placed(2, 6, sha)}, env)
    assert ledger.load(str(dest), env) == {"ckpt.pt": Placed(1, 5, sha)}
    assert ledger.load(str(tmp_path / "other"), env) == {}


@pytest.mark.parametrize("value", [[], {"folder": "/x", "files": {}}, {"folder": "F", "files": {"a": [1, 2]}},
                                   {"folder": "F", "files": {"/abs": [1, 2, "a" * 64]}},
                                   {"folder": "F", "files": {"a": [1, 2, "not a hash"]}},
                                   {"folder": "F", "files": {"a": ["1", 2, "a" * 64]}}])
def test_a_malformed_ledger_is_one_line_with_the_fix(value):
    with pytest.raises(ClusterError) as err:
        ledger.parse(value, "F", "/state/l.json")
    assert "/state/l.json" in err.value.message and "remove /state/l.json" in (err.value.tip or "")


def test_a_record_or_ledger_over_its_cap_is_never_written(tmp_path):
    with pytest.raises(ClusterError, match="over slurmtorch's cap"):
        statefiles.write_json(tmp_path / "x.json", {"k": "v" * 100}, cap=50)
    assert list(tmp_path.iterdir()) == []
