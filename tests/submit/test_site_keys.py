"""The site keys of issue 12, each from the site file to the rendered script."""

from __future__ import annotations

from pathlib import Path

from slurmtorch.submit import render, sites
from slurmtorch.submit.spec import build_spec

from test_render import golden_options


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


MINIMAL = """\
node_types:
  cpu: {gpus: 0, cpus: 4, fabric: ethernet, interfaces: [eth0]}
partitions:
  debug: {max_nodes: 2, max_time: "01:00:00", node_type: cpu, default: true}
"""

def test_amd_nodes_run_apptainer_with_rocm_and_nvidia_ones_with_nv(tmp_path):
    text = MINIMAL.replace("gpus: 0, cpus: 4, fabric: ethernet", "gpus: 8, cpus: 64, fabric: ethernet, gpu_vendor: amd")
    site = sites.load_site(write(tmp_path, text))
    amd = render.launch_plan(build_spec(site, golden_options("s", container_image="/img.sif",
                                                            container_runtime="apptainer")))
    assert amd.rank_argv[:3] == ("apptainer", "exec", "--rocm")
    site = sites.load_site(write(tmp_path, text.replace(", gpu_vendor: amd", "")))
    nv = render.launch_plan(build_spec(site, golden_options("s", container_image="/img.sif",
                                                           container_runtime="apptainer")))
    assert nv.rank_argv[:3] == ("apptainer", "exec", "--nv") and site.node_types[0].gpu_vendor == "nvidia"
