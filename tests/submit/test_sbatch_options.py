"""sbatch's own options passed on (checked), uneven layouts, and the escape hatch: pure, through
`build_spec` (what the header and the srun lines get) and the check functions themselves."""

from __future__ import annotations

import re

import pytest

from slurmtorch.errors import SpecError
from slurmtorch.submit.launch import launchplan, render
from slurmtorch.submit import sites
from slurmtorch.options import Options
from slurmtorch.submit.launch.sbatch_options import check_begin, check_dependency, check_gres, check_mail_type, megabytes
from slurmtorch.submit.sites.slurmoptions import escape_hatch, SBATCH_REFUSED
from slurmtorch.submit.launch.spec import build_spec


@pytest.fixture(scope="module")
def testbed_site():
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
    (dict(nodes=4, ntasks=7), 4, 7, 2, True),          # 2+2+2+1 at most
    (dict(ntasks=3), 3, 3, 1, False),                  # no --nodes: one rank per node (CPU nodes)
    (dict(ntasks=3, ntasks_per_node=2), 2, 3, 2, True),
    (dict(nodes=3, ntasks=4, ntasks_per_node=2), 3, 4, 2, True),
])
def test_ntasks_spreads_ranks_over_the_nodes(testbed_site, kw, nodes, ntasks, per_node, uneven):
    spec = build_spec(testbed_site, opts(**kw))
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
def test_impossible_rank_counts_are_refused(testbed_site, kw, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        build_spec(testbed_site, opts(**kw))


def test_an_uneven_layout_runs_under_srun_and_mpirun(testbed_site):
    for launcher in ("srun", "mpirun"):
        spec = build_spec(testbed_site, opts(nodes=2, ntasks=3, launcher=launcher))
        (step,) = launchplan.plan(spec).steps
        assert spec.uneven and (launcher != "mpirun" or step.options[:2] == ("-n", "3"))


# ------------------------------------------------------------------ options passed on

def test_passed_on_options_become_header_lines_as_typed(testbed_site):
    spec = build_spec(testbed_site, opts(nodes=2, constraint="testbed&cpu", mem="1G", exclusive=True,
                                    dependency="afterok:12:13", begin="now+1hour", gres="none", reservation="r",
                                    nodelist="node[1-2]", exclude="node4", mail_type="END,FAIL",
                                    mail_user="me@example.org", comment="a b"))
    h = header(spec)
    assert {k: h[k] for k in ("constraint", "mem", "exclusive", "dependency", "begin", "gres", "reservation",
                              "nodelist", "exclude", "mail-type", "mail-user", "comment")} == {
        "constraint": "testbed&cpu", "mem": "1G", "exclusive": True, "dependency": "afterok:12:13",
        "begin": "now+1hour", "gres": "none", "reservation": "r", "nodelist": "node[1-2]", "exclude": "node4",
        "mail-type": "END,FAIL", "mail-user": "me@example.org", "comment": "a b"}
    text = render.render_sbatch(spec)
    assert "#SBATCH --comment='a b'\n" in text and "#SBATCH --constraint='testbed&cpu'\n" in text


def test_user_options_win_over_the_sites_directives(testbed_site):
    from dataclasses import replace

    site = replace(testbed_site, directives=(("constraint", "site"), ("licenses", "x")))
    h = header(build_spec(site, opts(constraint="mine")))
    assert (h["constraint"], h["licenses"]) == ("mine", "x")


@pytest.mark.parametrize("kw, message", [
    (dict(mem="5G"), "--mem 5G is more than the 4G of memory of node type 'cpu'"),
    (dict(mem_per_cpu="3G", cpus_per_task=2), "--mem-per-cpu 3G x 2 CPUs is more than the 4G"),
    (dict(mem="1G", mem_per_cpu="1"), "--mem and --mem-per-cpu together"),
    (dict(mem="lots"), "invalid --mem 'lots'"),
    (dict(mem="1GB"), "invalid --mem '1GB'"),
    (dict(mem_per_cpu="0"), "--mem-per-cpu 0 is zero"),
    (dict(mem_per_gpu="1G"), "--mem-per-gpu, but the job asks for no GPUs"),
    (dict(nodelist="node[1-3]", nodes=2), "--nodelist names 3 nodes, but the job has 2"),
    (dict(nodelist="node[1-2]"), "--nodelist names 2 nodes, but the job has 1"),
    (dict(nodelist="node1", exclude="node[1-2]"), "node1 both in --nodelist and in --exclude"),
    (dict(nodelist="node[1-"), "invalid --nodelist 'node[1-'"),
    (dict(exclude="/etc/hosts"), "--exclude '/etc/hosts' looks like a file name"),
    (dict(constraint=" "), "--constraint is empty"),
    (dict(comment="a\nb"), "contains a newline"),
    (dict(gres="gpu:2"), "GPUs are asked for with --gpus-per-node"),
])
def test_passed_on_options_are_checked_against_the_site(testbed_site, kw, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace("[", r"\[")):
        build_spec(testbed_site, opts(**kw))


def test_memory_per_gpu_counts_the_gpus_per_node(hdr):
    node = hdr.node_type(hdr.partition(None).node_type)
    assert build_spec(hdr, opts(mem_per_gpu="64G")).directives  # 8 x 64G fits the node
    with pytest.raises(SpecError, match=f"x 8 GPUs is more than the {node.memory_gb}G"):
        build_spec(hdr, opts(mem_per_gpu=f"{node.memory_gb}G"))


def test_sizes_are_read_in_slurms_units():
    assert [megabytes(t, "--mem") for t in ("100", "2K", "3M", "4G", "1T", "1g")] == \
        [100, 2 / 1024, 3, 4096, 1024 * 1024, 1024]


@pytest.mark.parametrize("text", ["afterok:1", "afterok:1:2", "after:5+10", "afterany:7_3", "afternotok:7_*",
                                  "singleton", "afterok:1,afterany:2", "afterok:1?afternotok:2", "aftercorr:3",
                                  "afterburstbuffer:4"])
def test_dependencies_in_sbatchs_syntax_pass(text):
    check_dependency(text)


@pytest.mark.parametrize("text", ["afterok", "afterok:", "afterok:x", "after ok:1", "ok:1", "afterok:1,",
                                  "afterok:1,singleton?afterany:2", "1234"])
def test_dependencies_sbatch_cannot_read_are_refused(text):
    with pytest.raises(SpecError, match="invalid --dependency"):
        check_dependency(text)


@pytest.mark.parametrize("text", ["now", "now+1hour", "now+60", "now + 2 days", "16:00", "4:30pm", "4:30 PM",
                                  "noon", "tomorrow", "teatime tomorrow", "0131", "013127", "01/31", "01.31.27",
                                  "01/31/27-20:00", "2026-01-31", "2026-01-31T20:00", "2026-01-31T20:00:05",
                                  "uts1700000000", "midnight", "fika", "elevenses"])
def test_begin_times_in_slurms_syntax_pass(text):
    check_begin(text)


@pytest.mark.parametrize("text, why", [("soon", ""), ("25:00", "hour 25"), ("10:61", "minute 61"),
                                       ("2026-13-01", "month 13"), ("1332", "month 13"), ("02/32", "day 32"),
                                       ("now+1h", ""), ("", ""), ("--", "")])
def test_begin_times_slurm_cannot_read_are_refused(text, why):
    with pytest.raises(SpecError, match=f"invalid --begin.*{why}"):
        check_begin(text)


def test_mail_types_are_sbatchs_events_in_any_case():
    check_mail_type("END,fail,TIME_LIMIT_80")
    with pytest.raises(SpecError, match="unknown event 'NEVER'"):
        check_mail_type("END,NEVER")


def test_gres_other_than_gpus_pass():
    for text in ("nvme:1", "shard:2", "mps:50", "bandwidth:lustre:4G", "nvme,shard:1", "none"):
        check_gres(text)
    with pytest.raises(SpecError, match="is not NAME"):
        check_gres("nvme:1:2:3")


def test_options_of_a_slurm_job_are_refused_for_mpirun(testbed_site):
    with pytest.raises(SpecError, match="--mem is an option of a Slurm job"):
        build_spec(testbed_site, opts(kind="mpirun", ntasks=2, mem="1G"))
    with pytest.raises(SpecError, match="--srun-arg is an option of a Slurm job"):
        build_spec(testbed_site, opts(kind="mpirun", ntasks=2, srun_args=("--label",)))


# ------------------------------------------------------------------ escape hatch

def test_sbatch_args_become_header_lines_quoted_on_the_one_path(testbed_site):
    spec = build_spec(testbed_site, opts(sbatch_args=("--nice", "--licenses=fs:1", "--chdir=/a b", "--gpus=0")))
    h = header(spec)
    assert (h["nice"], h["licenses"], h["chdir"], h["gpus"]) == (True, "fs:1", "/a b", "0")
    text = render.render_sbatch(spec)
    assert "#SBATCH --nice\n" in text and "#SBATCH --chdir='/a b'\n" in text


@pytest.mark.parametrize("arg, message", [
    ("--output=x", "--sbatch-arg=--output=x: slurmtorch sets it: the job folder holds the logs"),
    ("--ntasks-per-node=2", "slurmtorch sets it (the ranks derive their world from it)"),
    ("--array=0-3", "--sbatch-arg=--array=0-3: slurmtorch sets it"),
    ("--part=x", "--sbatch-arg=--part=x: read as --partition; slurmtorch sets it"),
    ("--ntasks-per=2", "read as --ntasks-per-node"),
    ("--mem=1G", "slurmtorch has an option for it"),
    ("--wrap=hostname", "the job is slurmtorch's script"),
    ("--wait", "sbatch would block"),
    ("--test-only", "sbatch would submit nothing"),
    ("--hold", "slurmtorch submits the job held and releases it"),
    ("--cpus-per-gpu=2", "sbatch takes it or --cpus-per-task"),
    ("-p", "expected --OPTION or --OPTION=VALUE"),
    ("--licenses fs:1", "expected --OPTION or --OPTION=VALUE"),
    ("--Hold", "expected --OPTION or --OPTION=VALUE"),
    ("--licenses=a\nb", "contains a newline"),
])
def test_sbatch_args_that_conflict_or_break_the_script_are_refused(testbed_site, arg, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        build_spec(testbed_site, opts(sbatch_args=(arg,)))


def test_an_sbatch_arg_given_twice_is_refused():
    with pytest.raises(SpecError, match="--nice given twice"):
        escape_hatch(("--nice=1", "--nice=2"), "--sbatch-arg", SBATCH_REFUSED, set())


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_srun_args_reach_every_srun_that_starts_ranks(testbed_site, launcher):
    spec = build_spec(testbed_site, opts(nodes=2, launcher=launcher, srun_args=("--label", "--cpu-bind=verbose,cores")))
    assert launchplan.plan(spec).steps[0].options[-2:] == ("--label", "--cpu-bind=verbose,cores")
    text = render.render_sbatch(spec)
    srun = next(ln for ln in text.splitlines() if ln.startswith("srun "))
    assert srun.endswith("--label --cpu-bind=verbose,cores \\")


def test_srun_args_reach_every_roles_step(testbed_site):
    spec = build_spec(testbed_site, opts(roles=("master=1", "worker=2"), srun_args=("--label",)))
    steps = launchplan.plan(spec).steps
    assert len(steps) == 2 and all(step.options[-1] == "--label" for step in steps)


@pytest.mark.parametrize("arg, message", [
    ("--ntasks=2", "slurmtorch sets it (the ranks derive their world from it)"),
    ("--output=x", "the job folder holds the logs"),
    ("--mpi=pmi2", "from the site's srun_mpi"),
    ("--kill-on-bad-exit=0", "a failed rank ends the step at once"),
    ("--export=NONE", "without PATH"),
    ("--multi-prog", "every rank must run slurmtorch's bootstrap"),
    ("--rel=1", "read as --relative"),
    ("-l", "expected --OPTION or --OPTION=VALUE"),
])
def test_srun_args_that_conflict_are_refused(testbed_site, arg, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        build_spec(testbed_site, opts(srun_args=(arg,)))


def test_srun_args_need_an_srun_launcher(testbed_site):
    with pytest.raises(SpecError, match="launcher mpirun starts its ranks without srun"):
        build_spec(testbed_site, opts(launcher="mpirun", srun_args=("--label",)))
