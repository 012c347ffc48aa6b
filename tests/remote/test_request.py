"""The request a laptop sends a cluster: the shell text ssh runs there, read back by a real
shell, its header and signal lines; and the laptop-side words (`--site`, the mirror)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from slurmtorch import __version__
from slurmtorch.remote import request
from slurmtorch.remote.clusters import Cluster
from slurmtorch.remote.forward import with_site
from slurmtorch.remote.ssh import failure
from slurmtorch.remote.sync import mirror_for, rsync_dest


def cluster(**kw) -> Cluster:
    base = dict(name="alps", host="ela", site="cscs-alps", python=sys.executable, modules=(), workdir=None,
                source="/home/me/.config/slurmtorch/clusters.yaml")
    return Cluster(**{**base, **kw})


def sh(text: str, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", text], capture_output=True, text=True, env=env, cwd=cwd, timeout=60)


def served(text: str, cwd, header: str = request.header(None)) -> tuple[int, str, str]:
    """Run the request's text as ssh would, its stdin held open (as ssh holds it) until it ends."""
    out, err = cwd / "out", cwd / "err"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(["sh", "-c", text], stdin=subprocess.PIPE, stdout=o, stderr=e, cwd=cwd)
        proc.stdin.write(header.encode() + b"\n")
        proc.stdin.flush()
        code = proc.wait(timeout=60)
        proc.stdin.close()
    return code, out.read_text(), err.read_text()


def test_the_command_runs_the_verb_there_with_the_words_as_typed(tmp_path):
    word = "it's; rm -rf / $(x) `y`"
    code, out, err = served(request.command(cluster(), __version__, ["site", "show", word]), tmp_path)
    assert code == 2
    assert word in err and "Traceback" not in err


def test_a_tilde_path_is_the_clusters_home():
    assert request.path_word("~/scratch/x y") == '"$HOME"/\'scratch/x y\''
    assert sh("echo " + request.path_word("~/a b"), env={**os.environ, "HOME": "/h"}).stdout.strip() == "/h/a b"
    assert request.path_word("/abs") == "/abs"


def test_a_missing_python_is_one_line_with_the_fix():
    text = request.command(cluster(python="/nowhere/bin/python"), __version__, ["status"])
    proc = sh(text)
    assert proc.returncode == request.EX_UNAVAILABLE
    assert proc.stderr.splitlines() == [
        "error: no /nowhere/bin/python on cluster alps",
        "tip: set venv: or python: of alps in /home/me/.config/slurmtorch/clusters.yaml to where slurmtorch is "
        "installed there"]


def test_another_version_on_the_cluster_is_named_with_the_fix():
    proc = sh(request.command(cluster(), "0.0.1", ["status"]))
    assert proc.returncode == request.EX_UNAVAILABLE
    first, tip = proc.stderr.splitlines()
    assert first.startswith(f"error: slurmtorch {__version__} on cluster alps (")
    assert first.endswith("0.0.1 here: both sides must run the same version")
    assert tip.startswith("tip: install slurmtorch 0.0.1 there (pip install slurmtorch==0.0.1)")


def test_no_slurmtorch_for_the_clusters_python_is_named(tmp_path):
    bare = tmp_path / "python"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")  # -S: no site-packages, no slurmtorch
    bare.chmod(0o755)
    proc = sh(request.command(cluster(python=str(bare)), __version__, ["status"]), cwd=tmp_path)
    assert proc.returncode == request.EX_UNAVAILABLE
    assert proc.stderr.startswith("error: no slurmtorch for ")
    assert "on cluster alps" in proc.stderr and "pip install slurmtorch==" in proc.stderr


def test_modules_load_in_a_login_shell_first():
    text = request.command(cluster(modules=("cray-python", "uenv")), __version__, ["status"])
    assert text.startswith("bash -l -c ")
    assert "module load cray-python uenv || exit 69" in sh("printf %s " + text[len("bash -l -c "):]).stdout


def test_the_header_carries_the_sync_record_and_the_call():
    line = request.header({"mirror": "~/x"}, call={"name": "f"})
    assert request.read_header(line) == ({"mirror": "~/x"}, {"name": "f"})
    assert request.read_header("") == (None, None)
    with pytest.raises(ValueError, match="not a slurmtorch request header"):
        request.read_header("hello")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_line_reads_back_as_its_signal(signum):
    assert request.read_signal(request.signal_line(signum).decode()) == signum
    assert request.read_signal("KILL\n") is None


def test_the_clusters_site_is_added_unless_given_before_the_program():
    assert with_site(["sbatch", "train.py"], "alps", 1) == ["sbatch", "--site", "alps", "train.py"]
    assert with_site(["sbatch", "--site=x", "train.py"], "alps", 1) == ["sbatch", "--site=x", "train.py"]
    # the script's own --site is the script's
    assert with_site(["sbatch", "t.py", "--site", "a"], "alps", 3) == ["sbatch", "--site", "alps", "t.py", "--site", "a"]
    assert with_site(["status"], None) == ["status"]


def test_each_laptop_tree_has_its_own_private_mirror():
    a = mirror_for(None, "/home/me/proj", "laptop")
    assert a.startswith("~/.slurmtorch/sync/proj-") and len(a.rsplit("-", 1)[1]) == 12
    assert mirror_for(None, "/home/me/proj", "desktop") != a
    assert mirror_for("/scratch/me/", "/x/my proj!", "l").startswith("/scratch/me/sync/my_proj_-")
    assert rsync_dest(a) == a[2:]
    assert rsync_dest("/scratch/x") == "/scratch/x"


@pytest.mark.parametrize("said, starts, tip", [
    ("ssh: connect to host 198.18.0.5 port 22: Connection refused", "nothing answers ssh there", "is sshd running"),
    ("root@login: Permission denied (publickey).", "refused the login", "ssh-copy-id"),
    ("Host key verification failed.", "its host key is unknown or has changed", "never turns host-key checking off"),
    ("ssh: Could not resolve hostname nope: Name or service not known", "no such host", "alias of ~/.ssh/config"),
    ("ssh: connect to host 198.18.0.99 port 22: Connection timed out", "cannot be reached", "ProxyJump"),
    ("kex_exchange_identification: read: Connection reset by peer", "ssh failed: kex_exchange", "ssh ela true"),
])
def test_an_ssh_failure_is_one_line_with_its_fix(said, starts, tip):
    err = failure(cluster(), f"some banner\n{said}\n")
    assert err.message.startswith("cluster alps (ela, /home/me/.config/slurmtorch/clusters.yaml)")
    assert starts in err.message
    assert tip in (err.tip or "")
    assert "\n" not in err.message


def test_the_socket_folder_leaves_room_for_the_masters_temporary_name(tmp_path):
    """ssh binds <folder>/<40-character hash>.<16 random characters> before renaming it."""
    from slurmtorch.remote.ssh import socket_folder

    deep = tmp_path / ("x" * 60)
    folder = socket_folder({"HOME": str(deep), "XDG_CACHE_HOME": str(deep / ".cache")})
    assert len(str(folder)) + 1 + 40 + 17 <= 103
    assert folder.name.startswith("slurmtorch-ssh-") and oct(folder.stat().st_mode & 0o777) == "0o700"
    run = Path(tempfile.mkdtemp(prefix="run", dir="/tmp"))  # short, as /run/user/UID is
    try:
        assert socket_folder({"XDG_RUNTIME_DIR": str(run)}) == run / "slurmtorch-ssh"
    finally:
        shutil.rmtree(run)


def test_the_clusters_answer_line_reads_back_as_the_value_or_the_error():
    """A Distributor's call answered there (serve.answer writes outcome.line): the laptop
    returns the value, or raises the error a local run would have raised."""
    from slurmtorch.api.job import JobFailed, RemoteError
    from slurmtorch.remote import outcome

    assert outcome.read(b"rank 0 said hi\n" + outcome.line(True, {"loss": 0.5}, pickled=True), 0, "dev",
                        pickled=True) == {"loss": 0.5}
    assert outcome.read(outcome.line(True, "RUNNING"), 0, "dev") == "RUNNING"
    with pytest.raises(JobFailed, match="rank 1 died") as e:
        outcome.read(outcome.line(False, JobFailed("rank 1 died", "see its log", job_id="7", rank=1, host="n2")),
                     0, "dev")
    assert (e.value.job_id, e.value.rank, e.value.host, e.value.tip) == ("7", 1, "n2", "see its log")
    error = RemoteError(0, "n1", "Traceback ...\nValueError: bad lr\n", job_id="8", exc_type="ValueError",
                        state="FAILED", job_exit_code=1, report=("job 8 FAILED (exit 1 from rank 0)",))
    with pytest.raises(RemoteError) as e:
        outcome.read(outcome.line(False, error), 0, "dev")
    assert (str(e.value), e.value.report, e.value.exc_type) == (str(error), error.report, "ValueError")


class Planted:
    """What a cluster could send as a pickled answer: unpickling it runs `touch`."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_json_answer_never_unpickles_what_the_cluster_sends(tmp_path):
    """Issue 44: `answer="json"` (a Distributor's, Job.attach's) takes JSON only; a pickle in
    the answer is refused in one line and never loaded, so the cluster runs no code here."""
    from slurmtorch.errors import ClusterError
    from slurmtorch.remote import outcome

    planted = outcome.line(True, Planted(str(tmp_path / "ran")), pickled=True)
    with pytest.raises(ClusterError, match="cluster dev answered with a pickle, and answer='json' unpickles nothing"):
        outcome.read(planted, 0, "dev", pickled=False)
    assert not (tmp_path / "ran").exists()
    assert outcome.read(outcome.line(True, [1, "two", {"3": None}]), 0, "dev") == [1, "two", {"3": None}]
    outcome.read(planted, 0, "dev", pickled=True)  # the default does load it: what SECURITY.md says
    assert (tmp_path / "ran").exists()


def test_an_error_from_the_cluster_is_plain_data_rebuilt_whatever_its_fields_hold():
    from slurmtorch.errors import SlurmtorchError, SpecError, SubmitError
    from slurmtorch.remote import outcome

    for sent, kind in ((SpecError("bad nodes", "give 2"), SpecError), (SubmitError("sbatch said no"), SubmitError),
                       (TimeoutError("job 5 is still RUNNING after 3 s"), TimeoutError),
                       (KeyboardInterrupt("job 5 goes on there"), KeyboardInterrupt)):
        with pytest.raises(kind) as e:
            outcome.read(outcome.line(False, sent), 0, "dev")
        assert str(e.value) == str(sent)
    for garbage in (None, [], {"type": "RemoteError", "rank": "x", "report": 3}, {"type": "os.system"}):
        with pytest.raises(SlurmtorchError):
            outcome.read(json.dumps({"ok": False, "error": garbage}).encode(), 0, "dev")


def test_pull_paths_must_stay_inside_the_jobs_working_folder():
    import pytest

    from slurmtorch.errors import SpecError
    from slurmtorch.remote.pull import checked_paths

    assert checked_paths(["outputs/", "./ckpt.pt", "a/../b"]) == ["outputs", "ckpt.pt", "b"]
    for bad in ("/etc", "..", "../x", "a/../../x", ""):
        with pytest.raises(SpecError, match="is not inside the job's working folder"):
            checked_paths([bad])


def test_pulled_files_go_to_the_folder_this_laptop_submitted_from_or_to_dash_dash_to(tmp_path):
    """Issue 44: the destination is the laptop's own record, never what the cluster says."""
    import pytest

    from slurmtorch.errors import SpecError
    from slurmtorch.remote.pull import destination
    from slurmtorch.remote.submitted import Submission

    (tmp_path / "proj").mkdir()
    sub = Submission(cluster="hpc", host="h", job_id="7", laptop=str(tmp_path / "proj"), mirror="~/m", cwd="")
    assert destination(sub, None, "7", "hpc") == str(tmp_path / "proj")
    assert destination(sub, "/else", "7", "hpc") == "/else"
    assert destination(None, "/else", "7", "hpc") == "/else"
    with pytest.raises(SpecError, match="this laptop did not submit job 7 to hpc") as err:
        destination(None, None, "7", "hpc")
    assert err.value.tip == "slurmtorch pull 7 --to DIR --cluster hpc"
    with pytest.raises(SpecError, match="which is no folder here any more"):
        destination(Submission(**{**sub.__dict__, "laptop": str(tmp_path / "gone")}), None, "7", "hpc")


def test_pull_to_a_file_is_one_line_before_anything_is_asked(tmp_path, monkeypatch, capsys):
    """Issue 44: `pull --to FILE` was exit 70 (FileExistsError), after the cluster had answered."""
    import pytest

    from slurmtorch.cli.main import main

    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.setenv("SLURMTORCH_CLUSTERS", str(tmp_path / "no-clusters.yaml"))  # never read
    with pytest.raises(SystemExit) as exc:
        main(["pull", "7", "--to", str(tmp_path / "notes.txt"), "--cluster", "hpc"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.splitlines()[0] == f"error: --to {tmp_path / 'notes.txt'} is not a folder", err
    assert "Traceback" not in err and len(err.splitlines()) == 2
    with pytest.raises(SystemExit) as exc:
        main(["pull", "7x", "--cluster", "hpc"])
    assert exc.value.code == 2 and capsys.readouterr().err.startswith("error: invalid job id '7x'")
