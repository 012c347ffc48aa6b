"""torchrun's agent per node (bootstrap/agent.py): the options torch cannot find out itself
where the host name resolves to another network than the site's interface."""

from __future__ import annotations

from slurmtorch.bootstrap.agent import agent_options, has_option

TORCHRUN = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "198.18.0.139:2",
            "-m", "slurmtorch.bootstrap", "--backend", "gloo", "train.py"]


def test_only_the_first_node_hosts_the_rendezvous_store():
    assert agent_options(TORCHRUN, {"SLURM_NODEID": "0"}, None) == ["--rdzv-conf", "is_host=1"]
    assert agent_options(TORCHRUN, {"SLURM_NODEID": "1"}, None) == ["--rdzv-conf", "is_host=0"]
    assert agent_options(TORCHRUN, {}, None) == ["--rdzv-conf", "is_host=0"]


def test_each_node_gives_its_address_on_the_sites_interface():
    assert agent_options(TORCHRUN, {"SLURM_NODEID": "1"}, "198.18.0.140") == [
        "--rdzv-conf", "is_host=0", "--local-addr", "198.18.0.140"]


def test_options_already_given_are_kept_and_the_workers_own_are_not_torchruns():
    given = ["--rdzv-conf=is_host=0", "--local_addr", "10.0.0.1", *TORCHRUN]
    assert agent_options(given, {"SLURM_NODEID": "0"}, "198.18.0.139") == []
    # After -m, the words are the worker's: a script's own --local-addr is not torchrun's.
    assert not has_option([*TORCHRUN, "--local-addr", "x"], "--local-addr")
