"""Issue 12's site keys on the real testbed: what the ranks and the scheduler see.

Each test writes a small site that `extends: testbed` and runs a real job: a path
composition expanded in every rank's environment (the job's own value kept) under each
launcher, the node prologue once per node before the ranks (and a failing one ending the
job with its node named), a QOS-routed site that writes no #SBATCH --partition, and a
site's srun_args on the ranks' step.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers import st

# Each rank: where it is, its ST_PATH, and whether the node prologue's file for its node
# was already there when it started.
PROBE = """\
import json, os, socket
host = socket.gethostname()
mark = os.path.join(os.environ["SLURMTORCH_JOB_DIR"], "prologue-" + host)
print(json.dumps({"rank": os.environ.get("RANK"), "host": host, "path": os.environ.get("ST_PATH"),
                  "prologue": os.path.exists(mark)}), flush=True)
"""


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    p = tmp_path / "probe.py"
    p.write_text(PROBE)
    return p


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def site(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "site.yaml"
    p.write_text("extends: testbed\n" + text)
    return p


def rank_records(folder: Path) -> list[dict]:
    logs = [*folder.glob("rank-*.out"), *folder.glob("node-[0-9]*.out")]  # torchrun: one log per node
    out = [json.loads(ln[ln.index("{"):]) for p in sorted(logs) for ln in p.read_text().splitlines() if "{" in ln]
    return sorted(out, key=lambda r: int(r["rank"]))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("launcher", ["srun", "torchrun", "mpirun"])
def test_a_path_composition_reaches_every_rank_expanded_with_the_jobs_own_value_kept(testbed, has_torch, home,
                                                                                     tmp_path, probe, launcher):
    s = site(tmp_path, "prepend_path:\n  ST_PATH: ['/opt/a b', /opt/c]\nnode_types:\n  cpu:\n"
                       "    append_path: {ST_PATH: /opt/z}\n")
    proc = st(testbed, home, ["sbatch", "--site", str(s), "-N", "2", "--launcher", launcher, "--wait", str(probe)],
              env={"ST_PATH": "/orig:$HOME"}, timeout=200)
    assert proc.returncode == 0, proc.stderr
    got = rank_records(home / "jobs" / proc.stdout.split()[0])
    assert len(got) == 2 and len({r["host"] for r in got}) == 2, got  # two nodes, whichever Slurm gave
    assert all(r["path"] == "/opt/a b:/opt/c:/orig:$HOME:/opt/z" for r in got), got


@pytest.mark.timeout(240)
@pytest.mark.slurm_versions
def test_the_node_prologue_runs_once_on_every_node_before_the_ranks(testbed, has_torch, home, tmp_path, probe):
    s = site(tmp_path, "node_prologue:\n"
                       "  - 'echo \"$(hostname)\" >>\"$SLURMTORCH_JOB_DIR/prologue-$(hostname)\"'\n"
                       "node_types:\n  cpu:\n    node_prologue: ['echo node-type line on $(hostname)']\n")
    proc = st(testbed, home, ["sbatch", "--site", str(s), "-N", "3", "--wait", str(probe)], timeout=200)
    assert proc.returncode == 0, proc.stderr
    folder = home / "jobs" / proc.stdout.split()[0]
    hosts = ["node1", "node2", "node3"]
    assert sorted(p.name for p in folder.glob("prologue-*")) == [f"prologue-{h}" for h in hosts]
    assert all((folder / f"prologue-{h}").read_text() == f"{h}\n" for h in hosts)  # once each
    outs = sorted((folder / f"node-prologue-{t}.out").read_text() for t in range(3))
    assert outs == [f"node-type line on {h}\n" for h in hosts]
    got = rank_records(folder)
    assert [r["prologue"] for r in got] == [True, True, True], got  # it ran before each rank started


@pytest.mark.timeout(240)
def test_a_failing_node_prologue_ends_the_job_before_any_rank_and_names_the_node(testbed, home, tmp_path, probe):
    s = site(tmp_path, "node_prologue: ['test \"$(hostname)\" != node2']\n")
    proc = st(testbed, home, ["sbatch", "--site", str(s), "-N", "3", "--wait", str(probe)], timeout=200)
    job_id = proc.stdout.split()[0]
    folder = home / "jobs" / job_id
    assert proc.returncode == 1, proc.stderr
    assert "slurmtorch: failed: the node prologue on node2: exited with exit code 1 (its output: " \
           "node-prologue-1.out)" in proc.stderr, proc.stderr
    assert (folder / "exit-code").read_text() == "1\n"
    assert "slurmtorch: error: node prologue failed" in (folder / "batch.out").read_text()
    assert not list(folder.glob("rank-*.out"))  # no rank ran
    status = st(testbed, home, ["status", job_id])
    assert "state=FAILED exit_code=1" in status.stdout and "the node prologue on node2" in status.stdout


@pytest.mark.timeout(240)
@pytest.mark.slurm_versions
def test_a_qos_routed_site_writes_no_partition_and_its_srun_args_reach_the_step(testbed, has_torch, home, tmp_path,
                                                                               probe):
    """`directives: {partition: null}`: Slurm puts the job in its default partition; the
    site's srun_args (--label here) are on the ranks' step: srun prefixes each line with
    the task id."""
    s = site(tmp_path, "directives: {partition: null}\nsrun_args: [--label]\n")
    dry = st(testbed, home, ["sbatch", "--site", str(s), "-N", "2", "--dry-run", str(probe)])
    assert dry.returncode == 0 and "#SBATCH --partition" not in dry.stdout, dry.stdout + dry.stderr
    proc = st(testbed, home, ["sbatch", "--site", str(s), "-N", "2", "--wait", str(probe)], timeout=200)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split()[0]
    assert "Partition=debug" in testbed.run(["scontrol", "show", "job", job_id]).stdout
    folder = home / "jobs" / job_id
    lines = [ln for r in range(2) for ln in (folder / f"rank-{r}.out").read_text().splitlines()]
    assert sorted(ln.split(":", 1)[0].strip() for ln in lines) == ["0", "1"], lines


@pytest.mark.timeout(180)
def test_a_jobs_python_without_slurmtorch_is_named_in_one_line(testbed, home, tmp_path, probe):
    """The site's `python` is an interpreter the nodes share (a bare venv here): without
    slurmtorch the job ends as its ranks start and says so in one line, not a traceback. (The
    batch script itself needs no slurmtorch since issue 45: its shell files travel in the job.)"""
    import venv

    bare = tmp_path / "bare-venv"
    venv.create(bare, with_pip=False)
    s = site(tmp_path, f"python: {bare / 'bin' / 'python'}\n")
    proc = st(testbed, home, ["sbatch", "--site", str(s), "-N", "2", "--wait", str(probe)], timeout=150,
              cwd=tmp_path)  # not the checkout, whose slurmtorch/ python would find on its path
    assert proc.returncode == 1, proc.stderr
    assert re.search(r"^slurmtorch: failed: rank \d on node\d: its python has no slurmtorch", proc.stderr, re.M), \
        proc.stderr


@pytest.mark.timeout(240)
@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_the_ranks_step_gets_the_layout_asked_for_whatever_the_environment_says(testbed, has_torch, home,
                                                                                 tmp_path, probe, launcher):
    """Issue 24, item 6: a layout variable exported in the script (here by a site's env:, the
    layer --env now refuses it from) must not change the ranks' step: with SLURM_NTASKS=1 a
    2-node job ran one rank and ended COMPLETED."""
    s = site(tmp_path, "env: {SLURM_NTASKS: '1', SLURM_NNODES: '1'}\n")
    proc = st(testbed, home, ["sbatch", "--site", str(s), "-N", "2", "--launcher", launcher, "--wait", str(probe)],
              timeout=200)
    assert proc.returncode == 0, proc.stderr
    got = rank_records(home / "jobs" / proc.stdout.split()[0])
    assert [(r["rank"], r["host"]) for r in got] == [("0", "node1"), ("1", "node2")], got
