"""Before a laptop sends its code (`--cluster`), the cluster side checks the workdir as it
checks a job folder's levels, and makes the mirror privately; rsync's refusals read as
their reason. Real folders owned by a real second user (`nobody`; these tests run as root,
whom permissions never stop), the real cluster side (`serve`, as ssh runs it) and real rsync.
The same over ssh from the testbed's laptop: test_remote_testbed.py."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtorch.remote import request, sync
from slurmtorch.usecases import codesync

REPO = Path(__file__).resolve().parent.parent.parent
OTHER = pwd.getpwnam("nobody").pw_uid
MIRROR = "proj-0123456789ab"


def cluster_side(home: Path, *args: str) -> subprocess.CompletedProcess:
    """serve as request.BOOT starts it, the request's header on stdin."""
    code = "import sys; from slurmtorch.cli.serve import main; main(sys.argv[1:])"
    env = {**os.environ, "SLURMTORCH_HOME": str(home), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code, "--", *args], input=request.header(None) + "\n",
                          capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("owner, mode, why", [(OTHER, 0o755, "belongs to nobody"), (OTHER, 0o777, "belongs to nobody"),
                                              (None, 0o775, "is writable by its group")])
def test_a_workdir_another_user_made_or_can_write_is_refused_before_anything_is_sent(tmp_path, owner, mode, why):
    home = tmp_path / "scratch"
    home.mkdir()
    os.chmod(home, mode)
    if owner is not None:
        os.chown(home, owner, -1)
    done = cluster_side(home, request.MIRROR, MIRROR)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"error: {home} (SLURMTORCH_HOME) {why}"), done.stderr
    assert len(done.stderr.splitlines()) == 2 and done.stderr.splitlines()[1].startswith("tip: ")
    if owner is not None:  # the fix is another workdir, which the laptop's clusters file names
        assert done.stderr.endswith("(from a laptop: workdir: of this cluster in its clusters file)\n")
    assert list(home.iterdir()) == []  # no sync/ folder: nothing to send into


def test_a_mirror_planted_as_a_link_by_another_user_is_refused(tmp_path):
    home = tmp_path / "home"
    (home / "sync").mkdir(parents=True, mode=0o700)
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    os.symlink(theirs, home / "sync" / MIRROR)
    os.lchown(home / "sync" / MIRROR, OTHER, -1)
    done = cluster_side(home, request.MIRROR, MIRROR)
    assert done.returncode == 1 and "is a symbolic link owned by nobody" in done.stderr, done.stderr


def test_the_mirror_is_made_private_in_a_workdir_of_ones_own_and_its_name_is_one_word(tmp_path):
    home = tmp_path / "home"
    old = os.umask(0)
    try:
        done = cluster_side(home, request.MIRROR, MIRROR)
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr
    for level in (home, home / "sync", home / "sync" / MIRROR):
        assert stat.S_IMODE(level.stat().st_mode) == 0o700, level
    for name in ("../x", "..", "a/b"):
        bad = cluster_side(home, request.MIRROR, name)
        assert bad.returncode == 2 and bad.stderr.startswith("error: not a mirror's name"), bad.stderr


@pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")
def test_rsyncs_refusal_of_a_planted_link_shows_its_reason_not_only_its_last_line(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("")
    (tmp_path / "file").write_text("")
    os.symlink(tmp_path / "file", tmp_path / "mirror")  # the mirror planted as a link to a file
    proc = subprocess.run(["rsync", "-a", "--from0", "--files-from=-", f"{tmp_path / 'src'}/", f"{tmp_path / 'mirror'}/"],
                          input=b"train.py\0", capture_output=True)
    assert proc.returncode != 0
    said = sync.rsync_said(proc.stderr)
    assert said.startswith("rsync: [Receiver] ERROR: cannot stat destination") and "Not a directory" in said, said
    assert "rsync error:" not in said  # rsync's last line: `errors selecting input/output files, dirs (code 3)`
    assert sync.rsync_said(b"rsync error: some files could not be transferred (code 23)\n").startswith("rsync error:")
    assert sync.rsync_said(b"") == "no message"


def test_the_code_sent_to_a_cluster_leaves_out_what_the_trees_gitignore_ignores_in_a_nested_clone(tmp_path):
    """--cluster lists the tree as a snapshot does, with sync's own git (issue 34: a rank read
    vendor/lib/secret.txt on the cluster); the testbed's test sends it over ssh."""
    from slurmtorch.submit.jobfolder import codecopy, snapshot

    git = ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    lib, root = tmp_path / "lib", tmp_path / "r"
    for folder in (lib, root):
        folder.mkdir()
        subprocess.run([*git, "init", "-q", str(folder)], check=True)
    (lib / "secret.txt").write_text("TOKEN\n")
    (lib / "helper.py").write_text("")
    subprocess.run([*git, "-C", str(lib), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(lib), "commit", "-qm", "lib"], check=True)
    (root / ".gitignore").write_text("secret.txt\n")
    (root / "train.py").write_text("")
    subprocess.run([*git, "clone", "-q", str(lib), str(root / "vendor" / "lib")], check=True)
    nested: list = []
    snap = snapshot.locate(str(root / "train.py"), None, str(root))
    paths = {e.path for e in codecopy.list_entries(snap, codesync._git, 1 << 30, str(tmp_path / "home"), nested)}
    assert paths == {".gitignore", "train.py", "vendor/lib/helper.py"}
    assert codecopy.nested_lines(nested) == ["slurmtorch: snapshot: vendor/lib is a git repository of its own (clone): "
                                             "taken as its own .gitignore and the tree's say; 1 file they ignore left out"]
