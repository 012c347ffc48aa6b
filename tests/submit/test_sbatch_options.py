"""-n/--ntasks and uneven layouts: pure, through `build_spec` (what the header and the launch get)."""

from __future__ import annotations

import pytest

from slurmtorch.errors import SpecError
from slurmtorch.submit import render, sites
from slurmtorch.submit.options import Options
from slurmtorch.submit.spec import build_spec


@pytest.fixture(scope="module")
def testbed():
    return sites.load_site("testbed")


@pytest.fixture(scope="module")
def hdr():
    return sites.load_site("hdr-ib")


def opts(**kw) -> Options:
    return Options(**{"script": "/x/train.py", "job_root": "/h/jobs", **kw})


def header(spec) -> dict:
    return dict(spec.directives)


# ------------------------------------------------------------------ uneven layouts

@pytest.mark.parametrize("kw, nodes, ntasks, per_node, uneven", [
    (dict(nodes=2, ntasks=3), 2, 3, 2, True),          # the 2+1
    (dict(nodes=2, ntasks=4), 2, 4, 2, False),         # even: written as before, no --ntasks line
    (dict(nodes=3, ntasks=7), 3, 7, 3, True),          # 3+3+1 at most
    (dict(ntasks=3), 3, 3, 1, False),                  # no --nodes: one rank per node (CPU nodes)
    (dict(ntasks=3, ntasks_per_node=2), 2, 3, 2, True),
    (dict(nodes=2, ntasks=3, ntasks_per_node=4), 2, 3, 4, True),
])
def test_ntasks_spreads_ranks_over_the_nodes(testbed, kw, nodes, ntasks, per_node, uneven):
    spec = build_spec(testbed, opts(**kw))
    assert (spec.nodes, spec.ntasks, spec.ntasks_per_node, spec.uneven) == (nodes, ntasks, per_node, uneven)
    h = header(spec)
    assert h["nodes"] == str(nodes)
    # Uneven: --ntasks alone (with --ntasks-per-node too, Slurm allocates nodes x it and srun warns).
    assert (h.get("ntasks"), h.get("ntasks-per-node")) == ((str(ntasks), None) if uneven else (None, str(per_node)))


def test_gpu_nodes_default_to_one_rank_per_gpu_and_n_spreads_them(hdr):
    spec = build_spec(hdr, opts(ntasks=12))
    assert (spec.nodes, spec.ntasks_per_node, spec.gpus_per_node, spec.uneven) == (2, 8, 8, True)
    assert header(spec)["ntasks"] == "12"


@pytest.mark.parametrize("kw, message", [
    (dict(nodes=2, ntasks=1), "-n 1 ranks cannot cover 2 nodes"),
    (dict(nodes=2, ntasks=5, ntasks_per_node=2), "-n 5 ranks do not fit on 2 nodes of at most 2"),
    (dict(ntasks=5), "5 nodes requested, but partition 'debug' allows at most 4"),
    (dict(nodes=2, ntasks=3, launcher="torchrun"), "torchrun starts the same number of ranks on every node"),
    (dict(ntasks=2, roles=("master=1", "worker=1")), "-n/--ntasks cannot apply"),
    (dict(ntasks=0), "-n/--ntasks must be at least 1"),
])
def test_impossible_rank_counts_are_refused(testbed, kw, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        build_spec(testbed, opts(**kw))


def test_an_uneven_layout_runs_under_srun_and_mpirun(testbed):
    for launcher in ("srun", "mpirun"):
        spec = build_spec(testbed, opts(nodes=2, ntasks=3, launcher=launcher))
        plan = render.launch_plan(spec)
        assert spec.uneven and (launcher != "mpirun" or plan.mpirun_args[:2] == ("-n", "3"))
