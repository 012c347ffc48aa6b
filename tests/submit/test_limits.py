"""A partition's (or QOS's) limits beyond a maximum: `min_nodes` and `max_node_minutes`,
checked with `max_nodes` and `max_time` before sbatch, every broken limit at once, and the
site's entry that would take the job named (pure; the bundled centres' own values)."""

from __future__ import annotations

import pytest

from slurmtorch.cli.main import main
from slurmtorch.errors import LimitError
from slurmtorch.submit import sites
from slurmtorch.options import Options
from slurmtorch.submit.launch.spec import build_spec


def opts(**kw) -> Options:
    base = dict(script="/w/train.py", python="/venv/bin/python", job_root="/h/jobs")
    base.update(kw)
    return Options(**base)


@pytest.fixture(scope="module")
def leonardo():
    return sites.load_site("cineca-leonardo-booster")


@pytest.fixture(scope="module")
def alps():
    return sites.load_site("cscs-alps")


def refusal(site, **kw) -> LimitError:
    with pytest.raises(LimitError) as info:
        build_spec(site, opts(**kw))
    return info.value


def test_a_job_below_a_qos_min_nodes_is_refused_in_one_line_naming_the_entry_that_takes_it(leonardo):
    err = refusal(leonardo, partition="boost_qos_bprod", nodes=2, account="proj0001")
    assert err.problems == ("2 nodes requested, but partition 'boost_qos_bprod' takes at least 65 (min_nodes): "
                            "sbatch would refuse the job, or Slurm hold it for ever",)
    assert err.taker == "partition 'boost_usr_prod' (QOS normal) would take 2 nodes"
    assert err.tip == "pass -p boost_usr_prod, or --nodes 65 or more"
    assert err.render().count("\n") == 1 and err.render().startswith("error: 2 nodes requested")
    # At or above the minimum, the QOS takes it (Slurm partition boost_usr_prod, -q boost_qos_bprod).
    spec = build_spec(leonardo, opts(partition="boost_usr_prod", qos="boost_qos_bprod", nodes=65, account="p"))
    assert (spec.partition, spec.qos, spec.nodes) == ("boost_usr_prod", "boost_qos_bprod", 65)


def test_a_job_over_the_node_minutes_is_refused_with_the_time_that_would_fit(alps):
    err = refusal(alps, partition="debug", nodes=2, time="01:00:00")
    assert err.problems == ("2 nodes x 01:00:00 is 120 node-minutes, but partition 'debug' allows at most 90 per "
                            "job (max_node_minutes)",)
    assert err.taker == "partition 'normal' would take 2 nodes for 01:00:00"
    assert err.tip == "pass -p normal, or --time 00:45:00 or less"
    assert build_spec(alps, opts(partition="debug", nodes=2, time="00:45:00")).nodes == 2  # CSCS: 2 x 45 min


def test_without_a_time_the_node_minutes_count_the_default_else_the_maximum_as_slurm_sets_it(alps):
    assert build_spec(alps, opts(partition="debug", nodes=1)).time is None  # 1 x 01:30:00: 90
    err = refusal(alps, partition="debug", nodes=4)
    assert err.problems[0].startswith("4 nodes x 01:30:00 is 360 node-minutes")
    assert err.taker == "partition 'normal' would take 4 nodes" and "--time 00:22:00 or less" in err.tip


def test_spare_nodes_count_toward_the_nodes_slurm_sees(alps, leonardo):
    ok = build_spec(alps, opts(partition="debug", nodes=1, time="00:45:00", max_restarts=1, spare_nodes=1))
    assert ok.nodes + ok.spare_nodes == 2
    err = refusal(alps, partition="debug", nodes=1, time="00:50:00", max_restarts=1, spare_nodes=1)
    assert err.problems[0].startswith("2 nodes (1 of them spare) x 00:50:00 is 100 node-minutes")
    spec = build_spec(leonardo, opts(partition="boost_qos_bprod", nodes=64, max_restarts=1, spare_nodes=1,
                                     account="p"))
    assert dict(spec.directives)["nodes"] == "65"


def test_each_task_of_an_array_is_its_own_job_against_the_limits(alps):
    spec = build_spec(alps, opts(partition="debug", nodes=1, time="01:30:00", array="0-9"))
    assert spec.array == "0-9"  # ten jobs of 90 node-minutes each, not one of 900


def test_every_broken_limit_is_said_at_once_a_line_each(leonardo):
    err = refusal(leonardo, partition="boost_qos_bprod", nodes=2, time="2-00:00:00", account="p")
    assert len(err.problems) == 2
    assert err.problems[0].startswith("2 nodes requested, but partition 'boost_qos_bprod' takes at least 65")
    assert err.problems[1] == "time limit 2-00:00:00 exceeds the maximum 1-00:00:00 of partition 'boost_qos_bprod'"
    assert err.taker == "partition 'boost_qos_lprod' would take 2 nodes for 2-00:00:00"
    assert err.tip == "pass -p boost_qos_lprod, or --nodes 65 or more and --time 1-00:00:00 or less"
    lines = err.render().splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["error", "error", "tip"]
    assert lines[1].endswith("; partition 'boost_qos_lprod' would take 2 nodes for 2-00:00:00")


def test_a_job_no_entry_takes_says_so_with_the_fixes(alps):
    err = refusal(alps, partition="debug", nodes=2000, time="00:10:00")
    assert err.problems == ("2000 nodes requested, but partition 'debug' allows at most 4",
                            "2000 nodes x 00:10:00 is 20000 node-minutes, but partition 'debug' allows at most 90 "
                            "per job (max_node_minutes)")
    assert err.taker == "no partition of site 'cscs-alps' takes 2000 nodes for 00:10:00"
    assert err.tip == "use --nodes 4 or less"  # the first fix of each option: the nodes' limit before the product


def test_slurmtorch_mpirun_has_no_scheduler_limits(leonardo):
    assert build_spec(leonardo, opts(kind="mpirun", ntasks=2, partition="boost_qos_bprod")).ntasks == 2


def test_the_cli_prints_the_limit_and_the_entry_that_takes_it_and_submits_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    with pytest.raises(SystemExit) as exc:
        main(["sbatch", "--site", "cscs-alps", "-p", "debug", "-N", "3", "-t", "40", "train.py"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and not (tmp_path / "home").exists()
    assert err == ("error: 3 nodes x 00:40:00 is 120 node-minutes, but partition 'debug' allows at most 90 per job "
                   "(max_node_minutes); partition 'normal' would take 3 nodes for 00:40:00\n"
                   "tip: pass -p normal, or --time 00:30:00 or less\n")


def test_each_component_of_a_heterogeneous_job_is_held_to_its_own_partitions_limits(tmp_path):
    """Roles on different node types are one Slurm heterogeneous job whose components Slurm checks
    each against its partition: a role below its partition's min_nodes is refused before sbatch."""
    site = tmp_path / "het.yaml"
    site.write_text(
        "node_types:\n  cpu: {gpus: 0, cpus: 2, fabric: ethernet}\n  fat: {gpus: 0, cpus: 4, fabric: ethernet}\n"
        "partitions:\n  debug: {max_nodes: 4, max_time: '1-00:00:00', node_type: cpu, default: true}\n"
        "  fat: {min_nodes: 2, max_nodes: 4, max_time: '1-00:00:00', node_type: fat}\n")
    het = sites.load_site(site)
    err = refusal(het, roles=("master=1", "worker=1:partition=fat"))
    assert err.problems == ("role worker: 1 node requested, but partition 'fat' takes at least 2 (min_nodes): sbatch "
                            "would refuse the job, or Slurm hold it for ever",)
    assert build_spec(het, opts(roles=("master=1", "worker=2:partition=fat"))).het_components
