"""Issue 44: `slurmtorch pull` from the testbed's laptop, against a hostile job. One job serves
every check here (one submission: each costs CI seconds); each test reads the facts of one pull.

The job writes, in its working folder (the mirror of the laptop folder), what a job that turned
on its user could: a `.git/hooks/post-commit` and an `.envrc`, a file dated years ahead where the
laptop has its own, a folder where the laptop has a file, a folder where the laptop has a link,
a private (0600) checkpoint, an executable and a link out of its folder. Then its job folder's
records are rewritten as the job could (it runs as the user): job.json's `workdir` to another
cluster folder, snapshot.json's tree to another laptop folder holding a `.bashrc`.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from test_remote_testbed import cluster, git, st  # noqa: F401 - `cluster` is a fixture

pytestmark = pytest.mark.testbed

HOSTILE = '''\
import os, time
from pathlib import Path
future = time.time() + 10 * 365 * 86400
def write(path, text, mode=None, when=None):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
    if mode is not None:
        os.chmod(path, mode)
    if when is not None:
        os.utime(path, (when, when))
write(".git/hooks/post-commit", "#!/bin/sh\\ntouch pwned\\n", 0o755)
write(".envrc", "export PWNED=1\\n")
write(".bashrc", "echo pwned\\n", when=future)
write("notes.txt", "the job's notes\\n", when=future)
write("results/metrics.json", "{}\\n")
write("outputs/run.txt", "run\\n")
write("ckpt.pt", "weights\\n", 0o600)
write("train.sh", "#!/bin/sh\\n", 0o755)
os.symlink("/etc/hostname", "leak")
print("wrote", os.getcwd(), flush=True)
'''

_SHARED: dict[str, dict] = {}


def laptop_folder(root: Path) -> None:
    """What a laptop folder holds before a pull: the user's own files, a link to a big disk."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    (root / ".bashrc").write_text("# mine\n")
    (root / "notes.txt").write_text("my notes\n")
    (root / "results").write_text("my results\n")
    bigdisk = root.parent / f"{root.name}-bigdisk"
    bigdisk.mkdir()
    (bigdisk / "theirs.txt").write_text("on the big disk\n")
    (root / "outputs").symlink_to(bigdisk)


@pytest.fixture
def hostile(cluster, tmp_path_factory):  # noqa: F811 - the fixture imported above
    """The job above, submitted from the laptop's `proj` and waited for, then pulled twice:
    `into` (`--to` a laptop folder prepared as `proj` is) while its records are its own, and
    `plain` (no `--to`, from another folder) once they are rewritten."""
    if "facts" in _SHARED:
        return _SHARED["facts"]
    laptop = cluster
    base = tmp_path_factory.mktemp("pull44")
    proj, victim, into, decoy = base / "proj", base / "victim", base / "into", base / "decoy"
    laptop_folder(proj)
    (proj / ".gitignore").write_text("/.bashrc\n/notes.txt\n/results\n/outputs\n")
    (proj / "hostile.py").write_text(HOSTILE)
    git(proj, "init", "-q")
    git(proj, "add", "-A")
    git(proj, "commit", "-qm", "hostile")
    victim.mkdir()
    victim.chmod(0o755)
    (victim / ".bashrc").write_text("# the victim's own\n")
    laptop_folder(into)
    sub = st(laptop, ["sbatch", "--cluster", "testbed", "-N", "1", "-t", "5", "--wait", "hostile.py"], cwd=proj,
             timeout=200)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.split()[0]
    into_pull = st(laptop, ["pull", job, "--to", str(into), "--cluster", "testbed"], cwd=base, timeout=120)
    # What the job could have written (it runs as the user), written here after it so that one
    # job serves both pulls: another cluster folder for its workdir, another laptop folder for its tree.
    decoy.mkdir()
    (decoy / "hostname").write_text("a file of the cluster's\n")
    (decoy / ".bashrc").write_text("echo pwned\n")
    far = (decoy / ".bashrc").stat().st_mtime + 10 * 365 * 86400
    os.utime(decoy / ".bashrc", (far, far))
    folder = laptop.workdir / "jobs" / job
    record = json.loads((folder / "job.json").read_text())
    (folder / "job.json").write_text(json.dumps({**record, "workdir": str(decoy)}))
    snap = json.loads((folder / "snapshot.json").read_text())
    host = str(snap["root"]).partition(":")[0]
    (folder / "snapshot.json").write_text(json.dumps({**snap, "root": f"{host}:{victim}", "cwd": ""}))
    plain_pull = st(laptop, ["pull", job, "--cluster", "testbed"], cwd=base, timeout=120)
    um = os.umask(0)
    os.umask(um)
    _SHARED["facts"] = {"job": job, "proj": proj, "victim": victim, "into": into, "umask": um,
                        "into_pull": into_pull, "plain_pull": plain_pull}
    return _SHARED["facts"]


def tree(root: Path) -> dict[str, str]:
    """Every entry below `root` (links not followed): its kind and, for a file, its text."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = path.read_text()
    return out


@pytest.mark.timeout(400)
def test_pull_writes_only_where_this_laptop_submitted_from_whatever_the_job_rewrote(hostile):
    """Finding 1: the destination and the cluster folder came from files the job can rewrite."""
    plain = hostile["plain_pull"]
    assert plain.returncode == 0, plain.stderr
    victim = hostile["victim"]
    assert tree(victim) == {".bashrc": "# the victim's own\n"}, plain.stderr  # never written
    proj = hostile["proj"]
    assert not (proj / "hostname").exists(), plain.stderr  # the rewritten workdir is not read
    # The existing laptop files stay, however far ahead the job's are dated.
    assert (proj / ".bashrc").read_text() == "# mine\n" and (proj / "notes.txt").read_text() == "my notes\n"
    assert f"into {proj}" in plain.stderr, plain.stderr
    assert "kept yours: " in plain.stderr and ".bashrc" in plain.stderr and "notes.txt" in plain.stderr, plain.stderr
    assert (proj / "ckpt.pt").read_text() == "weights\n"  # what the job wrote, from its own folder


@pytest.mark.timeout(400)
def test_pull_never_brings_a_git_folder_and_names_new_dotfiles_and_executables(hostile):
    """Finding 2: `.git/hooks/post-commit` and `.envrc` came into the laptop's repository silently."""
    into, pulled = hostile["into"], hostile["into_pull"]
    assert pulled.returncode == 0, pulled.stderr
    assert not (into / ".git").exists(), pulled.stderr
    assert (into / ".envrc").read_text() == "export PWNED=1\n"
    lines = pulled.stderr.splitlines()
    assert any(line.startswith("slurmtorch: new dotfiles") and ".envrc" in line for line in lines), pulled.stderr
    assert any(line.startswith("slurmtorch: new executables") and "train.sh" in line for line in lines), pulled.stderr
    assert os.access(into / "train.sh", os.X_OK)
    never = [line for line in lines if line.startswith("slurmtorch: never pulled: ")]
    assert never and ".git (a git folder)" in never[0], pulled.stderr
    assert not (into / "leak").exists() and not (into / "leak").is_symlink()  # a pull makes no link
    assert "leak (a link to /etc/hostname)" in never[0], pulled.stderr


@pytest.mark.timeout(400)
def test_pull_deletes_nothing_and_keeps_the_laptops_files_links_and_modes(hostile):
    """Finding 3: a laptop file and a link were replaced by the job's folders, modes became 0700."""
    into, pulled, um = hostile["into"], hostile["into_pull"], hostile["umask"]
    assert pulled.returncode == 0, pulled.stderr
    assert (into / "results").is_file() and (into / "results").read_text() == "my results\n", pulled.stderr
    assert (into / "outputs").is_symlink(), pulled.stderr  # the user's link stays a link,
    bigdisk = into.parent / "into-bigdisk"
    assert (bigdisk / "run.txt").read_text() == "run\n"  # written through, as rsync -K would
    assert (bigdisk / "theirs.txt").read_text() == "on the big disk\n"
    assert (into / "notes.txt").read_text() == "my notes\n"
    assert stat.S_IMODE((into).stat().st_mode) == 0o755  # the laptop folder's own mode
    assert stat.S_IMODE((into / "ckpt.pt").stat().st_mode) == 0o666 & ~um  # the laptop's default, not 0600
    assert "kept yours: " in pulled.stderr and "results" in pulled.stderr, pulled.stderr


@pytest.mark.timeout(400)
def test_pull_to_a_file_is_one_line(hostile, cluster):  # noqa: F811 - the fixture imported above
    """Finding 4: `--to FILE` was exit 70 (an unexpected FileExistsError)."""
    notes = hostile["proj"] / "notes.txt"
    pulled = st(cluster, ["pull", hostile["job"], "--to", str(notes), "--cluster", "testbed"], timeout=120)
    assert pulled.returncode not in (0, 70), pulled.stderr
    assert pulled.stderr.startswith("error: ") and "Traceback" not in pulled.stderr, pulled.stderr
    assert str(notes) in pulled.stderr.splitlines()[0] and "not a folder" in pulled.stderr, pulled.stderr
    assert notes.read_text() == "my notes\n"


@pytest.mark.timeout(400)
def test_a_job_this_laptop_has_no_record_of_needs_to_and_comes_from_slurms_workdir(hostile, cluster,  # noqa: F811
                                                                                  tmp_path):
    """As from another laptop (no record here): --to is needed, and the folder read is the one
    Slurm says the job ran in, not job.json's rewritten `workdir`."""
    other = {"XDG_STATE_HOME": str(tmp_path / "another-laptops-state")}
    job = hostile["job"]
    refused = st(cluster, ["pull", job, "--cluster", "testbed"], env=other, timeout=120)
    assert refused.returncode == 2 and refused.stderr.startswith(
        f"error: this laptop did not submit job {job} to testbed (it has no record of it): give --to DIR"), refused.stderr
    into = tmp_path / "here"
    pulled = st(cluster, ["pull", job, "--to", str(into), "--cluster", "testbed"], env=other, timeout=120)
    assert pulled.returncode == 0, pulled.stderr
    assert f"from testbed:{cluster.workdir}/sync/proj-" in pulled.stderr.splitlines()[0], pulled.stderr
    assert (into / "ckpt.pt").read_text() == "weights\n" and not (into / "hostname").exists(), pulled.stderr
