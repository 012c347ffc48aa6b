"""Distributor run folders (`$SLURMTORCH_HOME/distributor/<run>/`) do not pile up.

Real local-mode runs (Open MPI's mpirun here, real ranks, gloo): a run that succeeded
leaves no folder, a failed one keeps its folder (logs, error report) marked `failed`, and
only the newest KEEP_FAILED failed folders stay; a folder whose job has not answered yet
is never touched. Every wait is bounded by result(timeout=...) and the pytest timeout.
"""

from __future__ import annotations

import os
import pwd
import socket
import time

import pytest

from slurmtorch import Distributor
from slurmtorch.api import runfolder
from slurmtorch.api.job import RemoteError
from slurmtorch.errors import SubmitError

pytestmark = [pytest.mark.mpi, pytest.mark.torch]


def rank_report(tag):
    import torch.distributed as dist

    print(f"rank {dist.get_rank()} {tag}", flush=True)
    dist.barrier()
    return socket.gethostname()


def rank_one_fails(tag):
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ValueError(f"run {tag} refuses")
    dist.barrier()


@pytest.fixture
def local(mpi_env, has_torch, tmp_path, monkeypatch):
    """os.environ fit for mpirun as root on this 2-core host (the API reads os.environ)."""
    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path / "home"))
    for key in ("PATH", "OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_btl"):
        monkeypatch.setenv(key, mpi_env[key])
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID"):
        monkeypatch.delenv(key, raising=False)
    return tmp_path / "home" / "distributor"


def runs(root):
    return sorted(p.name for p in root.iterdir())


@pytest.mark.timeout(120)
def test_a_run_that_succeeded_leaves_no_folder_once_its_result_is_read(local):
    job = Distributor(num_processes=2, local_mode=True, timeout=60, progress=False).submit(rank_report, "ok")
    assert job.wait(timeout=90) == "COMPLETED"
    # Until its result is read the folder stays: the logs of every rank are there.
    assert (job.workdir / "rank-1.out").read_text() == "rank 1 ok\n"
    assert job.result(timeout=10) == socket.gethostname()
    assert runs(local) == []
    assert job.state() == "COMPLETED" and job.wait() == "COMPLETED"  # known without the folder
    assert Distributor(num_processes=2, local_mode=True, timeout=60, progress=False).run(rank_report, "run") \
        == socket.gethostname()
    assert runs(local) == []


@pytest.mark.timeout(180)
def test_failed_runs_are_kept_marked_and_only_the_newest_few(local, monkeypatch):
    monkeypatch.setattr(runfolder, "KEEP_FAILED", 2)
    local.mkdir(parents=True)
    running = local / "20000101-000000-running"  # a job that has not answered yet: not ours to prune
    running.mkdir()
    failed = []
    for n in range(3):
        job = Distributor(num_processes=2, local_mode=True, timeout=60, progress=False).submit(rank_one_fails, n)
        with pytest.raises(RemoteError, match=f"run {n} refuses"):
            job.result(timeout=90)
        failed.append(job.workdir.name)
        if n == 0:
            marker = job.workdir / runfolder.FAILED
            assert marker.read_text().startswith(f"rank 1 on {socket.gethostname()} failed")
            assert "ValueError: run 0 refuses" in (job.workdir / "rank-1.err").read_text()
            os.utime(marker, (time.time() - 60,) * 2)  # the oldest, whatever the clock's resolution
    assert runs(local) == sorted([running.name, *failed[1:]])


def test_pruning_keeps_the_newest_marked_folders_and_leaves_unmarked_ones(tmp_path):
    for i in range(5):
        folder = tmp_path / f"run-{i}"
        folder.mkdir()
        if i != 4:
            (folder / runfolder.FAILED).write_text("x\n")
            os.utime(folder / runfolder.FAILED, (1000.0 + i,) * 2)
    (tmp_path / "stray-file").write_text("")
    removed = runfolder.prune_failed(tmp_path, 2)
    assert sorted(p.name for p in removed) == ["run-0", "run-1"]
    assert runs(tmp_path) == ["run-2", "run-3", "run-4", "stray-file"]
    assert runfolder.prune_failed(tmp_path / "missing", 2) == []


def leave_a_mark(path):
    with open(path, "w") as fh:
        fh.write("ran\n")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode, owner, why", [(0o755, "nobody", "belongs to nobody"),
                                              (0o1777, None, "is writable by anyone (mode 1777)")])
def test_a_local_run_refuses_a_home_another_user_owns_or_can_write_and_runs_nothing(local, tmp_path, mode, owner,
                                                                                      why):
    """SLURMTORCH_HOME made first by someone else (shared scratch, /tmp): its owner could swap
    the run folder and its payload, which every rank unpickles and runs as this user."""
    home = local.parent
    home.mkdir()
    os.chmod(home, mode)
    if owner:
        os.chown(home, pwd.getpwnam(owner).pw_uid, -1)
    mark = tmp_path / "ran"
    with pytest.raises(SubmitError) as e:
        Distributor(num_processes=2, local_mode=True, timeout=60, progress=False).run(leave_a_mark, str(mark))
    assert e.value.message.startswith(f"{home} (SLURMTORCH_HOME) {why}")
    assert e.value.render().count("\n") == 1  # the error and its tip
    assert not mark.exists() and list(home.iterdir()) == []
