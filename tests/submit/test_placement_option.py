"""--placement and a site's `placement:` reach the ranks as SLURMTORCH_PLACEMENT (the bootstrap's
policy, bootstrap/placement.py): the option over the preset's over the site's; `auto`, the ranks'
own default, exports nothing, so a job that asks for nothing renders as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmtorch import protocol
from slurmtorch.errors import SpecError
from slurmtorch.submit import sites
from slurmtorch.submit.launch import render
from slurmtorch.options import Options
from slurmtorch.submit.launch.spec import build_spec

SITE = """\
placement: {site}
node_types:
  gpu: {{gpus: 4, cpus: 64, fabric: ethernet}}
partitions:
  batch: {{max_nodes: 2, max_time: "01:00:00", node_type: gpu, default: true}}
presets:
  spread: {{placement: share}}
"""


def exported(site, **opts) -> dict[str, str]:
    o = Options(script="/home/user/train.py", python="/opt/venv/bin/python", job_root="/j", **opts)
    return dict(build_spec(site, o).env)


def site_with(tmp_path: Path, value: str):
    path = tmp_path / "s.yaml"
    path.write_text(SITE.format(site=value))
    return sites.load_site(str(path))


def test_auto_exports_nothing_and_other_policies_reach_the_ranks(tmp_path):
    site = site_with(tmp_path, "auto")
    assert protocol.PLACEMENT not in exported(site)
    assert exported(site, placement="none")[protocol.PLACEMENT] == "none"
    assert exported(site, preset="spread")[protocol.PLACEMENT] == "share"
    assert protocol.PLACEMENT not in exported(site, preset="spread", placement="auto")  # the option wins


def test_a_sites_policy_applies_unless_the_job_says_otherwise(tmp_path):
    site = site_with(tmp_path, "none")
    assert exported(site)[protocol.PLACEMENT] == "none"
    assert protocol.PLACEMENT not in exported(site, placement="auto")
    assert exported(site, env=("SLURMTORCH_PLACEMENT=share",))[protocol.PLACEMENT] == "share"


def test_the_rendered_script_exports_the_policy_to_every_rank(tmp_path):
    site = site_with(tmp_path, "auto")
    o = Options(script="/home/user/train.py", python="/opt/venv/bin/python", job_root="/j", placement="none")
    assert "export SLURMTORCH_PLACEMENT=none" in render.render_sbatch(build_spec(site, o))


def test_an_unknown_policy_is_one_line_with_the_choices(tmp_path):
    with pytest.raises(SpecError, match="not one of auto, share, none"):
        exported(site_with(tmp_path, "auto"), placement="numa")


def test_site_show_lists_the_sites_policy(tmp_path):
    assert sites.site_as_dict(site_with(tmp_path, "share"))["placement"] == "share"


def test_a_preset_reaches_slurms_topology_options_for_nvlink_domain_placement(tmp_path):
    """--switches (topology/tree) and --segment (topology/block, Slurm 25.05+) keep a job inside
    one switch or NVLink domain: a preset's `directives` carry them to the #SBATCH header."""
    path = tmp_path / "s.yaml"
    path.write_text(SITE.format(site="auto") + '  nvl72: {directives: {segment: 18, switches: "1@10:00"}}\n')
    o = Options(script="/home/user/train.py", python="/opt/venv/bin/python", job_root="/j", preset="nvl72", nodes=2)
    text = render.render_sbatch(build_spec(sites.load_site(str(path)), o))
    assert "#SBATCH --segment=18" in text and "#SBATCH --switches=1@10:00" in text
