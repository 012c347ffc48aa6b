"""`-m MODULE` that the job's python cannot find is refused before anything is submitted or run.

Issue 44: a mistyped `-m pkg.trian` queued, then failed on every rank with slurmtorch's frames.
The look-up runs the job's real python here, from the job's working folder, and imports nothing
(a package's `__init__` that would run is never run); where the job's python is not this host's
(a container's) nothing is said, rather than refusing wrongly.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from slurmtorch.submit import sites
from slurmtorch.submit.sites.model import Container
from slurmtorch.submit.edge import modulefind
from slurmtorch.submit.launch.spec import build_spec
from slurmtorch.usecases import launch

import test_program_args

cli = test_program_args.cli  # the in-process CLI fixture


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """pkg/ (whose __init__ leaves a file if it is ever imported), pkg/train.py, and nspkg/ (a
    namespace package) with a __main__."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("open(__file__ + '.imported', 'w').close()\n")
    (tmp_path / "pkg" / "train.py").write_text("print('train')\n")
    (tmp_path / "nspkg").mkdir()
    (tmp_path / "nspkg" / "__main__.py").write_text("print('main')\n")
    return tmp_path


@pytest.mark.parametrize("module, missing", [
    ("pkg.train", None), ("nspkg", None), ("json.tool", None), ("torch.distributed.run", None), ("json", "json.__main__"),
    ("pkg.trian", "pkg.trian"), ("pgk.train", "pgk"), ("pkg", "pkg.__main__"), ("pkg.train.x", "pkg.train.x"),
])
def test_the_jobs_python_finds_a_module_from_the_working_folder_without_importing_it(tree, module, missing):
    assert modulefind.missing(sys.executable, module, str(tree), {}) == missing
    assert not (tree / "pkg" / "__init__.py.imported").exists()


def test_a_python_that_cannot_run_here_says_nothing(tree):
    assert modulefind.missing(str(tree / "no-python"), "pkg.trian", str(tree), {}) is None
    assert modulefind.missing("/bin/false", "pkg.trian", str(tree), {}) is None


def test_the_look_up_is_skipped_where_the_job_runs_another_python_than_this_hosts(tree):
    job = build_spec(sites.load_site("testbed"), options_of(module="pkg.trian"))
    assert launch.module_lookup(job, str(tree), {}) == (sys.executable, "pkg.trian", str(tree), {})
    assert launch.module_lookup(replace(job, module=None, script="/x/t.py"), str(tree), {}) is None
    assert launch.module_lookup(replace(job, container=Container(runtime="pyxis", image="x.sqsh")), str(tree), {}) is None
    assert launch.module_lookup(replace(job, modules=("python/3.12",)), str(tree), {}) is None
    assert launch.module_lookup(replace(job, python=str(tree / "no-python")), str(tree), {}) is None
    # The job's own PYTHON* variables, as the site gives them.
    site = replace(job, env=(("PYTHONPATH", "/opt/lib"), ("NCCL_DEBUG", "INFO")))
    assert launch.module_lookup(site, str(tree), {})[3] == {"PYTHONPATH": "/opt/lib"}


def options_of(**kw):
    from slurmtorch.options import Options

    return Options(python=sys.executable, job_root="/tmp/jobs", **kw)


@pytest.mark.parametrize("verb, done", [(["sbatch", "--site", "testbed"], "submitted"), (["mpirun", "-n", "2"], "run")])
def test_a_module_the_jobs_python_cannot_find_is_refused_before_anything_starts(cli, tree, monkeypatch, verb, done):
    monkeypatch.chdir(tree)
    code, out, err = cli(*verb, "-m", "pkg.trian", "--lr", "1")
    assert code == 2 and out == "", err
    lines = err.splitlines()
    assert lines[0] == f"error: -m pkg.trian: the job's python ({sys.executable}) finds no module pkg.trian from " \
                       f"{tree}: nothing {done}", err
    assert lines[1].startswith("tip: check its name"), err
    assert not (cli.home / "jobs").exists() or not list((cli.home / "jobs").iterdir())
    # A dry run looks nothing up: it prints what would be submitted.
    assert cli(*verb, "--dry-run", "-m", "pkg.trian")[0] == 0
