"""srun's --mpi and OMP_NUM_THREADS as a site documents them, from the site file to the script.

`srun_mpi` (site, node type, partition, preset; the nearest wins) is the rank step's --mpi,
and `none` writes plain srun (CSCS's uenv jobs); `mpi_plugin` is its older, site-level name.
`omp_num_threads` (site, node type, partition) exports OMP_NUM_THREADS as the centre
documents it (CSCS: 8 on GH200, where each rank's share would be 72); --env wins.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmtorch.errors import SiteError
from slurmtorch.submit.launch import render
from slurmtorch.submit import sites
from slurmtorch.submit.launch.spec import build_spec

from test_render import golden_options

LAYERED = """\
srun_mpi: {site}
omp_num_threads: 3
node_types:
  cpu: {{gpus: 0, cpus: 8, fabric: ethernet, srun_mpi: {node}, omp_num_threads: 5}}
  other: {{gpus: 0, cpus: 8, fabric: ethernet}}
partitions:
  debug: {{max_nodes: 2, max_time: "01:00:00", node_type: cpu, default: true}}
  mpi: {{max_nodes: 2, max_time: "01:00:00", node_type: cpu, srun_mpi: {partition}, omp_num_threads: auto}}
  plain: {{max_nodes: 2, max_time: "01:00:00", node_type: other}}
presets:
  ce: {{srun_mpi: pmix}}
"""


def site_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def rank_step(site, **kw) -> str:
    text = render.render_sbatch(build_spec(site, golden_options("s", **kw)))
    return next(ln for ln in text.splitlines() if ln.startswith("srun --nodes="))


def exports(site, **kw) -> dict[str, str]:
    spec = build_spec(site, golden_options("s", **kw))
    return dict(spec.env)


@pytest.fixture
def layered(tmp_path):
    return sites.load_site(site_file(tmp_path, LAYERED.format(site="cray_shasta", node="pmi2", partition="none")))


def test_srun_mpi_nearest_layer_wins(layered):
    assert "--mpi=pmi2" in rank_step(layered)  # the node type's over the site's
    assert "--mpi=cray_shasta" in rank_step(layered, partition="plain")  # the site's
    assert "--mpi=pmix" in rank_step(layered, preset="ce")  # the preset's over the node type's
    assert "--mpi=pmix" in rank_step(layered, partition="mpi", preset="ce")


def test_srun_mpi_none_writes_plain_srun(layered):
    step = rank_step(layered, partition="mpi")  # the partition's `none`
    assert "--mpi" not in step and step.startswith("srun --nodes=1 --ntasks=1 --kill-on-bad-exit=1 --cpus-per-task=")
    # The ranks still take their world from srun's SLURM_* variables.
    text = render.render_sbatch(build_spec(layered, golden_options("s", partition="mpi")))
    assert "-m slurmtorch.bootstrap --backend gloo --timeout 600 --from slurm" in text


def test_mpi_plugin_is_the_older_name_of_srun_mpi(tmp_path):
    old = LAYERED.replace("srun_mpi: {site}", "mpi_plugin: {site}").format(site="pmi2", node="none", partition="none")
    site = sites.load_site(site_file(tmp_path, old))
    assert site.srun_mpi == "pmi2" and "--mpi=pmi2" in rank_step(site, partition="plain")


def test_an_unlisted_plugin_srun_has_passes(tmp_path):
    site = sites.load_site(site_file(tmp_path, LAYERED.format(site="pmix_v4", node="pmix_v4", partition="none")))
    assert "--mpi=pmix_v4" in rank_step(site)


def test_omp_num_threads_nearest_layer_wins_and_env_wins_over_all(layered):
    assert exports(layered)["OMP_NUM_THREADS"] == "5"  # the node type's over the site's
    assert exports(layered, partition="plain")["OMP_NUM_THREADS"] == "3"  # the site's
    assert "OMP_NUM_THREADS" not in exports(layered, partition="mpi")  # auto: each rank's CPU share
    assert exports(layered, env=("OMP_NUM_THREADS=2",))["OMP_NUM_THREADS"] == "2"


def test_omp_num_threads_unset_leaves_the_bootstraps_share(tmp_path):
    site = sites.load_site(site_file(tmp_path, LAYERED.replace("omp_num_threads: 3\n", "").replace(
        ", omp_num_threads: 5", "").format(site="pmix", node="pmix", partition="pmix")))
    assert "OMP_NUM_THREADS" not in exports(site)


@pytest.mark.parametrize("key, value, message", [
    ("srun_mpi", "'--mpi=pmix'", "invalid srun --mpi plugin '--mpi=pmix'"),
    ("srun_mpi", "PMIX", "invalid srun --mpi plugin 'PMIX'"),
    ("omp_num_threads", "-1", "expected a number of threads (1 or more) or auto, got -1"),
    ("omp_num_threads", "true", "expected a number of threads (1 or more) or auto, got True"),
    ("omp_num_threads", "eight", "expected a number of threads (1 or more) or auto, got 'eight'"),
])
def test_bad_values_name_the_key_and_the_fix(tmp_path, key, value, message):
    text = "node_types:\n  cpu: {gpus: 0, cpus: 4, fabric: ethernet}\npartitions:\n" \
           f"  debug: {{max_nodes: 2, max_time: '01:00:00', node_type: cpu, {key}: {value}}}\n"
    with pytest.raises(SiteError) as e:
        sites.load_site(site_file(tmp_path, text))
    (problem, tip), = e.value.problems
    assert f"partitions.debug.{key}: {message}" in problem and tip
