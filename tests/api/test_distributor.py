"""`Distributor`: functions and files on real ranks, here (mpirun) and on the Slurm testbed.

Real Open MPI, real sbatch/srun, real torch.distributed over gloo. The exception is a
block of pure unit tests (`slurm_job`) that hand a Job scheduler answers through the
`runner` parameter, to pin how it reads states and files: requeued runs and torchrun
logs also have real-testbed tests below them; a job slurmctld has already forgotten
does not (that takes MinJobAge, minutes). The functions below live in this (uninstalled) test module, so they travel to the ranks
by value, as a notebook's would. Every wait is bounded: `result(timeout=...)` or a
pytest timeout, and a job still running at the end of a test is cancelled.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import signal
import stat
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from slurmtorch import Distributor
from slurmtorch.usecases.handles import LocalHandle, SlurmHandle, group_alive
from slurmtorch.api.job import Job, JobFailed, RemoteError
from slurmtorch.api.layout import plan_layout
from slurmtorch.usecases.runfolder import create_run_folder
from slurmtorch.errors import SlurmtorchError, SpecError
from helpers import rank_failure

REPO = Path(__file__).resolve().parents[2]
ARGS_SCRIPT = REPO / "tests" / "scripts" / "dist_args.py"
ODD_ARGS = ["a b", "$(hostname)", "it's", "--lr=0.1"]
MB4 = 4 << 20
SLURM_WAIT_S = 180  # the testbed is shared: a job may queue behind someone else's


# --------------------------------------------------------------------------- what the ranks run


def world_report(tag):
    """Every rank: all_reduce(rank+1) and all_gather(hostname); rank 0's dict comes back."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    hosts = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    print(f"rank {rank} of {world} {tag}", flush=True)
    return {"world": world, "sum": value.item(), "hosts": hosts, "tag": tag, "rank": rank,
            "env": (os.environ["RANK"], os.environ["WORLD_SIZE"])}


def make_closure(prefix):
    def closure(suffix):
        return {**world_report(prefix + suffix), "closure": True}

    return closure


def big_result(seed):
    """A 4 MB bytes object and a 4 MB tensor, equal on every rank; rank 0's must arrive intact."""
    import random

    import torch
    import torch.distributed as dist

    blob = random.Random(seed).randbytes(MB4)
    tensor = torch.arange(MB4 // 4, dtype=torch.float32)
    dist.barrier()
    return blob, tensor


def rank_one_raises():
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ValueError("rank one refuses")
    dist.barrier()  # the others wait here until the job is ended for them
    return "unreachable"


def plain_or_a_set(with_set):
    import torch.distributed as dist

    value = {"world": dist.get_world_size(), "loss": 0.25, "pair": (1, 2)}
    return {**value, "tags": {"a"}} if with_set else value


def sleeper():
    print("started", flush=True)
    time.sleep(300)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "st home"
    monkeypatch.setenv("SLURMTORCH_HOME", str(path))
    return path


@pytest.fixture
def local(mpi_env, has_torch, home, monkeypatch) -> Path:
    """os.environ fit for mpirun as root on this 2-core host (the API reads os.environ)."""
    for key in ("PATH", "OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_btl"):
        monkeypatch.setenv(key, mpi_env[key])
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID"):
        monkeypatch.delenv(key, raising=False)
    return home


@pytest.fixture
def slurm(testbed, has_torch, home, monkeypatch) -> Path:
    monkeypatch.setenv("SLURM_CONF", testbed.env["SLURM_CONF"])
    monkeypatch.setenv("PATH", testbed.env["PATH"])
    return home


@contextmanager
def cancelled_at_exit(job):
    try:
        yield job
    finally:
        job.cancel()


def workdirs(home: Path) -> list[Path]:
    root = home / "distributor"
    return sorted(root.iterdir()) if root.exists() else []


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# --------------------------------------------------------------------------- pure: layout and options


@pytest.mark.parametrize("n, nodes, gpu, node_gpus, cpus, max_nodes, cpt, want", [
    (4, None, False, 0, 4, 4, None, (1, 4, 0)),    # 4 CPU ranks fit on one 4-CPU node
    (8, None, False, 0, 4, 4, None, (2, 4, 0)),
    (6, None, False, 0, 4, 4, None, (2, 3, 0)),    # even spread: 2 x 3, not 4 + 2
    (4, None, False, 0, 4, 4, 2, (2, 2, 0)),       # cpus_per_task=2 halves a node's capacity
    (4, 4, False, 0, 4, 4, None, (4, 1, 0)),       # nodes= wins
    (16, None, True, 8, 64, 8, None, (2, 8, 8)),   # GPU ranks: one per GPU
    (4, None, True, 8, 64, 8, None, (1, 4, 4)),    # fewer ranks than GPUs: only those GPUs
    (12, 2, True, 8, 64, 8, None, (2, 6, 6)),
])
def test_plan_layout(n, nodes, gpu, node_gpus, cpus, max_nodes, cpt, want):
    layout = plan_layout(n, nodes, gpu, node_gpus, cpus, max_nodes, cpt)
    assert (layout.nodes, layout.ranks_per_node, layout.gpus_per_node) == want


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_processes=6, nodes=4), "cannot be spread evenly over nodes=4"),
    (dict(num_processes=4, use_gpu=True), "has no GPUs"),
    (dict(num_processes=17), "does not fit evenly on at most 4 nodes"),
])
def test_impossible_layouts_fail_before_submission(home, kwargs, message):
    with pytest.raises(SpecError, match=message):
        Distributor(site="testbed", **kwargs).submit(world_report, "x")
    assert not home.exists()


def test_bad_options_are_one_line_errors():
    with pytest.raises(SpecError, match="unknown Distributor option ntasks") as e:
        Distributor(num_processes=2, ntasks=3)
    assert "partition" in e.value.tip
    with pytest.raises(SpecError, match="num_processes must be a positive integer"):
        Distributor(num_processes=0)
    with pytest.raises(SpecError, match="local_mode runs on this machine only"):
        Distributor(num_processes=2, nodes=2, local_mode=True)
    with pytest.raises(SpecError, match="answer must be 'pickle' or 'json', got 'xml'"):
        Distributor(num_processes=2, answer="xml")


def test_sbatchs_own_options_reach_a_distributor_jobs_header_and_srun_line(home):
    from slurmtorch.submit.launch import launchplan
    from slurmtorch.submit import sites

    d = Distributor(num_processes=2, site="testbed", constraint="testbed", mem="1G", exclusive=True,
                    dependency="afterok:7", sbatch_args=["--nice=5"], srun_args="--label")
    spec = d._spec(sites.load_site("testbed"), "train", home / "run", kind="sbatch")
    header = dict(spec.directives)
    assert (header["constraint"], header["mem"], header["exclusive"], header["dependency"], header["nice"]) == \
        ("testbed", "1G", True, "afterok:7", "5")
    assert launchplan.plan(spec).steps[0].options[-1] == "--label"
    with pytest.raises(SpecError, match="--constraint is an option of a Slurm job"):
        Distributor(num_processes=2, local_mode=True, constraint="x")._spec(
            sites.load_site("local"), "train", home / "run", kind="mpirun")
    assert not home.exists()


@pytest.mark.parametrize("kind, site, local", [("sbatch", "testbed", False), ("mpirun", "local", True)])
def test_a_distributor_job_can_give_its_ranks_vertex_ais_cluster_spec(home, kind, site, local):
    from slurmtorch.submit.launch import render
    from slurmtorch.submit import sites

    d = Distributor(num_processes=2, site=site, local_mode=local, cluster_spec="vertex")
    spec = d._spec(sites.load_site(site), "train", home / "run", kind=kind)
    text = render.render_sbatch(spec) if kind == "sbatch" else render.render_mpirun(spec)
    assert "--cluster-spec=vertex " in text.replace("\\\n", " ")
    assert not home.exists()


def test_a_distributor_job_can_restart_itself_on_spare_nodes(home):
    from slurmtorch.submit.launch import launchplan, render
    from slurmtorch.submit import sites

    d = Distributor(num_processes=2, nodes=2, site="testbed", max_restarts=2, spare_nodes=1, hang_timeout=30)
    spec = d._spec(sites.load_site("testbed"), "train", home / "run", kind="sbatch")
    assert (spec.nodes, spec.spare_nodes, dict(spec.directives)["nodes"]) == (2, 1, "3")
    assert launchplan.plan(spec).supervisor[:6] == ("--nodes", "2", "--ntasks", "2", "--max-restarts", "2")
    assert "-m slurmtorch.submit.supervisor" in render.render_sbatch(spec)
    assert not home.exists()


def test_unpicklable_function_fails_before_anything_is_written(home):
    lock = threading.Lock()

    def guarded():
        with lock:
            return 1

    with pytest.raises(SlurmtorchError) as e:
        Distributor(num_processes=2, site="testbed").run(guarded)
    assert "variable 'lock' captured by" in e.value.message and "_thread.lock" in e.value.message
    assert "Traceback" not in e.value.render() and e.value.render().count("\n") == 1  # error + tip

    with socket.socket() as sock, pytest.raises(SlurmtorchError, match=r"keyword argument 'conn' \(socket.socket\)"):
        Distributor(num_processes=2, local_mode=True).submit(world_report, conn=sock)
    with pytest.raises(SpecError, match="SCRIPT .* does not exist"):
        Distributor(num_processes=2, local_mode=True).run(str(home / "missing.py"))
    assert not home.exists()  # no payload folder, no job folder


# --------------------------------------------------------------------------- local mode: mpirun here


@pytest.mark.mpi
@pytest.mark.torch
@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 4])
def test_local_mode_returns_rank0s_value_and_streams_its_output(local, capsys, n):
    result = Distributor(num_processes=n, local_mode=True, timeout=60).run(make_closure("lo"), f"cal{n}")
    assert result == {"world": n, "sum": n * (n + 1) / 2, "hosts": [socket.gethostname()] * n,
                      "tag": f"local{n}", "rank": 0, "env": ("0", str(n)), "closure": True}
    out, err = capsys.readouterr()
    assert out == f"rank 0 of {n} local{n}\n"  # rank 0 only, as it came
    assert "RUNNING" in err and "COMPLETED (exit 0)" in err
    (workdir,) = workdirs(local)  # kept for every rank's output (tests/api/test_runfolder.py)
    assert stat.S_IMODE(workdir.stat().st_mode) == stat.S_IMODE((local / "distributor").stat().st_mode) == 0o700
    assert f"rank {n - 1} of {n} local{n}\n" in (workdir / f"rank-{n - 1}.out").read_text()


@pytest.mark.mpi
@pytest.mark.torch
@pytest.mark.timeout(120)
def test_local_mode_brings_a_few_megabytes_back_intact(local):
    import torch

    job = Distributor(num_processes=2, local_mode=True, timeout=60).submit(big_result, 7)
    with cancelled_at_exit(job):
        answer = job.result(timeout=90)
    import random

    blob, tensor = answer
    assert hashlib.sha256(blob).hexdigest() == hashlib.sha256(random.Random(7).randbytes(MB4)).hexdigest()
    assert torch.equal(tensor, torch.arange(MB4 // 4, dtype=torch.float32))
    assert job.state() == "COMPLETED" and job.result() is answer  # the answer is kept, not re-read


@pytest.mark.mpi
@pytest.mark.torch
@pytest.mark.timeout(120)
def test_local_mode_answer_json_brings_plain_data_back_and_refuses_what_is_not(local, monkeypatch):
    """Issue 44: with answer="json" rank 0's value comes back as JSON (a tuple as a list) and
    nothing is unpickled; a value JSON cannot carry is refused in one line."""
    import cloudpickle

    def no_unpickling(*args, **kwargs):
        raise AssertionError("unpickled an answer")

    monkeypatch.setattr(cloudpickle, "loads", no_unpickling)
    dist = Distributor(num_processes=2, local_mode=True, timeout=60, answer="json", progress=False)
    job = dist.submit(plain_or_a_set, False)
    with cancelled_at_exit(job):
        assert job.result(timeout=90) == {"world": 2, "loss": 0.25, "pair": [1, 2]}
    assert sorted(p.name for p in job.workdir.glob("result*")) == []  # read once, as a pickled one
    job = dist.submit(plain_or_a_set, True)
    with cancelled_at_exit(job), pytest.raises(RemoteError) as e:
        job.result(timeout=90)
    assert e.value.traceback_text == ("TypeError: the return value of 'plain_or_a_set' on rank 0 (dict) is not JSON, "
                                      "and answer='json' sends JSON only: Object of type set is not JSON "
                                      "serializable\n"), str(e.value)
    assert e.value.rank == 0


@pytest.mark.mpi
@pytest.mark.torch
@pytest.mark.timeout(120)
def test_local_mode_rank1_raising_gives_its_traceback_and_host(local):
    job = Distributor(num_processes=2, local_mode=True, timeout=60).submit(rank_one_raises)
    with cancelled_at_exit(job), pytest.raises(RemoteError) as e:
        job.result(timeout=90)
    err = e.value
    assert (err.rank, err.host, err.exc_type) == (1, socket.gethostname(), "ValueError")
    assert err.job_id == job.job_id and isinstance(err, JobFailed) and err.state == "FAILED"
    lines = err.traceback_text.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert "in rank_one_raises" in lines[1]  # the user's frame first, not ours
    assert "_runfn" not in err.traceback_text and lines[-1] == "ValueError: rank one refuses"
    assert str(err).startswith(f"rank 1 on {socket.gethostname()} failed (job {job.job_id}):\n")
    assert "rank 1 on" in job.logs(1, "err")  # the bootstrap's own report, in rank 1's log
    # then the report `--wait` ends with: where the user's code raised, the exit code, the whole log
    assert err.report[0] == (f"failed: rank 1 on {socket.gethostname()}: ValueError: rank one refuses "
                             f"(at {__file__}:{rank_one_raises.__code__.co_firstlineno + 4}, exit 1)"), str(err)
    assert err.report[-1] == f"rank 1's whole log: {job.workdir / 'rank-1.err'}"
    assert str(err).endswith("\n" + "\n".join(err.report))


def rank_dies(how):
    """Rank 1 (or every rank) ends without raising while the others wait in a barrier."""
    import torch.distributed as dist

    if how == "every rank exits 0" or dist.get_rank() == 1:
        if how == "SIGKILL":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(0)
    dist.barrier()


@pytest.mark.mpi
@pytest.mark.torch
@pytest.mark.timeout(120)
@pytest.mark.parametrize("how, ranks, cause", [
    ("SIGKILL", {1}, "killed by a signal (SIGKILL?) before it could report"),
    ("rank 1 exits 0", {1}, "exited before the others without finishing"),
    ("every rank exits 0", {0, 1}, "exited before the others without finishing"),  # mpirun names the first it saw
])
def test_local_mode_names_the_rank_that_died_and_how(local, how, ranks, cause):
    """Not the peer that lost it (rank 0's `Connection reset by peer`), nor mpirun's help text."""
    job = Distributor(num_processes=2, local_mode=True, timeout=60, progress=False).submit(rank_dies, how)
    with cancelled_at_exit(job), pytest.raises(JobFailed) as e:
        job.result(timeout=90)
    assert not isinstance(e.value, RemoteError), e.value
    assert e.value.rank in ranks and e.value.host == socket.gethostname()
    assert re.match(rf"job {job.job_id} ended FAILED \(exit \d+(?: from rank {e.value.rank}[^)]*)?\): failed: rank {e.value.rank} on "
                    rf"{socket.gethostname()}: {re.escape(cause)}", str(e.value)), str(e.value)
    assert "Hence" not in str(e.value) and "reasons" not in str(e.value)


@pytest.mark.mpi
@pytest.mark.torch
@pytest.mark.timeout(120)
def test_local_mode_runs_a_file_with_arguments(local, capsys):
    assert Distributor(num_processes=2, local_mode=True, timeout=60).run(ARGS_SCRIPT, *ODD_ARGS) is None
    rank0 = json.loads(capsys.readouterr().out)
    assert rank0 == {"rank": 0, "world": 2, "sum": 3.0, "argv": ODD_ARGS, "argv0": str(ARGS_SCRIPT),
                     "name": "__main__", "host": socket.gethostname()}


@pytest.fixture
def sleeping(local):
    """A local job of 2 ranks asleep in `sleeper`, cancelled at the test's end."""
    job = Distributor(num_processes=2, local_mode=True, progress=False).submit(sleeper)
    with cancelled_at_exit(job):
        wait_for(lambda: all("started" in job.logs(r, "out") for r in (0, 1)), 60, "the ranks to start")
        yield job


@pytest.mark.mpi
@pytest.mark.torch
@pytest.mark.timeout(120)
def test_local_mode_cancel_ends_every_process(sleeping):
    job = sleeping
    assert job.state() == "RUNNING"
    job.cancel()
    assert job.state() == "CANCELLED"
    assert not group_alive(job._handle.pgid)
    with pytest.raises(JobFailed, match="was cancelled") as e:
        job.result(timeout=10)
    assert e.value.state == "CANCELLED" and not isinstance(e.value, RemoteError)


@pytest.mark.mpi
@pytest.mark.torch
@pytest.mark.timeout(180)
def test_slurmtorch_stacks_asks_a_local_job_by_its_id(sleeping):
    """A local Distributor run is a local run: `slurmtorch stacks <job id>` (or no id) shows its ranks."""
    for ids in ([sleeping.job_id], []):
        out = subprocess.run([sys.executable, "-m", "slurmtorch", "stacks", *ids, "--native-wait-s", "0"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        line = sleeper.__code__.co_firstlineno + 2  # its time.sleep
        assert out.stdout.splitlines()[0] == f"ranks 0-1 (2): test_distributor.py:{line} sleeper()", out.stdout


@pytest.mark.mpi
@pytest.mark.torch
@pytest.mark.timeout(120)
def test_interrupting_run_cancels_the_job(local, monkeypatch, capsys):
    """Ctrl-C in a notebook must not leave ranks running, and says so in one line (issue 45:
    a bare KeyboardInterrupt said nothing of the job). A REPL or notebook gets its
    KeyboardInterrupt; a script ends in that line alone (the testbed test runs one)."""
    import _thread

    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)  # as in a REPL
    # interrupt_main() is ignored while SIGINT is SIG_IGN, which a shell gives every command it
    # starts in the background (`cmd &` without job control): Python's own handler, as at a prompt.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    def interrupt_once_started():
        wait_for(lambda: any("started" in p.read_text() for p in local.glob("distributor/*/rank-0.out")),
                 100, "rank 0 to start")
        _thread.interrupt_main()

    threading.Thread(target=interrupt_once_started, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            Distributor(num_processes=2, local_mode=True, progress=False).run(sleeper)
    finally:
        signal.signal(signal.SIGINT, previous)
    (workdir,) = workdirs(local)
    assert (workdir / "cancelled").exists()
    pgid = int((workdir / "launcher.pid").read_text())
    assert not group_alive(pgid)
    said = capsys.readouterr().err.splitlines()
    assert said[-1].startswith("slurmtorch: job local-") and said[-1].endswith(
        " cancelled: Ctrl-C during run() (it was running)"), said


# --------------------------------------------------------------------------- the Slurm testbed


@pytest.mark.testbed
@pytest.mark.torch
@pytest.mark.timeout(SLURM_WAIT_S + 60)
@pytest.mark.parametrize("nodes", [2, 4])
@pytest.mark.slurm_versions
def test_testbed_runs_a_function_across_nodes(slurm, capsys, nodes):
    d = Distributor(num_processes=nodes, nodes=nodes, site="testbed", time="3", timeout=60)
    result = d.run(world_report, f"tb{nodes}")
    want_hosts = [f"node{i}" for i in range(1, nodes + 1)]
    assert result == {"world": nodes, "sum": nodes * (nodes + 1) / 2, "hosts": want_hosts, "tag": f"tb{nodes}",
                      "rank": 0, "env": ("0", str(nodes))}
    out, err = capsys.readouterr()
    assert out == f"rank 0 of {nodes} tb{nodes}\n"
    job_id = err.split("slurmtorch: job ", 1)[1].split(":", 1)[0]
    # Its state as the watch saw it: RUNNING only if a look fell within the run (the scheduler
    # is asked at polling's rate, and this job runs for a few seconds).
    seen = re.findall(rf"^slurmtorch: job {job_id}: (PENDING|RUNNING on node\[1-{nodes}\])$", err, re.MULTILINE)
    assert seen and f"slurmtorch: job {job_id} COMPLETED (exit 0)" in err, err
    folder = slurm / "jobs" / job_id
    assert (folder / f"rank-{nodes - 1}.out").read_text() == f"rank {nodes - 1} of {nodes} tb{nodes}\n"
    script = (folder / "script.sh").read_text()
    assert f"#SBATCH --nodes={nodes}" in script and "#SBATCH --ntasks-per-node=1" in script
    assert "-m slurmtorch.bootstrap.runfn" in script and "#SBATCH --job-name=world_report" in script


@pytest.mark.testbed
@pytest.mark.torch
@pytest.mark.timeout(SLURM_WAIT_S + 60)
def test_testbed_packs_ranks_and_brings_a_few_megabytes_back(slurm):
    import random

    import torch

    job = Distributor(num_processes=2, site="testbed", time="3", timeout=60, progress=False).submit(big_result, 11)
    with cancelled_at_exit(job):
        blob, tensor = job.result(timeout=SLURM_WAIT_S)
    assert hashlib.sha256(blob).digest() == hashlib.sha256(random.Random(11).randbytes(MB4)).digest()
    assert torch.equal(tensor, torch.arange(MB4 // 4, dtype=torch.float32))
    script = (slurm / "jobs" / job.job_id / "script.sh").read_text()
    assert "#SBATCH --nodes=1" in script and "#SBATCH --ntasks-per-node=2" in script  # nodes=None: packed


@pytest.mark.testbed
@pytest.mark.torch
@pytest.mark.timeout(SLURM_WAIT_S + 60)
def test_testbed_rank1_raising_names_rank_host_and_traceback(slurm):
    job = Distributor(num_processes=2, nodes=2, site="testbed", time="3", timeout=60,
                      progress=False).submit(rank_one_raises)
    with cancelled_at_exit(job), pytest.raises(RemoteError) as e:
        job.result(timeout=SLURM_WAIT_S)
    assert (e.value.rank, e.value.job_id) == (1, job.job_id)
    assert e.value.host in {"node1", "node2", "node3", "node4"}, e.value.host  # whichever nodes were free
    assert e.value.traceback_text.rstrip().endswith("ValueError: rank one refuses")
    assert "in rank_one_raises" in e.value.traceback_text
    assert job.state() == "FAILED"


@pytest.mark.testbed
@pytest.mark.torch
@pytest.mark.timeout(SLURM_WAIT_S + 60)
def test_testbed_names_the_rank_that_was_killed(slurm):
    """srun's `task 1: Killed`, as --wait reads it: not rank 0's `Connection reset by peer`."""
    job = Distributor(num_processes=2, nodes=2, site="testbed", time="3", timeout=60,
                      progress=False).submit(rank_dies, "SIGKILL")
    with cancelled_at_exit(job), pytest.raises(JobFailed) as e:
        job.result(timeout=SLURM_WAIT_S)
    assert not isinstance(e.value, RemoteError), e.value
    assert e.value.rank == 1 and e.value.host in {"node1", "node2", "node3", "node4"}, e.value
    assert f"failed: rank 1 on {e.value.host}: killed by a signal (SIGKILL?) before it could report" in str(e.value)


@pytest.mark.testbed
@pytest.mark.torch
@pytest.mark.timeout(SLURM_WAIT_S + 60)
def test_testbed_runs_a_file_with_arguments(slurm, capsys):
    d = Distributor(num_processes=2, nodes=2, site="testbed", time="3", timeout=60, job_name="args job")
    assert d.run(str(ARGS_SCRIPT), *ODD_ARGS) is None
    rank0 = json.loads(capsys.readouterr().out)
    assert rank0.pop("host") in {"node1", "node2", "node3", "node4"}  # whichever nodes were free
    assert rank0 == {"rank": 0, "world": 2, "sum": 3.0, "argv": ODD_ARGS, "argv0": str(ARGS_SCRIPT),
                     "name": "__main__"}

    job = Distributor(num_processes=2, nodes=2, site="testbed", time="3", timeout=60,
                      progress=False).submit(ARGS_SCRIPT, "--fail-rank", "1")
    with cancelled_at_exit(job), pytest.raises(RemoteError) as e:
        job.result(timeout=SLURM_WAIT_S)
    assert e.value.rank == 1
    assert e.value.host in {"node1", "node2", "node3", "node4"}, e.value.host  # whichever nodes were free
    assert "RuntimeError: dist_args told to fail on rank 1" in e.value.traceback_text
    assert "dist_args.py" in e.value.traceback_text.splitlines()[1]


@pytest.mark.testbed
@pytest.mark.torch
@pytest.mark.timeout(SLURM_WAIT_S + 60)
def test_testbed_cancel_of_a_running_job(slurm):
    job = Distributor(num_processes=1, site="testbed", time="3", progress=False).submit(sleeper)
    with cancelled_at_exit(job):
        wait_for(lambda: "started" in job.logs(0), SLURM_WAIT_S, "the job to start")
        assert job.state() == "RUNNING"
        job.cancel()
        with pytest.raises(JobFailed, match=f"job {job.job_id} was cancelled") as e:
            job.result(timeout=60)
        assert e.value.state == "CANCELLED" and job.state() == "CANCELLED"


# --------------------------------------------------------------------------- the API's edges, without Slurm
# A runner stands in for squeue/scontrol/scancel (submit's `runner` seam); the job and run
# folders are real, as the ranks would have left them.


def fake_slurm(scontrol: str | None = None, calls: list | None = None):
    """The job has ended: with `scontrol` (a `-o show job` line), squeue still lists it in that
    state and scontrol shows that line; without, both have forgotten it."""
    import pwd
    import subprocess

    def runner(argv, check=True, timeout=60):
        argv = [str(a) for a in argv]
        if calls is not None:
            calls.append(argv)
        if argv[0] == "scontrol" and scontrol is not None:
            return subprocess.CompletedProcess(argv, 0, scontrol + "\n", "")
        if argv[0] == "squeue" and scontrol is not None:
            state = scontrol.split("JobState=")[1].split()[0]
            line = f"123|{state}|None|node1|N/A|N/A|{pwd.getpwuid(os.getuid()).pw_name}\n"
            return subprocess.CompletedProcess(argv, 0, line, "")
        if argv[0] in ("squeue", "scontrol"):
            return subprocess.CompletedProcess(argv, 1, "", "slurm_load_jobs error: Invalid job id specified\n")
        return subprocess.CompletedProcess(argv, 0, "", "")

    return runner


def slurm_job(home: Path, runner, ntasks: int = 2, torchrun=None, kind: str = "function"):
    root, workdir = home / "jobs", home / "distributor" / "run"
    (root / "123").mkdir(parents=True)
    workdir.mkdir(parents=True)
    return Job(SlurmHandle("123", root / "123", root, torchrun, runner=runner), workdir, kind, "fn", ntasks)


def error_record(workdir: Path, rank: int, restart: int, when: float, message: str) -> None:
    record = {"rank": rank, "host": f"node{rank + 1}", "time": when, "exc_type": "ValueError", "restart": restart,
              "traceback": f"Traceback (most recent call last):\nValueError: {message}\n"}
    (workdir / f"error-rank-{rank}.json").write_text(json.dumps(record))


@pytest.mark.timeout(30)
def test_result_of_a_job_slurm_forgot_without_an_exit_code_ends_at_once(home):
    """Cancelled while pending, timed out, lost with its node, then forgotten by slurmctld:
    result() must end (it used to poll forever), and cancel() must leave it alone."""
    calls = []
    job = slurm_job(home, fake_slurm(calls=calls))
    with pytest.raises(JobFailed, match="job 123 ended without recording an exit code") as e:
        job.result()
    assert e.value.state == "ENDED"
    assert job.wait(timeout=5) == "ENDED"
    job.cancel()
    assert not [c for c in calls if c[0] == "scancel"]


def test_a_requeued_run_that_completed_returns_its_result_despite_the_first_runs_error(home):
    import cloudpickle

    job = slurm_job(home, fake_slurm("JobId=123 JobState=COMPLETED Reason=None ExitCode=0:0"))
    error_record(job.workdir, 1, 0, 1.0, "first run fails")
    (job.workdir / "result.pkl").write_bytes(cloudpickle.dumps("rerun ok"))
    assert job.result(timeout=5) == "rerun ok"


def test_a_failed_rerun_reports_its_own_error_not_the_first_runs(home):
    job = slurm_job(home, fake_slurm("JobId=123 JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0"))
    error_record(job.workdir, 1, 0, 1.0, "first run")
    error_record(job.workdir, 0, 1, 2.0, "second run")
    with pytest.raises(RemoteError, match="second run") as e:
        job.result(timeout=5)
    assert (e.value.rank, e.value.host) == (0, "node1")


def test_a_ranks_error_report_records_which_run_of_the_job_it_is(tmp_path, monkeypatch):
    from slurmtorch.bootstrap import runfn as _runfn

    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    _runfn._report(str(tmp_path), 1, ValueError("x"))
    monkeypatch.delenv("SLURM_RESTART_COUNT")
    _runfn._report(str(tmp_path), 0, ValueError("y"))
    assert json.loads((tmp_path / "error-rank-1.json").read_text())["restart"] == 2
    assert json.loads((tmp_path / "error-rank-0.json").read_text())["restart"] == 0


def test_torchrun_logs_are_per_node_and_a_rank_is_not_guessed(home):
    job = slurm_job(home, fake_slurm(), ntasks=4, torchrun=(2, 2))
    for n in range(2):
        (job._handle.job_dir / f"node-{n}.out").write_text(f"node {n}\n")
    assert job.logs() == "node 0\n" and job.logs(node=1, stream="out") == "node 1\n"
    with pytest.raises(SpecError, match="one log per node") as e:
        job.logs(3)
    assert "node 0..1" in e.value.tip
    one_node = slurm_job(home / "b", fake_slurm(), ntasks=4, torchrun=(1, 4))
    (one_node._handle.job_dir / "node-0.out").write_text("all four\n")
    assert one_node.logs(3, "out") == "all four\n"


@pytest.mark.timeout(60)
def test_local_mode_starts_a_script_beyond_the_argument_size_limit(tmp_path):
    """The mpirun script reaches bash as a file: one argv element is limited to 128 KiB."""
    workdir = tmp_path / "run"
    workdir.mkdir()
    big = "#!/bin/bash\n" + "# padding\n" * 30_000 + "echo started\nexit 3\n"
    handle = LocalHandle.start(big, workdir, "x")
    wait_for(lambda: handle.status().state != "RUNNING", 30, "the script to end")
    assert (handle.status().state, handle.status().exit_code) == ("FAILED", 3)
    assert (workdir / "launcher.out").read_text() == "started\n"


def test_run_folders_and_their_parents_are_never_world_writable_under_umask_000(home):
    old = os.umask(0)
    try:
        create_run_folder(home / "distributor" / "run")
    finally:
        os.umask(old)
    for p in (home.parent, home, home / "distributor", home / "distributor" / "run"):
        assert not p.stat().st_mode & stat.S_IWOTH, (p, oct(p.stat().st_mode))
    assert stat.S_IMODE((home / "distributor" / "run").stat().st_mode) == 0o700


def test_an_unwritable_slurmtorch_home_is_a_submit_error_naming_it(tmp_path, monkeypatch):
    from slurmtorch.errors import SubmitError

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path / "a-file" / "home"))
    with pytest.raises(SubmitError, match="a-file .*is not a folder") as e:
        Distributor(num_processes=2, local_mode=True).submit(len, [1])
    assert "SLURMTORCH_HOME" in e.value.tip


def fails_on_the_first_run():
    import torch.distributed as dist

    if dist.get_rank() == 1 and not os.environ.get("SLURM_RESTART_COUNT"):
        raise ValueError("first run fails")
    dist.barrier()
    return "rerun ok"


@pytest.mark.testbed
@pytest.mark.torch
@pytest.mark.timeout(2 * SLURM_WAIT_S + 60)
@pytest.mark.slurm_versions
def test_testbed_requeued_run_that_succeeds_returns_its_result(slurm, testbed):
    """The first run leaves error-rank-1.json; the rerun (scontrol requeue, as preemption
    does) completes in the same folder: its result is the answer."""
    job = Distributor(num_processes=2, nodes=2, site="testbed", preset="preemptible", time="3", timeout=60,
                      progress=False).submit(fails_on_the_first_run)
    with cancelled_at_exit(job):
        assert job.wait(timeout=SLURM_WAIT_S) == "FAILED"
        assert (job.workdir / "error-rank-1.json").exists()
        requeue = testbed.run(["scontrol", "requeue", job.job_id])
        assert requeue.returncode == 0, requeue.stderr
        assert job.result(timeout=SLURM_WAIT_S) == "rerun ok"


@pytest.mark.testbed
@pytest.mark.torch
@pytest.mark.timeout(SLURM_WAIT_S + 60)
def test_testbed_torchrun_job_logs_are_asked_by_node(slurm):
    job = Distributor(num_processes=4, nodes=2, site="testbed", launcher="torchrun", time="3", timeout=60,
                      progress=False).submit(world_report, "tr")
    with cancelled_at_exit(job):
        assert job.result(timeout=SLURM_WAIT_S)["world"] == 4
        both = job.logs(node=0, stream="out") + job.logs(node=1, stream="out")
        assert sorted(ln.split(" of ")[0] for ln in both.splitlines() if ln.startswith("rank ")) == \
            [f"rank {r}" for r in range(4)]
        with pytest.raises(SpecError, match="one log per node"):
            job.logs(2)


def test_a_rank_that_failed_before_knowing_its_rank_is_named_by_its_log(home):
    """The bootstrap writes `rank ?(RANK=5) on HOST failed:` when it fails before it knows
    the world (rankinfo.rank_hint): the Distributor reads it as `failures` does."""
    job = slurm_job(home, fake_slurm("JobId=123 JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0"), ntasks=8)
    why = "error: MASTER_ADDR 127.0.0.1 is a loopback address but the job spans 2 nodes\n"
    (job._handle.job_dir / "rank-5.err").write_text(f"rank ?(RANK=5) on node3 failed:\n{why}")
    with pytest.raises(RemoteError) as e:
        job.result(timeout=5)
    assert (e.value.rank, e.value.host, e.value.traceback_text) == (5, "node3", why)


MULTI_LINE = '''\
raise RuntimeError("Expected to have finished reduction in the prior iteration before starting a new one.\\n"
                   "Parameter indices which did not receive grad for rank 0: 1\\n"
                   " In addition, you can set the environment variable TORCH_DISTRIBUTED_DEBUG to INFO or DETAIL")
'''


def test_a_remote_errors_type_and_report_are_the_headline_of_its_last_exception(home):
    """A message of several lines (DDP's) ends the traceback with advice: the error is typed and
    headed by its first line, as `--wait` says it (report.failure_lines)."""
    workdir = home / "run"
    log = rank_failure(workdir / "code", MULTI_LINE)
    (workdir / "exit-code").write_text("1\n")
    (workdir / "launcher.out").write_text("")
    (workdir / "rank-0.err").write_text(log)
    job = Job(LocalHandle("local-x", workdir, 2**31 - 2), workdir, "file", "train.py", 1)
    with pytest.raises(RemoteError) as e:
        job.result(timeout=5)
    assert e.value.exc_type == "RuntimeError" and "TORCH_DISTRIBUTED_DEBUG" in e.value.traceback_text
    assert e.value.report[0] == (f"failed: rank 0 on {socket.gethostname()}: RuntimeError: Expected to have "
                                 "finished reduction in the prior iteration before starting a new one. "
                                 f"(at {workdir}/code/train.py:1, exit 1)"), e.value.report


def test_a_distributor_job_over_its_time_limit_says_so_as_wait_does(home):
    job = slurm_job(home, fake_slurm("JobId=123 JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15"))
    (job._handle.job_dir / "batch.out").write_text(
        "slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT 2026-01-05T10:00:00 DUE TO TIME LIMIT ***\n")
    (job._handle.job_dir / "script.sh").write_text("#SBATCH --no-requeue\n#SBATCH --time=00:01:00\n")
    with pytest.raises(JobFailed) as e:
        job.result(timeout=5)
    assert str(e.value).startswith("job 123 ended TIMEOUT (exit 143): failed: the job ran past its time limit "
                                   "(--time 00:01:00) and Slurm ended it (TIMEOUT); tip: ask for more with --time"), e.value


def test_an_early_failure_in_mpiruns_shared_log_is_named_by_its_hint(home):
    """Here mpirun's own log holds every rank's stderr until `runfn` redirects it."""
    workdir = home / "run"
    workdir.mkdir(parents=True)
    (workdir / "exit-code").write_text("1\n")
    (workdir / "launcher.out").write_text(
        "rank ?(OMPI_COMM_WORLD_RANK=1) on here failed:\nTraceback (most recent call last):\n"
        "ValueError: no world\n" + "-" * 40 + "\nprterun detected that one or more processes exited\n")
    job = Job(LocalHandle("local-x", workdir, 2**31 - 2), workdir, "function", "fn", 2)
    with pytest.raises(RemoteError) as e:
        job.result(timeout=5)
    assert (e.value.rank, e.value.host, e.value.exc_type) == (1, "here", "ValueError")
    assert e.value.traceback_text == "Traceback (most recent call last):\nValueError: no world\n"


def test_a_failed_run_names_the_ranks_exit_code_as_wait_does_not_the_steps(home, capsys):
    """Issue 45: a failed run's line gave the step's exit 143 where the CLI says `exit 137 from
    rank 1`; now the error and the line that ends the wait say what `--wait` says."""
    job = slurm_job(home, fake_slurm("JobId=123 JobState=FAILED Reason=NonZeroExitCode ExitCode=143:0"))
    (home / "jobs" / "123" / "batch.out").write_text("srun: error: node2: task 1: Killed\n"
                                                     "srun: error: node1: task 0: Terminated\n")
    (home / "jobs" / "123" / "exit-code").write_text("143\n")
    with pytest.raises(JobFailed) as e:
        job.result(timeout=5, stream=True)
    assert str(e.value).startswith("job 123 ended FAILED (exit 137 from rank 1; the step exited 143): failed: rank 1 "
                                   "on node2: killed by a signal"), str(e.value)
    assert "slurmtorch: job 123 FAILED (exit 137 from rank 1; the step exited 143)\n" in capsys.readouterr().err
