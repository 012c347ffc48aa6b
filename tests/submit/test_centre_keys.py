"""The site keys real centres needed (issue 25), each on a small site of its own.

gpu_request (nearest of partition, node type, site), --gres on a gres site, per-partition
modules and environment, required time, refused_options, hcas: auto, the account form,
apptainer under the name singularity with a job-time image path.
"""

from __future__ import annotations

import textwrap

import pytest

from slurmtorch.errors import SpecError
from slurmtorch.submit import sites
from slurmtorch.submit.launch import render
from slurmtorch.submit.launch.spec import build_spec

from test_presets import exported, header
from test_render import golden_options

SITE = """\
    gpu_request: gres
    node_types:
      v100: {gpus: 4, cpus: 40, fabric: infiniband, rdma: true, hcas: auto}
      h100:
        gpus: 4
        cpus: 96
        fabric: infiniband
        rdma: true
        gpu_request: gpus-per-node
        modules: [arch/h100]
        env: {NODE: h100}
      gh: {gpus: 1, cpus: 72, fabric: infiniband, rdma: true}
    partitions:
      v100: {max_nodes: 8, max_time: "10:00:00", node_type: v100, default: true, account_suffix: "@v100"}
      h100:
        max_nodes: 8
        max_time: "10:00:00"
        node_type: h100
        gpu_request: gres
        modules: [cuda/12]
        env: {NODE: partition, ONLY_HERE: "1"}
        prepend_path: {LD_LIBRARY_PATH: [/opt/h100/lib]}
        account_pattern: "[a-z]+@h100"
      gh:
        max_nodes: 8
        max_time: "2-00:00:00"
        node_type: gh
        gpu_request: none
        required: [time]
        refused_options: {mem: "no memory requests here", exclusive: "nodes are never shared"}
    modules: [site-module]
    container:
      runtime: apptainer
      command: singularity
      image: ${IMAGES}/torch.sif
"""


@pytest.fixture
def site(tmp_path):
    path = tmp_path / "centre.yaml"
    path.write_text(textwrap.dedent(SITE))
    return sites.load_site(str(path))


def render_with(site, **kw) -> str:
    return render.render_sbatch(build_spec(site, golden_options("centre", **kw)))


def test_gpu_request_nearest_wins_and_the_count_still_drives_the_layout(site):
    v100 = header(render_with(site))  # the site's gres
    assert (v100["gres"], v100["ntasks-per-node"]) == ("gpu:4", "4") and "gpus-per-node" not in v100
    h100 = header(render_with(site, partition="h100", account="abc@h100"))  # the partition's gres over the node type's
    assert h100["gres"] == "gpu:4" and "gpus-per-node" not in h100
    gh = render_with(site, partition="gh", time="10")  # none: no GPU request, one rank, NCCL, singularity --nv
    assert not {"gres", "gpus-per-node"} & set(header(gh))
    assert header(gh)["ntasks-per-node"] == "1" and "--backend nccl" in gh
    assert "singularity exec --nv" in gh


def test_gres_given_on_a_gres_site_is_the_one_gpu_request(site):
    assert header(render_with(site, gres="gpu:4,nvme:1"))["gres"] == "gpu:4,nvme:1"
    assert header(render_with(site, sbatch_args=("--gres=gpu:4",)))["gres"] == "gpu:4"
    assert header(render_with(site, gpus_per_node=2, gres="nvme:1"))["gres"] == "gpu:2,nvme:1"
    with pytest.raises(SpecError, match="4 GPUs per node") as exc:
        render_with(site, gres="gpu:2")
    assert "--gpus-per-node" in exc.value.tip
    with pytest.raises(SpecError, match="asks Slurm for no GPUs"):
        render_with(site, partition="gh", time="10", gres="gpu:1")


def test_partition_modules_and_environment_layer_between_node_type_and_preset(site):
    text = render_with(site, partition="h100", account="abc@h100", env=("ONLY_HERE=2",))
    assert [ln for ln in text.splitlines() if ln.startswith("module load")] == [
        "module load arch/h100", "module load cuda/12", "module load site-module"]
    env = exported(text, ["NODE", "ONLY_HERE", "LD_LIBRARY_PATH"], {"LD_LIBRARY_PATH": "/usr/lib"})
    assert env == {"NODE": "partition", "ONLY_HERE": "2", "LD_LIBRARY_PATH": "/opt/h100/lib:/usr/lib"}
    v100 = render_with(site)
    assert "arch/h100" not in v100 and "cuda/12" not in v100 and exported(v100, ["NODE"])["NODE"] == "<unset>"


def test_rdma_without_hcas_leaves_them_to_nccl(site):
    env = exported(render_with(site), ["NCCL_IB_HCA", "UCX_NET_DEVICES", "NCCL_IB_DISABLE"])
    assert set(env.values()) == {"<unset>"}


def test_required_time_and_refused_options_are_refused_before_sbatch(site):
    with pytest.raises(SpecError, match="requires a time limit") as exc:
        render_with(site, partition="gh")
    assert exc.value.tip == "pass --time HH:MM:SS (at most 2-00:00:00)"
    for kw, shown in ((dict(mem="1G"), "--mem"), (dict(exclusive=True), "--exclusive"),
                      (dict(sbatch_args=("--mem=1G",)), "--sbatch-arg=--mem"),
                      (dict(srun_args=("--exclusive",)), "--srun-arg=--exclusive")):
        with pytest.raises(SpecError, match=f"^{shown} is refused on partition 'gh': "):
            render_with(site, partition="gh", time="10", **kw)
    assert header(render_with(site, mem="1G"))["mem"] == "1G"  # only where refused


def test_account_forms_are_checked_with_the_fix(site):
    with pytest.raises(SpecError, match="NAME@v100, not 'abc'") as exc:
        render_with(site, account="abc")
    assert exc.value.tip == "pass -A abc@v100"
    with pytest.raises(SpecError, match=r"does not have the form partition 'h100' asks for \(\[a-z\]\+@h100\)"):
        render_with(site, partition="h100", account="ABC@h100")
    assert header(render_with(site, partition="h100", account="abc@h100"))["account"] == "abc@h100"
    assert "account" not in header(render_with(site))  # only an account given is checked


def test_the_image_path_keeps_its_variable_for_the_node(site):
    line = next(ln for ln in render_with(site).splitlines() if "torch.sif" in ln)
    assert '"${IMAGES}"/torch.sif python3 -m slurmtorch.bootstrap' in line
