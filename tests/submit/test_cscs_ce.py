"""CSCS's Container Engine (`runtime: cscs-ce`): the EDF the batch script writes and the srun line.

The EDF is read back as CE would get it: the batch script's own lines run in a real bash,
then parsed as TOML. The environment rules are those of the other runtimes: the job's
variables reach the ranks (here: as the EDF's [env], since the image's values win over the
host's otherwise) and MASTER_ADDR is taken on the site's interface (in bash: no host python).
"""

from __future__ import annotations

import pytest

from slurmtorch.errors import SpecError
from slurmtorch.submit.launch import render
from slurmtorch.submit import sites
from slurmtorch.submit.launch.containers import edf_text, literal, toml_string
from slurmtorch.submit.sites.slurmoptions import SRUN_REFUSED, option_problem
from slurmtorch.submit.launch.spec import build_spec

from helpers import as_run
from test_presets import launch_argv, written_edf
from test_render import ADVERSARIAL, bash_syntax_ok, golden_options

IMAGE = "jfrog.svc.cscs.ch/docker-group-csstaff/alps-images/ngc-pytorch:26.02-py3-alps6"


def ce_job(**kw):
    opts = dict(container_runtime="cscs-ce", container_image=IMAGE, nodes=2)
    opts.update(kw)
    return build_spec(sites.load_site("testbed"), golden_options("testbed", **opts))


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_a_ce_job_writes_its_edf_and_names_it_on_srun(tmp_path, launcher):
    text = render.render_sbatch(ce_job(launcher=launcher))
    bash_syntax_ok(text)
    edf = written_edf(text, tmp_path)
    assert edf["image"] == IMAGE
    assert edf["mounts"] == ["/home/user:/home/user"]  # the script's folder, which holds the job folder
    assert edf["env"]["GLOO_SOCKET_IFNAME"] == "ib0" and edf["env"]["OMPI_MCA_btl"] == "self,sm,tcp"
    argv = launch_argv(text, str(tmp_path))
    assert f"--environment={tmp_path}/environment.toml" in argv
    assert "python3" in argv and "/opt/venv/bin/python" not in argv  # the image's python, not the host's
    # MASTER_ADDR on the site's interface, found in bash (the host's python is not in the job).
    assert "ip -o -4 addr show" in as_run(ce_job(launcher=launcher)) and "MASTER_ADDR=$(fabric_address gloo)" in text and "$python" not in text


def test_the_edf_reads_back_every_value_exactly(tmp_path):
    """Values with quotes, backslashes, newlines and `$` (CE's own expansion) come back as typed."""
    env = tuple(f"V{i}={v}" for i, v in enumerate(ADVERSARIAL))
    script_dir = tmp_path / "a $HOME \"q\""
    script_dir.mkdir()
    text = render.render_sbatch(ce_job(env=env, script=str(script_dir / "t.py")))
    edf = written_edf(text, tmp_path)
    assert {k: v for k, v in edf["env"].items() if k.startswith("V")} == {f"V{i}": literal(v) for i, v in
                                                                          enumerate(ADVERSARIAL)}
    assert literal(f"{script_dir}:{script_dir}") in edf["mounts"]


@pytest.mark.parametrize("value", [*ADVERSARIAL, "\x7f\x01\t", 'x"\\y'])
def test_toml_strings_round_trip(value):
    import tomllib
    assert tomllib.loads(f"k = {toml_string(value)}")["k"] == value


def test_no_line_of_an_edf_can_end_its_here_document():
    spec = ce_job(env=("X=\nSLURMTORCH_EDF\n",))
    assert "SLURMTORCH_EDF" not in edf_text(spec, spec.container).splitlines()


def test_ce_is_refused_where_it_cannot_run():
    with pytest.raises(SpecError, match="cscs-ce containers start under srun"):
        ce_job(launcher="mpirun")
    with pytest.raises(SpecError, match="role job"):
        ce_job(roles=("master=1", "worker=1"), nodes=None)
    with pytest.raises(SpecError, match="composed over the job's own value"):
        build_spec(sites.load_site("slingshot-nvidia"), golden_options(
            "slingshot-nvidia", account="m1", container_runtime="cscs-ce", container_image=IMAGE))


def test_environment_is_ours_on_srun_and_refused_on_sbatch():
    why, tip = option_problem("--environment=my.toml", SRUN_REFUSED, set())
    assert "cscs-ce" in why and "--container-runtime cscs-ce" in tip
    with pytest.raises(SpecError, match="--environment"):
        build_spec(sites.load_site("testbed"), golden_options("testbed", sbatch_args=("--environment=x.toml",)))


def test_another_image_keeps_the_presets_edf_entries(tmp_path):
    spec = build_spec(sites.load_site("cscs-alps"), golden_options(
        "cscs-alps", preset="ce", nodes=2, container_image="${SCRATCH}/ce-images/mine.sqsh"))
    edf = written_edf(render.render_sbatch(spec), tmp_path)
    assert edf["image"] == "${SCRATCH}/ce-images/mine.sqsh"  # CE expands it, as CSCS's examples do
    assert edf["annotations"] == {"com": {"hooks": {"cxi": {"enabled": "false"}}}} and edf["entrypoint"] is True
