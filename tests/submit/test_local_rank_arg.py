"""`--local-rank-arg` (and a preset's `local_rank_arg`): every rank's bootstrap gets it, on
every launcher; off, nothing in the rendered scripts changes (the goldens pin that)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from slurmtorch.errors import SiteError
from slurmtorch.submit.launch import render
from slurmtorch.submit import sites
from slurmtorch.submit.launch.spec import build_spec

from test_render import golden_options


def rank_argv(text: str) -> list[str]:
    """The bootstrap's argv on the rendered launch line (the line naming slurmtorch.bootstrap)."""
    line = next(ln for ln in text.splitlines() if "-m slurmtorch.bootstrap " in ln)
    words = shlex.split(line)
    return words[words.index("slurmtorch.bootstrap") - 1:]


@pytest.mark.parametrize("launcher", ["srun", "mpirun", "torchrun"])
@pytest.mark.parametrize("form", ["local_rank", "local-rank"])
def test_every_launcher_gives_the_bootstrap_the_local_rank_form_before_the_script(launcher, form):
    spec = build_spec(sites.load_site("testbed"), golden_options("testbed", launcher=launcher, local_rank_arg=form))
    argv = rank_argv(render.render_sbatch(spec))
    assert argv[argv.index("/home/user/train.py") - 1] == f"--local-rank-arg={form}"


def test_slurmtorch_mpirun_gives_it_too():
    spec = build_spec(sites.load_site("testbed"), golden_options("testbed", kind="mpirun", ntasks=2,
                                                                 local_rank_arg="local_rank"))
    assert "--local-rank-arg=local_rank" in rank_argv(render.render_mpirun(spec))


def test_off_by_default():
    spec = build_spec(sites.load_site("testbed"), golden_options("testbed"))
    assert spec.local_rank_arg is None and "--local-rank-arg" not in render.render_sbatch(spec)


def site_with_preset(tmp_path, value: str):
    path = tmp_path / "deepspeed-site.yaml"
    path.write_text(f"extends: testbed\npresets:\n  deepspeed:\n    local_rank_arg: {value}\n")
    return sites.load_site(str(path))


def test_a_preset_turns_it_on_and_the_option_wins(tmp_path):
    site = site_with_preset(tmp_path, "local_rank")
    spec = build_spec(site, golden_options("testbed", preset="deepspeed"))
    assert "--local-rank-arg=local_rank" in rank_argv(render.render_sbatch(spec))
    spec = build_spec(site, golden_options("testbed", preset="deepspeed", local_rank_arg="local-rank"))
    assert "--local-rank-arg=local-rank" in rank_argv(render.render_sbatch(spec))


def test_a_preset_with_another_form_is_a_site_error(tmp_path):
    with pytest.raises(SiteError, match="local_rank_arg"):
        site_with_preset(tmp_path, "rank")


def test_an_unknown_form_on_the_command_line_is_one_clear_line(tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    env = {**os.environ, "SLURMTORCH_HOME": str(tmp_path / "home")}
    result = subprocess.run([sys.executable, "-m", "slurmtorch", "sbatch", "--site", "testbed", "--local-rank-arg",
                             "rank", "--dry-run", "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.startswith("error: --local-rank-arg 'rank' is not one of local_rank, local-rank\n")
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) <= 2


@pytest.mark.parametrize("local_mode", [True, False])
def test_a_distributor_leaves_it_out_its_ranks_run_a_function(tmp_path, monkeypatch, local_mode):
    from slurmtorch.api.distributor import Distributor

    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path / "home"))
    site = site_with_preset(tmp_path, "local_rank")
    d = Distributor(num_processes=2, local_mode=local_mode, preset="deepspeed", progress=False)
    spec = d._spec(site, "f", tmp_path / "run", kind="mpirun" if local_mode else "sbatch")
    assert spec.local_rank_arg is None
