"""Site configs: bundled presets, search order, extends, fabric -> network env, validation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from slurmtorch import resources
from slurmtorch.submit.sites import model
from slurmtorch.submit.sites import schema
from slurmtorch.submit.sites import safe_yaml
from slurmtorch.submit import sites
from slurmtorch.errors import SiteError

BUNDLED = sorted(p.stem for p in resources.site_configs_dir().glob("*.yaml"))
REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


MINIMAL = """\
node_types:
  cpu: {gpus: 0, cpus: 4, fabric: ethernet, interfaces: [eth0]}
partitions:
  debug: {max_nodes: 2, max_time: "01:00:00", node_type: cpu, default: true}
"""


@pytest.mark.parametrize("name", BUNDLED)
def test_every_bundled_site_loads(name):
    site = sites.load_site(name)
    assert site.name == name
    assert site.partition(None).name


def test_bundled_sites_include_the_required_examples():
    assert {"testbed", "hdr-ib", "roce", "ethernet", "cloud"} <= set(BUNDLED)


def test_testbed_site_matches_the_local_cluster():
    site = sites.load_site("testbed")
    assert site.launcher == "srun" and site.srun_mpi == "pmix"
    debug, fat = site.partitions  # fat: node3 and node4, a node type of their own (role jobs over node types)
    assert (debug.name, debug.max_nodes, debug.max_time, debug.default) == ("debug", 4, "1-00:00:00", True)
    assert (fat.name, fat.max_nodes, fat.max_time, fat.default, fat.node_type) == ("fat", 2, "1-00:00:00", False, "fat")
    assert site.node_type("fat").cpus == site.node_type("cpu").cpus  # the same machines
    cpu = site.node_type(debug.node_type)
    assert (cpu.name, cpu.gpus, cpu.cpus, cpu.memory_gb, cpu.fabric, cpu.interfaces, cpu.rdma) == (
        "cpu", 0, 2, 4, "ethernet", ("ib0",), False)  # the fabric's interface, named as IPoIB's
    env = dict(cpu.network_env())
    assert env["OMPI_MCA_btl"] == "self,sm,tcp"
    assert env["OMPI_MCA_btl_tcp_if_include"] == "ib0"
    assert env["NCCL_IB_DISABLE"] == "1"
    assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == ("=ib0", "ib0")


def test_testbed_site_agrees_with_scripts_testbed():
    """The bundled preset and the script that builds the cluster must not drift apart."""
    text = (REPO / "scripts" / "testbed").read_text()
    if "PartitionName=debug" not in text:
        pytest.skip("scripts/testbed does not define the debug partition yet")
    assert re.search(r"PartitionName=debug .*Default=YES.*MaxTime=1-00:00:00", text)
    assert re.search(r"PartitionName=fat Nodes=node\[\$\(\(n - 1\)\)-\$n\] MaxTime=1-00:00:00", text)
    cpus = sites.load_site("testbed").node_type("cpu").cpus
    assert re.search(rf"^CPUS_PER_NODE={cpus}$", text, re.M)
    assert "198.18.0" in text
    # The site's interface is the testbed's fabric, not the network the host names resolve to.
    (ifname,) = sites.load_site("testbed").node_type("cpu").interfaces
    assert re.search(rf"^FABRIC_IFNAME={ifname}$", text, re.M)


def test_infiniband_rdma_names_exactly_its_hcas_for_nccl_and_ucx():
    """NCCL reads NCCL_IB_HCA entries as prefixes (mlx5_1 would also pick mlx5_10, mlx5_11)
    unless the list starts with '=' (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html)."""
    nt = sites.load_site("hdr-ib").node_type("a100")
    env = dict(nt.network_env())
    assert env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}" for i in range(8))
    assert env["UCX_NET_DEVICES"].split(",")[0] == "mlx5_0:1"
    assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == ("=ib0", "ib0")
    assert "NCCL_IB_DISABLE" not in env
    assert "NCCL_NET_GDR_LEVEL" not in env  # NCCL picks GPUDirect RDMA per GPU/HCA pair itself


def test_roce_leaves_the_gid_to_nccl_unless_the_admin_gives_one(tmp_path):
    """NCCL >= 2.21 selects the RoCE v2 GID itself; a forced index 3 was wrong on other GID tables."""
    nt = sites.load_site("roce").node_types[0]
    env = dict(nt.network_env())
    assert "NCCL_IB_GID_INDEX" not in env
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"
    assert env["NCCL_SOCKET_IFNAME"] == "=ens1f0np0,ens1f1np1"
    assert nt.link_gbps == 200  # 2 x 100 GbE, as its comment says
    p = write(tmp_path, "s.yaml", MINIMAL.replace(
        "fabric: ethernet, interfaces: [eth0]}", "fabric: roce, rdma: true, hcas: [mlx5_0], gid_index: 5}"))
    assert dict(sites.load_site(p).node_types[0].network_env())["NCCL_IB_GID_INDEX"] == "5"


def test_ethernet_disables_ib_and_pins_the_interface():
    env = dict(sites.load_site("ethernet").node_types[0].network_env())
    assert env["NCCL_IB_DISABLE"] == "1"
    assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == ("=eno1", "eno1")
    assert "NCCL_IB_HCA" not in env and "UCX_NET_DEVICES" not in env


def test_cloud_rdma_and_plain_machine_types_differ_only_in_fabric():
    site = sites.load_site("cloud")
    a4, a4r = site.node_type("a4"), site.node_type("a4r")
    same = ("gpus", "gpu_model", "cpus", "memory_gb", "interfaces", "env")
    assert [getattr(a4, f) for f in same] == [getattr(a4r, f) for f in same]
    assert (a4.fabric, a4.rdma, a4r.fabric, a4r.rdma) == ("ethernet", False, "roce", True)
    assert dict(a4.network_env())["NCCL_IB_DISABLE"] == "1"
    assert "NCCL_IB_HCA" in dict(a4r.network_env())


def test_admin_env_overrides_and_null_removes_fabric_env(tmp_path):
    p = write(tmp_path, "s.yaml", MINIMAL.replace(
        "interfaces: [eth0]}", "interfaces: [eth0], env: {NCCL_SOCKET_IFNAME: bond0, NCCL_IB_DISABLE: null}}"))
    env = dict(sites.load_site(p).node_types[0].network_env())
    assert env["NCCL_SOCKET_IFNAME"] == "bond0"
    assert "NCCL_IB_DISABLE" not in env


def test_site_path_env_wins_over_bundled(tmp_path, monkeypatch):
    write(tmp_path, "testbed.yaml", MINIMAL + "description: mine\n")
    monkeypatch.setenv("SLURMTORCH_SITE_PATH", f"/nonexistent:{tmp_path}")
    site = sites.load_site("testbed")
    assert site.description == "mine"
    assert site.source == str(tmp_path / "testbed.yaml")
    assert sites.search_path()[:2] == [Path("/nonexistent"), tmp_path]
    assert sites.search_path()[-1] == resources.site_configs_dir()


def test_site_by_path(tmp_path):
    p = write(tmp_path, "my-site.yaml", MINIMAL)
    assert sites.load_site(str(p)).name == "my-site"


def test_a_site_named_by_a_file_name_with_a_newline_is_refused(tmp_path):
    p = write(tmp_path, "evil\n#SBATCH --uid=0.yaml", MINIMAL)
    with pytest.raises(SiteError) as e:
        sites.load_site(p)
    assert e.value.message.startswith("invalid site name 'evil\\n#SBATCH --uid=0' (the name of site file '")
    assert "\n" not in e.value.message
    assert "set `name:`" in e.value.tip
    assert sites.load_site(write(tmp_path, "ok.yaml", MINIMAL + "name: fine-1.0_x\n")).name == "fine-1.0_x"


def test_unknown_site_suggests_a_close_name():
    with pytest.raises(SiteError) as e:
        sites.load_site("tesbed")
    assert "unknown site 'tesbed'" in e.value.message
    assert "did you mean 'testbed'" in e.value.tip


def test_extends_deep_merges_onto_the_parent(tmp_path):
    write(tmp_path, "base.yaml", MINIMAL + "modules: [a]\nenv: {A: '1', B: '2'}\n")
    child = write(tmp_path, "child.yaml", """\
extends: base
env: {B: '3'}
partitions:
  debug: {max_nodes: 8}
  big: {max_nodes: 16, max_time: "2-00:00:00", node_type: cpu}
""")
    import os
    os.environ["SLURMTORCH_SITE_PATH"] = str(tmp_path)
    try:
        site = sites.load_site(child)
    finally:
        del os.environ["SLURMTORCH_SITE_PATH"]
    assert site.name == "child"
    assert dict(site.env) == {"A": "1", "B": "3"}
    assert site.modules == ("a",)
    assert site.partition("debug").max_nodes == 8
    assert site.partition("debug").max_time == "01:00:00"  # inherited inside the merged mapping
    assert site.partition("big").max_nodes == 16


def test_extends_a_bundled_site_by_name(tmp_path):
    p = write(tmp_path, "tb2.yaml", "extends: testbed\ndescription: derived\n")
    site = sites.load_site(p)
    assert site.partition("debug").max_nodes == 4 and site.description == "derived"


def test_extends_cycle_is_an_error(tmp_path):
    write(tmp_path, "a.yaml", "extends: ./b.yaml\n")
    b = write(tmp_path, "b.yaml", "extends: ./a.yaml\n")
    with pytest.raises(SiteError, match="extends cycle"):
        sites.load_site(b)


@pytest.mark.parametrize(
    "text, expect",
    [
        (MINIMAL + "partitons: {}\n", r"s\.yaml:5: partitons: unknown key.*"),
        (MINIMAL.replace("max_nodes: 2", "max_nodes: two"), r"s\.yaml:4: partitions\.debug\.max_nodes: expected a non-negative integer"),
        (MINIMAL.replace("node_type: cpu", "node_type: gpu"), r"s\.yaml:4: partitions\.debug\.node_type: no node type 'gpu'"),
        (MINIMAL.replace("fabric: ethernet", "fabric: infiniband2"), r"s\.yaml:2: node_types\.cpu\.fabric: invalid value 'infiniband2'"),
        (MINIMAL.replace("interfaces: [eth0]", "rdma: true, hcas: [mlx5_0]"), r"node_types\.cpu\.rdma: ethernet has no RDMA"),
        (MINIMAL.replace("interfaces: [eth0]", "interfaces: eth0"), r"node_types\.cpu\.interfaces: expected a list of strings"),
        (MINIMAL.replace('"01:00:00"', '"1:00:00:00"'), r"partitions\.debug\.max_time: invalid time"),
        (MINIMAL + "env: {'1BAD': x}\n", r"env\.1BAD: invalid environment variable name"),
        (MINIMAL + "env: {OK: yes}\n", r"env\.OK: expected a string, got bool"),
        (MINIMAL + "launcher: slurm\n", r"launcher: invalid value 'slurm'"),
        (MINIMAL + "presets: {p: {nodez: 2}}\n", r"presets\.p\.nodez: unknown key"),
        (MINIMAL + "presets: {p: {partition: gpu}}\n", r"presets\.p\.partition: no partition 'gpu'"),
        ("node_types: {}\n", r"missing required key 'partitions'"),
        (MINIMAL + "node_types: {}\n", r"s\.yaml:5: duplicate key 'node_types'"),
        (MINIMAL + "launcher: [srun\n", r"s\.yaml:\d+: YAML syntax error"),
        ("- a\n- b\n", r"must be a mapping"),
        # libyaml refuses these too, tersely; the message is the pure loader's.
        ("a: [1\n", r"s\.yaml:2: YAML syntax error: expected ',' or ']', but got '<stream end>'"),
        ("a:\n\tb: 1\n", r"s\.yaml:2: YAML syntax error: found character '\\t' that cannot start any token"),
        ("a: 1\x07\n", r"s\.yaml: character 0x0007 at offset 4 is not allowed in YAML"),
    ],
)
def test_invalid_site_names_file_line_key_and_fix(tmp_path, text, expect):
    p = write(tmp_path, "s.yaml", text)
    with pytest.raises(SiteError) as e:
        sites.load_site(p)
    messages = [message for message, _tip in e.value.problems]
    assert any(re.search(expect, m) for m in messages), messages  # one of every problem found
    assert all("\n" not in m and m.startswith(str(p)) for m in messages)


def test_unknown_key_suggests_the_valid_one(tmp_path):
    p = write(tmp_path, "s.yaml", MINIMAL + "partitons: {}\n")
    with pytest.raises(SiteError) as e:
        sites.load_site(p)
    assert "did you mean 'partitions'?" in e.value.tip


def test_key_from_a_parent_file_is_reported_in_that_file(tmp_path):
    base = write(tmp_path, "base.yaml", MINIMAL + "launcher: slurm\n")
    child = write(tmp_path, "child.yaml", f"extends: {base}\n")
    with pytest.raises(SiteError) as e:
        sites.load_site(child)
    assert e.value.message.startswith(f"{base}:5: launcher")


def test_yaml_anchors_and_merge_keys_work(tmp_path):
    p = write(tmp_path, "s.yaml", """\
node_types:
  a: &a {gpus: 8, cpus: 96, fabric: ethernet}
  b: {<<: *a, cpus: 48}
partitions:
  p: {max_nodes: 1, max_time: "10", node_type: b}
""")
    site = sites.load_site(p)
    assert (site.node_type("b").gpus, site.node_type("b").cpus) == (8, 48)


def test_json_schema_describes_the_keys():
    js = schema.json_schema()
    json.dumps(js)
    assert js["required"] == ["node_types", "partitions"]
    nt = js["properties"]["node_types"]["additionalProperties"]
    assert nt["properties"]["fabric"]["enum"][:3] == ["infiniband", "roce", "ethernet"]
    assert {"slingshot", "efa", "gcp-gib"} <= set(nt["properties"]["fabric"]["enum"])
    assert set(nt["required"]) == {"gpus", "cpus", "fabric"}
    assert js["additionalProperties"] is False


@pytest.mark.parametrize(
    "text, seconds",
    [("5", 300), ("5:30", 330), ("1:00:00", 3600), ("2-0", 172800), ("1-02:03", 93780),
     ("1-00:00:00", 86400), ("UNLIMITED", float("inf"))],
)
def test_parse_time_reads_slurm_formats(text, seconds):
    assert model.parse_time(text) == seconds


@pytest.mark.parametrize("text", ["", "1h", "1:2:3:4", "-5", "1-", "a-1"])
def test_parse_time_refuses_other_text(text):
    with pytest.raises(ValueError):
        model.parse_time(text)


def test_yaml_1_1_number_forms_stay_the_strings_the_admin_typed(tmp_path):
    """`2:00:00` unquoted is two hours, not the sexagesimal 7200 read as minutes."""
    p = write(tmp_path, "s.yaml", MINIMAL + """\
env: {MODE: 0755, MASK: 0x1F, BIG: 1_000, DAY: 2024-01-01, N: 12, ZERO: 0}
directives: {comment: 1:30}
presets:
  default: {time: 2:00:00, nodes: 2, timeout: 60}
""")
    site = sites.load_site(p)
    assert dict(site.env) == {"MODE": "0755", "MASK": "0x1F", "BIG": "1_000", "DAY": "2024-01-01", "N": "12",
                              "ZERO": "0"}
    assert dict(site.directives) == {"comment": "1:30"}
    preset = site.preset(None)
    assert (preset["time"], preset["nodes"], preset["timeout"]) == ("2:00:00", 2, 60)
    assert model.parse_time(preset["time"]) == 7200
    assert site.partition("debug").max_time == "01:00:00"


def test_plain_scalars_still_resolve_as_numbers_bools_and_null(tmp_path):
    p = write(tmp_path, "s.yaml", "a: 12\nb: -3\nc: 1.5\nd: .5\ne: yes\nf: false\ng: ~\nh:\ni: 1e3\nj: 007\n")
    data = safe_yaml.read_yaml(p)
    assert data == {"a": 12, "b": -3, "c": 1.5, "d": 0.5, "e": True, "f": False, "g": None, "h": None,
                    "i": "1e3", "j": "007"}


def test_fast_and_pure_loaders_agree_on_values_and_line_marks(tmp_path):
    def marks(d):
        return [(d.where, [marks(v) for v in d.values() if isinstance(v, dict)])] if isinstance(d, dict) else []

    if safe_yaml._CLoader is None:
        pytest.skip("this PyYAML has no libyaml: every file takes the pure loader")
    for f in sorted(resources.site_configs_dir().glob("*.yaml")):
        fast, pure = safe_yaml.read_yaml(f), safe_yaml.parse_pure(f.read_text(), f)
        assert fast == pure and marks(fast) == marks(pure), f


def _fabric_site(tmp_path, node: str):
    return sites.load_site(write(tmp_path, "s.yaml", MINIMAL.replace(
        "{gpus: 0, cpus: 4, fabric: ethernet, interfaces: [eth0]}", node)))


def test_slingshot_sets_hpes_settings_and_the_fine_grained_memory_rccl_needs_on_amd(tmp_path):
    """https://github.com/HewlettPackard/shs-ccl-docs/blob/main/ccl_env.sh"""
    nv = dict(_fabric_site(tmp_path, "{gpus: 4, cpus: 64, fabric: slingshot, interfaces: [hsn0, hsn1]}")
              .node_types[0].network_env())
    assert "FI_PROVIDER" not in nv and nv["FI_CXI_DISABLE_HOST_REGISTER"] == "1"  # no document sets it
    assert (nv["NCCL_NET_GDR_LEVEL"], nv["NCCL_CROSS_NIC"], nv["FI_MR_CACHE_MONITOR"]) == ("PHB", "1", "userfaultfd")
    assert (nv["NCCL_SOCKET_IFNAME"], nv["GLOO_SOCKET_IFNAME"]) == ("=hsn0,hsn1", "hsn0,hsn1")
    assert "HSA_FORCE_FINE_GRAIN_PCIE" not in nv and "NCCL_IB_DISABLE" not in nv
    amd = dict(_fabric_site(tmp_path, "{gpus: 8, cpus: 56, fabric: slingshot, gpu_vendor: amd}")
               .node_types[0].network_env())
    assert amd["HSA_FORCE_FINE_GRAIN_PCIE"] == "1" and "NCCL_SOCKET_IFNAME" not in amd


def test_efa_and_gib_set_their_plugins_variables(tmp_path):
    efa = dict(_fabric_site(tmp_path, "{gpus: 8, cpus: 192, fabric: efa}").node_types[0].network_env())
    assert efa == {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}
    gib = dict(_fabric_site(tmp_path, "{gpus: 8, cpus: 224, fabric: gcp-gib}").node_types[0].network_env())
    assert gib["NCCL_NET"] == "gIB" and gib["NCCL_NET_GDR_LEVEL"] == "PIX" and "NCCL_IB_DISABLE" not in gib


@pytest.mark.parametrize("fabric", ["slingshot", "efa", "gcp-gib"])
def test_plugin_fabrics_are_rdma_by_design(tmp_path, fabric):
    nt = _fabric_site(tmp_path, f"{{gpus: 8, cpus: 8, fabric: {fabric}}}").node_types[0]
    assert nt.rdma is True  # no hcas needed: the plugin finds its devices
    assert _fabric_site(tmp_path, f"{{gpus: 8, cpus: 8, fabric: {fabric}, rdma: true}}").node_types[0].rdma
    with pytest.raises(SiteError) as e:
        _fabric_site(tmp_path, f"{{gpus: 8, cpus: 8, fabric: {fabric}, rdma: false}}")
    assert f"node_types.cpu.rdma: fabric {fabric} is RDMA by design" in e.value.message
    assert "fabric: ethernet" in e.value.tip


def test_an_admins_env_may_still_override_or_remove_a_fabrics_variable(tmp_path):
    nt = _fabric_site(tmp_path, "{gpus: 4, cpus: 8, fabric: slingshot, env: {NCCL_CROSS_NIC: null, "
                                "FI_MR_CACHE_MONITOR: kdreg2}}").node_types[0]
    env = dict(nt.network_env())
    assert "NCCL_CROSS_NIC" not in env and env["FI_MR_CACHE_MONITOR"] == "kdreg2"


def test_the_hint_to_see_every_problem_is_a_command_on_one_line_whatever_the_file_is_called(tmp_path):
    bad = MINIMAL.replace("max_nodes: 2", "max_nodes: two") + "launcher: slurm\nname: fine\n"
    for name, shown in (("my site.yaml", "'{}'"), ("a\nb.yaml", "{!r}")):
        p = write(tmp_path, name, bad)
        with pytest.raises(SiteError) as e:
            sites.load_site(p)
        hint = f"(and 1 more: slurmtorch site validate {shown.format(str(p))})"
        assert "\n" not in hint and hint in e.value.render()
