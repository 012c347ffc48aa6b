"""`site init`'s pure half: what a cluster says of itself -> a site file that loads.

The testbed's outputs were captured from scripts/testbed's Slurm (tests/sites/discover/testbed-*);
the bigger cluster's are written from a centre's public page (devana-*, cited in their headers).
Every generated site is loaded back with the site loader: `site init` must never write a file
that `--site` refuses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmtorch.errors import SiteError
from slurmtorch.submit import sites
from slurmtorch.submit.sites import discover

FIXTURES = Path(__file__).resolve().parents[1] / "sites" / "discover"


def fixture(name: str) -> str:
    """A captured output, less its header (lines starting with '#', which say where it came from)."""
    return "".join(ln for ln in (FIXTURES / f"{name}.txt").read_text().splitlines(keepends=True)
                   if not ln.startswith("#"))


def load(tmp_path: Path, text: str, stem: str = "generated") -> sites.Site:
    path = tmp_path / f"{stem}.yaml"
    path.write_text(text)
    return sites.load_site(path)


def test_the_testbed_becomes_one_cpu_node_type_and_its_debug_partition(tmp_path):
    text = discover.site_yaml(fixture("testbed-nodes"), fixture("testbed-partitions"), fixture("testbed-mpi"))
    site = load(tmp_path, text)
    (cpu,) = site.node_types
    assert (cpu.name, cpu.gpus, cpu.cpus, cpu.memory_gb, cpu.fabric, cpu.rdma, cpu.interfaces) == \
        ("cpu", 0, 2, 4, "ethernet", False, ())
    (debug,) = site.partitions
    assert (debug.name, debug.max_nodes, debug.max_time, debug.node_type, debug.default, debug.default_time) == \
        ("debug", 4, "1-00:00:00", "cpu", True, None)
    assert site.launcher == "srun" and site.srun_mpi == "pmix"  # Open MPI 5 under srun needs PMIx
    assert "# node[1-4]: 4 nodes;" in text


def test_what_a_login_node_cannot_know_is_marked_check_with_the_safest_value(tmp_path):
    text = discover.site_yaml(fixture("testbed-nodes"), fixture("testbed-partitions"), fixture("testbed-mpi"),
                              fixture("testbed-config"))
    checks = [ln.strip() for ln in text.splitlines() if "# CHECK:" in ln]
    assert [c.split(":")[1].split()[0] for c in checks] == ["modules", "the", "interfaces"]
    assert "fabric: ethernet" in text and "\n    # interfaces: [ib0]\n" in text


def test_a_bigger_cluster_groups_148_nodes_into_three_types_and_keeps_each_partitions_limits(tmp_path):
    text = discover.site_yaml(fixture("devana-nodes"), fixture("devana-partitions"), fixture("testbed-mpi"),
                              name="devana")
    site = load(tmp_path, text)
    types = {nt.name: nt for nt in site.node_types}
    assert list(types) == ["cpu", "a100", "a100-2"]  # the most numerous group takes the plain name
    assert (types["a100"].gpus, types["a100"].gpu_model, types["a100"].cpus, types["a100"].memory_gb) == \
        (4, "A100", 64, 250)
    # Features `ib` name the fabric: RDMA with every active HCA (hcas left out); login nodes say nothing.
    assert (types["cpu"].fabric, types["cpu"].rdma, types["cpu"].hcas) == ("infiniband", True, ())
    assert types["a100-2"].fabric == "ethernet"
    parts = {p.name: (p.node_type, p.max_nodes, p.max_time, p.default_time, p.default) for p in site.partitions}
    assert parts == {"testing": ("a100-2", 1, "00:30:00", "00:30:00", False),
                     "gpu": ("a100", 1, "2-00:00:00", "2-00:00:00", False),
                     "short": ("cpu", 8, "1-00:00:00", "1-00:00:00", True),
                     "medium": ("cpu", 4, "2-00:00:00", "2-00:00:00", False),
                     "long": ("cpu", 1, "4-00:00:00", "4-00:00:00", False)}
    assert site.name == "devana"
    # A drained node (n006, Reason=... with spaces) is still one of its type's nodes.
    assert "# n[001-140]: 140 nodes;" in text


def test_a_partition_of_several_node_types_takes_the_smallest_and_says_so(tmp_path):
    a100s = "".join(ln for ln in fixture("devana-nodes").splitlines(keepends=True) if "Gres=gpu:A100:4" in ln)
    nodes = fixture("testbed-nodes") + a100s
    part = ("PartitionName=all Default=YES DefaultTime=NONE MaxNodes=UNLIMITED MaxTime=UNLIMITED "
            "Nodes=node[1-4],n[141-148] State=UP TotalNodes=12\n")
    text = discover.site_yaml(nodes, part, "")
    (p,) = load(tmp_path, text).partitions
    assert (p.node_type, p.max_nodes, p.max_time) == ("cpu", 12, "UNLIMITED")
    assert "# CHECK: all has several node types (a100: 8 nodes, cpu: 4 nodes); cpu, the smallest" in text


def test_scontrols_multi_line_records_read_as_its_one_line_ones():
    """ARIS (GRNET)'s `scontrol show partition` as its user guide prints it
    (https://doc25.aris.grnet.gr/run/resource_queue): one field group per line."""
    text = """\
PartitionName=compute
   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL
   AllocNodes=ALL Default=YES QoS=N/A
   DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO ExclusiveTopo=NO GraceTime=0 Hidden=NO
   MaxNodes=UNLIMITED MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED MaxCPUsPerSocket=UNLIMITED
   Nodes=m[01-48]
   State=UP TotalCPUs=6144 TotalNodes=48 SelectTypeParameters=NONE
   TRES=cpu=6144,mem=23808G,node=48,billing=6144

"""
    (rec,) = discover.records(text, "PartitionName")
    assert (rec["PartitionName"], rec["Default"], rec["MaxTime"], rec["Nodes"], rec["TRES"]) == \
        ("compute", "YES", "2-00:00:00", "m[01-48]", "cpu=6144,mem=23808G,node=48,billing=6144")
    (node,) = discover.records("NodeName=a OS=Linux 6.8.0 #1 SMP Reason=Not responding [slurm@x] CPUTot=4",
                               "NodeName")
    assert (node["OS"], node["Reason"], node["CPUTot"]) == ("Linux 6.8.0 #1 SMP", "Not responding [slurm@x]", "4")


@pytest.mark.parametrize("gres, gpus, model", [
    ("gpu:a100:4(S:0-1)", 4, "a100"),
    ("gpu:4", 4, None),
    ("gpu:tesla:2(S:0),mic:knc:1", 2, "tesla"),
    ("gpu:a100:2,gpu:v100:2", 4, None),  # two models: no one model to name
    ("shard:8", 0, None),
    ("(null)", 0, None),
])
def test_gres_gives_the_gpus_and_their_model(gres, gpus, model):
    hw = discover.hardware({"NodeName": "x", "Gres": gres, "CPUTot": "8"})
    assert (hw.gpus, hw.gpu_model) == (gpus, model)


@pytest.mark.parametrize("text, plugins, chosen", [
    ("MPI plugin types are...\n\tnone\n\tcray_shasta\n\tpmi2\n\tpmix\n"
     "specific pmix plugin versions available: pmix_v4\n", ["none", "cray_shasta", "pmi2", "pmix", "pmix_v4"], "pmix"),
    # Older srun writes through its logger, on stderr: `srun: ` before each line.
    ("srun: MPI types are...\nsrun: none\nsrun: pmi2\nsrun: pmix_v3\nsrun: pmix_v4\n",
     ["none", "pmi2", "pmix_v3", "pmix_v4"], "pmix_v4"),
    ("MPI plugin types are...\n\tnone\n\tpmi2\n", ["none", "pmi2"], "pmi2"),
    ("srun: pmix_v9\nsrun: pmix_v10\n", ["pmix_v9", "pmix_v10"], "pmix_v10"),
    # Neither: plain srun (no --mpi), the cluster's MpiDefault, rather than the site's default pmix.
    ("MPI plugin types are...\n\tnone\n\tcray_shasta\n", ["none", "cray_shasta"], "none"),
    ("srun: command not found\n", [], "none"),
])
def test_srun_mpi_is_pmix_then_pmi2_else_left_to_the_clusters_default(tmp_path, text, plugins, chosen):
    assert discover.mpi_plugins(text) == plugins
    site = load(tmp_path, discover.site_yaml(fixture("testbed-nodes"), fixture("testbed-partitions"), text))
    assert site.srun_mpi == chosen


@pytest.mark.parametrize("features, fabric", [
    ("cpu,slingshot", "slingshot"), ("efa", "efa"), ("roce", "roce"), ("HDR,ib", "infiniband"),
    ("ib,roce", "ethernet"),  # features that disagree name nothing
    ("cpu", "ethernet"),
])
def test_node_features_that_name_the_fabric_choose_it(tmp_path, features, fabric):
    nodes = fixture("testbed-nodes").replace("AvailableFeatures=cpu,testbed", f"AvailableFeatures={features}")
    (nt,) = load(tmp_path, discover.site_yaml(nodes, fixture("testbed-partitions"), "")).node_types
    assert nt.fabric == fabric


@pytest.mark.parametrize("name", ["on", "x#1", "007"])
def test_partition_names_yaml_would_misread_stay_strings(tmp_path, name):
    part = fixture("testbed-partitions").replace("PartitionName=debug", f"PartitionName={name}")
    (p,) = load(tmp_path, discover.site_yaml(fixture("testbed-nodes"), part, "")).partitions
    assert p.name == name


def test_a_cluster_that_lists_no_nodes_is_one_error():
    with pytest.raises(SiteError, match="scontrol listed no nodes"):
        discover.site_yaml("", fixture("testbed-partitions"), "")


def test_max_array_size_is_read_from_scontrol_show_config(tmp_path):
    """The testbed's recorded `scontrol show config` (Slurm 24.11): MaxArraySize = 1001, and a
    cluster's own value where it sets one; --array and --sweep are then checked against it."""
    text = discover.site_yaml(fixture("testbed-nodes"), fixture("testbed-partitions"), fixture("testbed-mpi"),
                              fixture("testbed-config"))
    assert load(tmp_path, text).max_array_size == 1001
    assert "max_array_size: 1001  # scontrol show config: MaxArraySize" in text
    mine = fixture("testbed-config").replace("MaxArraySize            = 1001", "MaxArraySize            = 50001")
    big = load(tmp_path, discover.site_yaml(fixture("testbed-nodes"), fixture("testbed-partitions"),
                                            fixture("testbed-mpi"), mine), "big")
    assert big.max_array_size == 50001


@pytest.mark.parametrize("config, said", [
    ("", "# CHECK: MaxArraySize not read (scontrol show config said nothing): Slurm's default, 1001, applies"),
    ("MaxArraySize = 9999999\n", "# CHECK: MaxArraySize = 9999999 is past Slurm's own limit (4000001): left out"),
    ("MaxArraySize = lots\n", "# CHECK: MaxArraySize not read (scontrol show config said nothing): Slurm's "
                                "default, 1001, applies"),
])
def test_a_max_array_size_that_cannot_be_read_is_left_to_slurms_default_and_marked(tmp_path, config, said):
    text = discover.site_yaml(fixture("testbed-nodes"), fixture("testbed-partitions"), fixture("testbed-mpi"),
                              config)
    assert said in text.splitlines() and load(tmp_path, text).max_array_size == 1001


def test_a_partitions_min_nodes_is_kept(tmp_path):
    """scontrol's MinNodes (a partition that takes only jobs of many nodes) becomes min_nodes,
    refused before sbatch; Slurm's 0 or 1 says nothing."""
    parts = fixture("testbed-partitions").replace("MinNodes=0", "MinNodes=2")
    assert "MinNodes=2" in parts
    site = load(tmp_path, discover.site_yaml(fixture("testbed-nodes"), parts, fixture("testbed-mpi")))
    assert [p.min_nodes for p in site.partitions] == [2]
    plain = load(tmp_path, discover.site_yaml(fixture("testbed-nodes"), fixture("testbed-partitions"),
                                              fixture("testbed-mpi")), "plain")
    assert [p.min_nodes for p in plain.partitions] == [None]


def test_a_partition_whose_nodes_scontrol_did_not_list_is_left_out_and_said(tmp_path):
    part = fixture("testbed-partitions") + "PartitionName=gone Nodes=(null) MaxTime=UNLIMITED State=UP\n"
    text = discover.site_yaml(fixture("testbed-nodes"), part, "")
    assert [p.name for p in load(tmp_path, text).partitions] == ["debug"]
    assert "# CHECK: partition gone left out" in text


def test_the_site_admins_guide_shows_what_site_init_writes_on_the_testbed():
    guide = (Path(__file__).resolve().parents[2] / "docs" / "site-admins.md").read_text()
    section = guide.split("## A first site from the cluster", 1)[1].split("\n## ", 1)[0]
    summary, written = re.findall(r"```text\n(.*?)```", section, re.S)
    assert written == discover.site_yaml(fixture("testbed-nodes"), fixture("testbed-partitions"),
                                         fixture("testbed-mpi"), fixture("testbed-config"), title="mycluster")
    assert summary.startswith("wrote mycluster.yaml: site 'mycluster', 1 partitions, 1 node types; 3 lines")


def test_slurms_default_realmemory_of_1_mb_leaves_memory_gb_out(tmp_path):
    """RealMemory=1 is Slurm's default where slurm.conf gives none: memory_gb: 0 would refuse every --mem."""
    nodes = fixture("testbed-nodes").replace("RealMemory=4096", "RealMemory=1")
    text = discover.site_yaml(nodes, fixture("testbed-partitions"), "")
    (nt,) = load(tmp_path, text).node_types
    assert nt.memory_gb is None and "# memory_gb left out: RealMemory=1 (MB)" in text


def test_a_partition_that_is_not_up_is_kept_and_marked(tmp_path):
    part = fixture("testbed-partitions").replace("State=UP", "State=INACTIVE")
    text = discover.site_yaml(fixture("testbed-nodes"), part, "")
    assert [p.name for p in load(tmp_path, text).partitions] == ["debug"]
    assert "  # CHECK: State=INACTIVE when this was written\n  debug:\n" in text


# What scontrol could print, within what it does print: words without spaces, `Key=value` fields;
# node names from a few, so that partitions name nodes that were listed, and CPUs given mostly.
_word = st.text(st.sampled_from("abcAZ09_-.:[],#()@/="), min_size=0, max_size=10)
_value = st.one_of(_word, st.sampled_from(["(null)", "N/A", "UNLIMITED", "NONE", "INFINITE", "unlimited", "5-0",
                                           "1-00:00:00", "30:00",
                                           "gpu:a100:4(S:0-1)", "gpu:4", "gpu:H100:8,shard:16", "ib,gpu", "roce",
                                           "0", "1", "64", "257000", "YES", "NO", "UP", "DOWN"]),
                   st.integers(min_value=0, max_value=2**40).map(str))
_node_names = st.sampled_from(["n1", "n2", "n3", "g01", "x-y.z", "on"])
_node_lists = st.one_of(_node_names, _word, st.sampled_from(["n[1-3]", "n1,g01", "n[1-2],x-y.z", "(null)", "g[01-02]"]))
_node_fields = ["CPUEfctv", "Sockets", "CoresPerSocket", "ThreadsPerCore", "RealMemory", "Gres",
                "AvailableFeatures", "State", "Reason"]
_part_fields = ["MaxNodes", "MaxTime", "DefaultTime", "Default", "State"]


_nodes = st.lists(st.tuples(_node_names, st.one_of(st.integers(1, 256).map(str), _value),
                            st.dictionaries(st.sampled_from(_node_fields), _value, max_size=len(_node_fields))),
                  max_size=5).map(lambda rs: "\n".join(
                      " ".join([f"NodeName={n}", f"CPUTot={c}", *(f"{k}={x}" for k, x in fs.items())])
                      for n, c, fs in rs))
_parts = st.lists(st.tuples(st.one_of(_word.filter(bool), st.sampled_from(["debug", "gpu", "yes", "a b"])),
                            _node_lists,
                            st.dictionaries(st.sampled_from(_part_fields), _value, max_size=len(_part_fields))),
                  max_size=4).map(lambda rs: "\n".join(
                      " ".join([f"PartitionName={n}", f"Nodes={nodes}", *(f"{k}={x}" for k, x in fs.items())])
                      for n, nodes, fs in rs))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(nodes=_nodes, parts=_parts,
       mpi=st.sampled_from(["", "MPI plugin types are...\n\tpmix\n", "srun: pmi2\n"]))
def test_whatever_scontrol_says_the_site_loads_or_init_says_why(tmp_path_factory, nodes, parts, mpi):
    """Never a traceback, never a file `--site` refuses: the text loads, or site_yaml / the loader
    raise a SiteError (which `site init` prints as one line, writing nothing)."""
    try:
        text = discover.site_yaml(nodes, parts, mpi)
    except SiteError:
        return
    path = tmp_path_factory.mktemp("fuzz") / "fuzzed.yaml"
    path.write_text(text)
    try:
        sites.load_site(path)
    except SiteError as e:
        pytest.fail(f"{e.message}\n{text}")


def test_what_the_fuzz_found_each_stays_a_site_that_loads(tmp_path):
    """A node without a CPU count (not yet registered), a MaxTime not read as a time, a
    partition listed twice: each once made a file `--site` refused."""
    nodes = fixture("testbed-nodes") + "NodeName=new1 State=FUTURE\n"
    part = fixture("testbed-partitions").replace("MaxTime=1-00:00:00", "MaxTime=soon")
    text = discover.site_yaml(nodes, part + part, "")
    site = load(tmp_path, text)
    assert [p.max_time for p in site.partitions] == ["UNLIMITED"]
    assert "# CHECK: new1 left out: scontrol gave no CPU count" in text
    assert "# CHECK: MaxTime=soon not read: UNLIMITED written" in text
    with pytest.raises(SiteError, match="gave no node's CPU count"):
        discover.site_yaml("NodeName=new1 State=FUTURE\n", part, "")
    with pytest.raises(SiteError, match="no partition of scontrol's has a node it listed"):
        discover.site_yaml(nodes, "PartitionName=p Nodes=elsewhere[1-2]\n", "")
