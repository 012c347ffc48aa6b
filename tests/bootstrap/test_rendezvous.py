"""Master address/port choice, Open MPI start-up defaults, the bootstrap's pure parts, and its
init_process_group wrapper in a world of one (real torch and gloo, no launcher)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import types
from pathlib import Path

import pytest

from slurmtorch.bootstrap import mpi
from slurmtorch.bootstrap import rendezvous
from slurmtorch.bootstrap.device import (bound_per_rank, choose_backend, pick_device, rank_device,
                                        visible_devices_var)
from slurmtorch.bootstrap.options import FROM, HELP, USAGE, parse_args
from slurmtorch.errors import BootstrapError

AVAILABLE = ["lo", "eth0", "eth1", "ib0", "docker0"]


@pytest.mark.parametrize("spec, chosen", [
    ("eth1", "eth1"),
    ("ib0,eth0", "ib0"),          # first of a comma list
    ("bond0,eth0", "eth0"),       # first one present
    ("ib", "ib0"),                # NCCL-style prefix
    ("=eth", None),               # exact names only
    ("^docker,lo", "eth0"),       # exclusion list
    ("^eth,ib,docker", "lo"),     # loopback only when nothing else is left
    ("^=eth0", "eth1"),           # NCCL's exact exclusion: only eth0 itself
    ("^=eth", "eth0"),            # ... so a prefix excludes nothing
    ("^eth", "ib0"),              # while a plain exclusion is by prefix
    ("^=eth0, eth1,ib0", "docker0"),
    ("=eth0", "eth0"),
    ("=eth1,eth0", "eth1"),
    ("wlan0", None),
])
def test_socket_ifname_follows_nccl_syntax(spec, chosen):
    assert rendezvous.pick_interface(spec, AVAILABLE) == chosen


@pytest.mark.parametrize("spec, available, chosen", [
    ("=eth1", ["eth10", "eth1"], "eth1"),                # exact: never the longer name
    ("=eth1", ["eth10", "eth11"], None),
    ("eth1", ["eth10", "eth11"], "eth10"),               # NCCL's prefix: eth1 also matches eth10
    ("=hsn0,hsn1,hsn2,hsn3", ["lo", "hsn1", "hsn0"], "hsn0"),  # slurmtorch's fabric form
])
def test_exact_interface_lists_as_slurmtorch_writes_them(spec, available, chosen):
    """The site's interfaces reach NCCL_SOCKET_IFNAME as `=a,b` (exact, NCCL's syntax:
    https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html); the rendezvous reads it alike."""
    assert rendezvous.pick_interface(spec, available) == chosen


def test_the_backends_own_ifname_variable_wins():
    env = {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "ib0"}
    assert rendezvous.ifname_spec(env, "gloo") == "eth0"
    assert rendezvous.ifname_spec(env, "nccl") == "ib0"
    assert rendezvous.ifname_spec({"NCCL_SOCKET_IFNAME": "ib0"}, "gloo") == "ib0"
    assert rendezvous.ifname_spec({}, "gloo") is None


def test_master_address_comes_from_the_named_interface():
    assert rendezvous.interface_address("lo") == "127.0.0.1"
    assert rendezvous.master_address({"GLOO_SOCKET_IFNAME": "lo"}, "ignored") == "127.0.0.1"
    assert rendezvous.master_address({"MASTER_ADDR": "198.18.0.99", "GLOO_SOCKET_IFNAME": "lo"}, "x") == "198.18.0.99"


def test_missing_interface_is_a_clear_error():
    with pytest.raises(BootstrapError, match="no IPv4 address on the interface 'nosuch0'"):
        rendezvous.master_address({"GLOO_SOCKET_IFNAME": "nosuch0"}, "box")


def test_loopback_master_for_several_nodes_is_refused():
    rendezvous.check_reachable("127.0.0.1", 1)
    rendezvous.check_reachable("198.18.0.11", 4)
    with pytest.raises(BootstrapError, match="loopback"):
        rendezvous.check_reachable("127.0.1.1", 2)


def test_reserved_port_stays_ours_until_closed():
    with rendezvous.reserve_port() as held:
        other = socket.socket()
        with pytest.raises(OSError):
            other.bind(("127.0.0.1", held.port))
        other.close()
        with pytest.raises(BootstrapError, match="not free"):
            blocker = socket.socket()
            blocker.bind(("", 0))
            blocker.listen()
            try:
                rendezvous.reserve_port(blocker.getsockname()[1])
            finally:
                blocker.close()


def test_a_reservation_is_not_exclusive_against_another_reuseaddr_bind():
    # What the module docstring promises and what it does not: a second SO_REUSEADDR
    # bind of the held port succeeds, and the clash shows only at listen().
    with rendezvous.reserve_port() as held:
        first, second = socket.socket(), socket.socket()
        try:
            for s in (first, second):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("", held.port))
            first.listen()
            with pytest.raises(OSError):
                second.listen()
        finally:
            first.close()
            second.close()


# ------------------------------------------------------------------ Open MPI defaults

def test_btl_default_is_added_only_where_nobody_chose():
    assert mpi.mca_defaults({}, "gloo") == {"OMPI_MCA_btl": "^ofi,uct"}
    assert mpi.mca_defaults({"OMPI_MCA_btl_tcp_if_include": "eth0"}, "auto") == {"OMPI_MCA_btl": "^ofi,uct"}


def test_btl_default_excludes_fabric_probes_instead_of_naming_a_versions_components():
    # Open MPI 4.x calls its shared-memory btl `vader` (`sm` is a removed stub there), 5.x
    # calls it `sm`: an exclusion keeps whichever exists; a missing included one is an error.
    (value,) = mpi.mca_defaults({}, "gloo").values()
    assert value.startswith("^") and not {"sm", "vader", "self", "tcp"} & set(value[1:].split(","))


@pytest.mark.parametrize("env, files", [
    ({"OMPI_MCA_btl": "^ofi"}, []),
    ({"OMPI_MCA_pml": "ucx"}, []),
    ({}, ["# site\nbtl = self,uct\n"]),
    ({}, ["mtl=ofi # EFA\n"]),
])
def test_user_or_site_transport_choice_wins(env, files):
    assert mpi.mca_defaults(env, "gloo", files) == {}


def test_backend_mpi_keeps_open_mpis_transports():
    assert mpi.mca_defaults({}, "mpi") == {}


def test_mpi_launch_without_mpi4py_is_one_clear_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # what `import mpi4py` sees when it is not installed
    with pytest.raises(BootstrapError, match="an MPI launcher started this process but mpi4py cannot be imported") as err:
        mpi.from_comm({"OMPI_COMM_WORLD_SIZE": "2"}, "box")
    assert "pip install 'slurmtorch[mpi]'" in err.value.tip


def test_commented_param_lines_do_not_count():
    assert mpi.mca_defaults({}, "gloo", ["# btl = tcp\n"]) == {"OMPI_MCA_btl": "^ofi,uct"}


# ------------------------------------------------------------------ bootstrap's pure parts

def test_bootstrap_options_stop_at_the_script():
    opts = parse_args(["--backend", "gloo", "--timeout=30", "--no-init", "train.py", "--backend", "x"])
    assert (opts.backend, opts.timeout, opts.init, opts.script, opts.args) == ("gloo", 30.0, False, "train.py",
                                                                               ["--backend", "x"])
    opts = parse_args(["--init-args", "train.py"])  # the flag must not eat the script
    assert (opts.init_args, opts.script, opts.init) == ("rank", "train.py", True)
    opts = parse_args(["--init-args=node", "--from", "slurm", "-m", "pkg.train", "-v"])
    assert (opts.init_args, opts.init, opts.source, opts.module, opts.args) == ("node", False, "slurm",
                                                                                 "pkg.train", ["-v"])
    assert parse_args([]).script is None


@pytest.mark.parametrize("argv", [["--backend", "tpu"], ["--timeout", "0"], ["--from", "k8s"], ["--bogus"],
                                  ["--timeout"], ["-m"]])
def test_bad_bootstrap_options_are_usage_errors(argv):
    with pytest.raises(BootstrapError):
        parse_args(argv)


def test_backend_auto_prefers_nccl_with_cuda():
    assert choose_backend("auto", cuda=True, nccl=True, gloo=True, mpi=False) == "nccl"
    assert choose_backend("auto", cuda=False, nccl=True, gloo=True, mpi=False) == "gloo"


@pytest.mark.parametrize("backend, lacks", [("nccl", "nccl"), ("mpi", "mpi")])
def test_backend_the_build_lacks_is_one_clear_line(backend, lacks):
    with pytest.raises(BootstrapError) as err:
        choose_backend(backend, cuda=False, nccl=False, gloo=True, mpi=False, version="torch 2.13.0+cpu")
    assert "\n" not in err.value.message and f"'{lacks}' is not built into" in err.value.message


def test_nccl_without_gpu_is_refused():
    with pytest.raises(BootstrapError, match="needs CUDA"):
        choose_backend("nccl", cuda=False, nccl=True, gloo=True, mpi=False)


@pytest.mark.parametrize("local_rank, local_world, count, device", [(3, 4, 4, 3), (3, 4, 8, 3), (3, 4, 1, 0)])
def test_gpu_choice_follows_local_rank_or_the_one_visible_gpu(local_rank, local_world, count, device):
    assert pick_device(local_rank, local_world, count) == device


def test_fewer_gpus_than_ranks_is_refused():
    with pytest.raises(BootstrapError, match="4 ranks on this node but 2 visible GPUs"):
        pick_device(0, 4, 2)


@pytest.mark.parametrize("backend, local_rank, local_world, count, device", [
    ("nccl", 3, 4, 4, 3), ("gloo", 3, 4, 4, 3), ("mpi", 1, 2, 1, 0),  # GPUs visible: every backend uses them
    ("gloo", 1, 2, 0, None),                                          # no GPU: CUDA left alone
    ("gloo", 2, 4, 2, None),                                          # more ranks than GPUs: fine for gloo
])
def test_every_backend_gets_the_ranks_gpu_when_gpus_are_visible(backend, local_rank, local_world, count, device):
    assert rank_device(backend, local_rank, local_world, count) == device


def test_nccl_with_more_ranks_than_gpus_is_still_refused():
    with pytest.raises(BootstrapError, match="4 ranks on this node but 2 visible GPUs"):
        rank_device("nccl", 0, 4, 2)


def test_two_ranks_on_the_nodes_only_gpu_are_refused_before_nccl_sees_them():
    # Issue 15: NCCL's own "Duplicate GPU detected" came only in the first all_reduce, as
    # a traceback per rank; the layout and the fix are named before the group exists.
    with pytest.raises(BootstrapError) as err:
        rank_device("nccl", 1, 2, 1, bound=False)
    assert err.value.message == ("2 ranks on this node but 1 visible GPU (CUDA_VISIBLE_DEVICES unset, "
                                 "so every rank sees the same GPU)")
    assert "--gpus-per-node 2" in err.value.tip and "--backend gloo" in err.value.tip
    assert "CUDA_VISIBLE_DEVICES" in err.value.tip


def test_amd_ranks_bound_by_slurm_use_their_one_visible_gcd_and_errors_name_rocm():
    """srun --gpus-per-task=1 --gpu-bind=closest on MI250X nodes (OLCF's launch line) sets
    ROCR_VISIBLE_DEVICES per task: each rank sees one GCD, device 0."""
    assert rank_device("nccl", 5, 8, 1, bound_per_rank({"ROCR_VISIBLE_DEVICES": "5"})) == 0
    assert rank_device("nccl", 5, 8, 8, bound_per_rank({})) == 5  # every GCD visible: LOCAL_RANK
    with pytest.raises(BootstrapError) as err:
        rank_device("nccl", 1, 2, 1, bound=False, var=visible_devices_var(hip=True))
    assert "ROCR_VISIBLE_DEVICES unset" in err.value.message and "own ROCR_VISIBLE_DEVICES" in err.value.tip
    assert visible_devices_var(hip=False) == "CUDA_VISIBLE_DEVICES"


def test_one_gpu_bound_to_each_rank_is_that_ranks_gpu():
    assert rank_device("nccl", 1, 2, 1, bound=True) == 0


def test_gloo_ranks_sharing_one_gpu_leave_cuda_alone():
    assert rank_device("gloo", 1, 2, 1, bound=False) is None


@pytest.mark.parametrize("env, bound", [
    ({}, False), ({"CUDA_VISIBLE_DEVICES": ""}, False), ({"CUDA_VISIBLE_DEVICES": "3"}, True),
    ({"ROCR_VISIBLE_DEVICES": "0"}, True), ({"HIP_VISIBLE_DEVICES": "1"}, True),
])
def test_a_visible_devices_variable_means_the_launcher_chose_the_ranks_gpus(env, bound):
    assert bound_per_rank(env) is bound


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "Infinity", "1e300"])
def test_timeout_must_be_a_finite_number_of_seconds(text):
    with pytest.raises(BootstrapError, match=r"--timeout \S+: must be"):
        parse_args(["--timeout", text, "train.py"])


def test_usage_and_help_name_every_world_source():
    for source in FROM:
        assert source in USAGE.split("--from ")[1].split("]")[0].split("|")
        assert f" {source} " in HELP.split("--from F")[1].splitlines()[0] + " "


def test_thread_default_gives_each_rank_its_share_of_the_node():
    from slurmtorch.bootstrap.world import thread_defaults

    assert thread_defaults({}, 4, 16) == {"OMP_NUM_THREADS": "4"}
    assert thread_defaults({}, 4, 2) == {"OMP_NUM_THREADS": "1"}
    assert thread_defaults({"SLURM_CPUS_PER_TASK": "3"}, 2, 16) == {"OMP_NUM_THREADS": "3"}


def test_thread_default_gives_a_rank_alone_on_its_node_all_its_cpus():
    """Issue 44: a rank with its node to itself got no OMP_NUM_THREADS, so accelerate warned in
    every Trainer job (and set torch's threads to the host's cores, whatever the job may use)."""
    from slurmtorch.bootstrap.world import thread_defaults

    assert thread_defaults({}, 1, 16) == {"OMP_NUM_THREADS": "16"}
    assert thread_defaults({"SLURM_CPUS_PER_TASK": "6"}, 1, 16) == {"OMP_NUM_THREADS": "6"}


def test_thread_default_leaves_a_user_or_site_choice_alone():
    from slurmtorch.bootstrap.world import thread_defaults

    assert thread_defaults({"OMP_NUM_THREADS": "8"}, 4, 16) == {}
    assert thread_defaults({"OMP_NUM_THREADS": "8"}, 1, 16) == {}


def test_the_batch_scripts_master_addr_helper_prints_the_interfaces_address_or_one_error(capsys, monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    assert rendezvous.main(["--backend", "gloo"]) == 0
    assert capsys.readouterr().out == "127.0.0.1\n"
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "=nosuch0")
    assert rendezvous.main([]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("slurmtorch: error: no IPv4 address on the interface '=nosuch0'")
    assert err[1].startswith("slurmtorch: tip: ")
    assert rendezvous.main(["--nosuch"]) == 2


def test_only_sruns_task_0_leaves_the_started_file(tmp_path):
    from slurmtorch.bootstrap.runner import note_started

    path = tmp_path / ".started-0"
    note_started({"SLURMTORCH_STARTED": str(path), "SLURM_PROCID": "1"})
    note_started({"SLURM_PROCID": "0"})
    assert not path.exists()
    note_started({"SLURMTORCH_STARTED": str(path), "SLURM_PROCID": "0"})
    assert path.exists()
    # A folder the rank cannot write (not mounted in its container, say) is not an error.
    note_started({"SLURMTORCH_STARTED": str(tmp_path / "missing" / ".started-0"), "SLURM_PROCID": "0"})


def test_phase_durations_split_mpi_and_torch_costs_out_of_ours():
    from slurmtorch.bootstrap.timings import phase_durations

    marks = [("start", 0.0), ("detect", 1.0), ("init_process_group", 3.0), ("handover", 3.01)]
    got = phase_durations(marks, {"mpi_init": 0.9, "agree": 0.05, "import_torch": 1.5})
    assert got == pytest.approx({"detect": 0.05, "mpi_init": 0.9, "agree": 0.05,
                                 "init_process_group": 0.5, "import_torch": 1.5, "handover": 0.01})


# ------------------------------------------------------------------ init_process_group wrapper, world of one

PROBE = Path(__file__).resolve().parents[1] / "scripts" / "probe.py"


def run_probe(*argv):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["GLOO_SOCKET_IFNAME"] = "lo"
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.bootstrap", "--from", "single", "--timeout", "77",
                           *argv], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("PROBE ")]
    return json.loads(line[len("PROBE "):])


@pytest.mark.parametrize("argv, replaced, timeout", [
    ([PROBE, "--init-self"], False, 77),                                  # same call: a no-op
    ([PROBE, "--init-self", "--init-timeout", "7200"], False, 7200),      # its timeout, on our group
    ([PROBE, "--init-self", "--pg-options"], True, 77),                   # other options: a new group
    ([PROBE, "--init-self", "--pg-options", "--init-timeout", "50"], True, 50),
    ([PROBE, "--init-self", "--pg-options", "--init-timeout", "none"], True, 77),  # explicit None: ours
    (["--no-init", PROBE, "--init-self", "--init-timeout", "none"], False, 77),
    (["--no-init", PROBE, "--mesh"], False, 77),                          # init_device_mesh, as FSDP2 does
])
def test_a_scripts_own_init_gets_the_timeout_it_asked_for_else_ours(has_torch, argv, replaced, timeout):
    record = run_probe(*argv)
    assert record["group_replaced"] is replaced
    assert (record["pg_timeout"], record["store_timeout"]) == (timeout, timeout)
    assert record["store_port"] == int(record["MASTER_PORT"]) and record["all_reduce"] == 1.0


def test_patching_a_torch_without_what_we_wrap_is_a_silent_no_op():
    from slurmtorch.bootstrap.group import _patch

    _patch(types.SimpleNamespace(__name__="torch.distributed"))  # a build without distributed_c10d
    def unreadable():
        pass

    unreadable.__signature__ = "not a signature"  # inspect.signature raises TypeError
    odd = types.SimpleNamespace(init_process_group=unreadable)
    _patch(types.SimpleNamespace(__name__="torch.distributed", distributed_c10d=odd))
    assert odd.init_process_group is unreadable


def test_a_process_group_without_torch_installed_is_one_clear_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('ran')\n")
    code = ("import sys; sys.modules['torch'] = None; from slurmtorch.bootstrap import main; "
            f"sys.exit(main(['--from', 'single', {str(script)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"})
    assert proc.returncode == 1 and "ran" not in proc.stdout
    assert "error: a process group needs torch, but it cannot be imported" in proc.stderr
    assert "tip: pip install 'slurmtorch[torch]'" in proc.stderr and "Traceback" not in proc.stderr


def test_waiting_for_the_store_ends_when_the_held_port_starts_listening():
    # Rank 0 holds MASTER_PORT bound but not listening until torch's store takes it: a
    # peer's probe is refused until then, and answered at once after.
    with rendezvous.reserve_port() as held:
        assert rendezvous.wait_listening("127.0.0.1", held.port, timeout=0.05) is False
        held._sock.listen()
        assert rendezvous.wait_listening("127.0.0.1", held.port, timeout=5) is True


def test_a_store_that_never_comes_is_named_as_a_consequence_within_the_timeout(monkeypatch):
    import datetime

    from slurmtorch.bootstrap.group import _wait_for_store
    from slurmtorch.bootstrap.rankinfo import RankInfo
    from slurmtorch.submit.jobfolder.failures import is_consequence

    with rendezvous.reserve_port() as held:
        info = RankInfo(rank=1, world_size=2, local_rank=1, local_world_size=2, node_rank=0, num_nodes=1,
                        master_addr="127.0.0.1", master_port=held.port, hostname="h", source="env")
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(held.port))
        with pytest.raises(BootstrapError) as err:
            _wait_for_store({"backend": "gloo", "timeout": datetime.timedelta(seconds=0.2)}, info)
    assert err.value.message.startswith(f"timed out after 0.2 s waiting for rank 0's store at 127.0.0.1:{held.port}")
    assert is_consequence(err.value.render())  # the rank that hung or died is the one to name
