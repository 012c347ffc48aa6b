"""The ssh sockets' last resort, <tmp>/slurmtorch-ssh-UID: taken under a sticky /tmp, refused
where someone else could have made it or could swap it."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from slurmtorch.errors import ClusterError
from slurmtorch.remote import ssh

TOO_LONG = {"XDG_CACHE_HOME": "/" + "c" * 60}  # no room for a socket there: the last resort is next


@pytest.fixture
def tmp(monkeypatch):
    """A stand-in for /tmp with a short path (pytest's tmp_path is too long for a socket)."""
    short = tempfile.mkdtemp(prefix="st-", dir="/tmp")
    folder = Path(short) / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    shutil.rmtree(short, ignore_errors=True)


def test_the_last_resort_under_a_sticky_world_writable_tmp_is_taken(tmp):
    # /tmp is 1777: anyone may write there, but its sticky bit keeps others from renaming our
    # folder, so only the folder itself must be ours and private. Before main's 15e09c7 the
    # parent was checked as ours too, and this always ended in "no private folder".
    tmp.chmod(0o1777)
    folder = ssh.socket_folder(TOO_LONG)
    assert folder == tmp / f"slurmtorch-ssh-{os.getuid()}"
    assert folder.stat().st_mode & 0o777 == 0o700


def test_a_last_resort_folder_others_can_write_is_refused(tmp):
    tmp.chmod(0o1777)
    planted = tmp / f"slurmtorch-ssh-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)  # as anyone could have made it before us
    with pytest.raises(ClusterError, match="no private folder"):
        ssh.socket_folder(TOO_LONG)


def test_a_tmp_others_can_write_without_the_sticky_bit_is_refused(tmp):
    tmp.chmod(0o777)  # others could rename our folder away and put theirs in its place
    with pytest.raises(ClusterError, match="no private folder"):
        ssh.socket_folder(TOO_LONG)
