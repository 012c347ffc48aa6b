"""Distributor run folders (`$SLURMTORCH_HOME/distributor/<run>/`): every rank's output is
kept for the newest runs, and the folders do not pile up.

Real local-mode runs (Open MPI's mpirun here, real ranks, gloo): once its answer is read
a run's folder is marked `ended` and kept without its pickles (every rank's logs, error
reports), and only the newest KEEP_RUNS ended folders stay; a folder whose job has not
answered yet is never touched. Every wait is bounded by result(timeout=...) and the pytest
timeout.
"""

from __future__ import annotations

import os
import pwd
import socket
import time

import pytest

from slurmtorch import Distributor
from slurmtorch.usecases import runfolder
from slurmtorch.api.job import RemoteError
from slurmtorch.errors import SlurmtorchError, SubmitError

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
def test_a_run_that_succeeded_keeps_every_ranks_output_once_its_result_is_read(local):
    job = Distributor(num_processes=2, local_mode=True, timeout=60, progress=False).submit(rank_report, "ok")
    assert job.result(timeout=90) == socket.gethostname()
    assert job.logs(rank=1, stream="out") == "rank 1 ok\n" and job.logs(rank=0, stream="out") == "rank 0 ok\n"
    assert (job.workdir / runfolder.ENDED).read_text() == "completed\n"
    assert not (job.workdir / "payload.pkl").exists() and not (job.workdir / "result.pkl").exists()
    assert oct(job.workdir.stat().st_mode & 0o777) == oct(0o700)  # private, as while it ran
    assert job.state() == "COMPLETED" and job.wait() == "COMPLETED"


@pytest.mark.timeout(180)
def test_ended_runs_are_kept_marked_and_only_the_newest_few(local, monkeypatch):
    monkeypatch.setattr(runfolder, "KEEP_RUNS", 2)
    local.mkdir(parents=True)
    running = local / "20000101-000000-running"  # a job that has not answered yet: not ours to prune
    running.mkdir()
    jobs = []
    for n, fn in enumerate((rank_report, rank_one_fails, rank_report)):
        job = Distributor(num_processes=2, local_mode=True, timeout=60, progress=False).submit(fn, n)
        if fn is rank_one_fails:
            with pytest.raises(RemoteError, match=f"run {n} refuses"):
                job.result(timeout=90)
            marker = job.workdir / runfolder.ENDED
            assert marker.read_text().startswith(f"failed: rank 1 on {socket.gethostname()} failed")
            assert "ValueError: run 1 refuses" in job.logs(rank=1, stream="err")
        else:
            job.result(timeout=90)
        os.utime(job.workdir / runfolder.ENDED, (time.time() - 60 + n,) * 2)  # in order, whatever the clock's resolution
        jobs.append(job)
    assert runs(local) == sorted([running.name, jobs[1].workdir.name, jobs[2].workdir.name])
    with pytest.raises(SlurmtorchError, match="pruned") as e:
        jobs[0].logs(rank=1)
    assert "2 newest" in e.value.message
    assert jobs[2].logs(rank=1, stream="out") == "rank 1 2\n"


def test_pruning_keeps_the_newest_ended_folders_and_leaves_everything_else(tmp_path):
    runs_dir, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    runs_dir.mkdir()
    elsewhere.mkdir()
    (elsewhere / runfolder.ENDED).write_text("completed\n")
    os.utime(elsewhere / runfolder.ENDED, (1.0,) * 2)  # the oldest of all, but not a folder of ours
    (runs_dir / "link").symlink_to(elsewhere)
    for i in range(5):
        folder = runs_dir / f"run-{i}"
        folder.mkdir()
        if i != 4:
            (folder / runfolder.ENDED).write_text("x\n")
            os.utime(folder / runfolder.ENDED, (1000.0 + i,) * 2)
    (runs_dir / "stray-file").write_text("")
    (runs_dir / ".pruning-run-x").mkdir()  # a pruner that stopped half way
    removed = runfolder.prune_ended(runs_dir, 2)
    assert sorted(p.name for p in removed) == ["run-0", "run-1"]
    assert runs(runs_dir) == ["link", "run-2", "run-3", "run-4", "stray-file"]
    assert (elsewhere / runfolder.ENDED).exists()
    assert runfolder.prune_ended(tmp_path / "missing", 2) == []


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
