"""build_spec: options checked against preset, partition and node type (pure)."""

from __future__ import annotations

import dataclasses

import pytest

from slurmtorch import resources
from slurmtorch.submit import sites
from slurmtorch.errors import ShellSafetyError, SpecError
from slurmtorch.submit.launch.environment import parse_env
from slurmtorch.options import Options
from slurmtorch.submit.launch.render import render_sbatch
from slurmtorch.submit.sites.model import BATCH_MPIRUN_FLAVOURS
from slurmtorch.submit.launch.spec import build_spec, sbatch_line


def opts(**kw) -> Options:
    base = dict(script="/w/train.py", python="/venv/bin/python", job_root="/h/jobs")
    base.update(kw)
    return Options(**base)


@pytest.fixture(scope="module")
def testbed_site():
    return sites.load_site("testbed")


@pytest.fixture(scope="module")
def hdr():
    return sites.load_site("hdr-ib")


def test_defaults_use_every_gpu_with_one_rank_each(hdr):
    spec = build_spec(hdr, opts(nodes=2))
    assert (spec.gpus_per_node, spec.ntasks_per_node, spec.ntasks, spec.cpus_per_task) == (8, 8, 16, 16)
    assert spec.backend == "nccl" and spec.partition == "gpu"
    assert spec.time == "04:00:00"  # the gpu partition's default_time


@pytest.mark.parametrize("site_name", sorted(p.stem for p in resources.site_configs_dir().glob("*.yaml")))
def test_every_bundled_partition_and_preset_builds_without_a_time_flag(site_name):
    """A default time (preset or partition) never exceeds a partition's max_time; a site that
    requires a time limit (TACC Vista: -t) refuses a job without one, before sbatch."""
    site = sites.load_site(site_name)
    account = "proj0001" if "account" in site.required else None  # a site that requires one refuses jobs without
    if site.mpirun.flavour not in BATCH_MPIRUN_FLAVOURS:  # a site without Slurm (PBS, ALCF Polaris): mpirun only
        with pytest.raises(SpecError, match="for slurmtorch mpirun on hosts without Slurm"):
            build_spec(site, opts(account=account))
        return
    if "time" in site.required:
        with pytest.raises(SpecError, match="requires a time limit"):
            build_spec(site, opts(account=account))
        return
    for partition in site.partitions:
        # In the partition's own form where it asks for one (LUMI: project_N).
        own = "project_465000123" if account and partition.account_pattern else account
        spec = build_spec(site, opts(partition=partition.name, account=own, nodes=partition.min_nodes or 1))
        assert spec.time == partition.default_time
    for name, _ in site.presets:
        build_spec(site, opts(preset=name, account="project_465000123" if account and
                              site.partition(None).account_pattern else account))


def test_hdr_ib_debug_partition_gets_its_own_default_time(hdr):
    assert build_spec(hdr, opts(partition="debug")).time == "00:15:00"
    assert build_spec(hdr, opts(preset="debug")).time == "00:15:00"
    assert build_spec(hdr, opts(partition="h100")).time == "04:00:00"


def test_cpu_nodes_get_one_rank_and_gloo(testbed_site):
    spec = build_spec(testbed_site, opts(nodes=4))
    assert (spec.ntasks_per_node, spec.cpus_per_task, spec.ntasks, spec.backend) == (1, 2, 4, "gloo")
    assert spec.python == "/venv/bin/python"
    assert spec.job_name == "train"


def test_directives_are_sorted_and_complete(testbed_site):
    spec = build_spec(testbed_site, opts(nodes=2, time="30", account="acct", qos="normal", job_name="j"))
    names = [n for n, _ in spec.directives]
    assert names == sorted(names)
    d = dict(spec.directives)
    assert d == {
        "account": "acct", "cpus-per-task": "2", "job-name": "j", "nodes": "2", "ntasks-per-node": "1",
        "output": "/h/jobs/%j/batch.out", "partition": "debug", "qos": "normal", "time": "30",
        "no-requeue": True,  # requeue only when asked for (--requeue/--signal)
    }


def test_percent_in_job_root_is_escaped_for_slurm_patterns(testbed_site):
    spec = build_spec(testbed_site, opts(job_root="/h/100%/jobs"))
    assert dict(spec.directives)["output"] == "/h/100%%/jobs/%j/batch.out"
    assert spec.job_root == "/h/100%/jobs"


def test_a_backslash_in_the_job_root_is_refused_for_batch_jobs(testbed_site):
    with pytest.raises(SpecError) as e:
        build_spec(testbed_site, opts(job_root="/h/a\\b/jobs"))
    assert e.value.message.startswith("job folder root '/h/a\\\\b/jobs' contains a backslash")
    assert "SLURMTORCH_HOME" in e.value.tip
    build_spec(testbed_site, opts(kind="mpirun", ntasks=2, job_root="/h/a\\b/jobs"))  # no Slurm patterns there


def test_env_precedence_fabric_then_site_then_preset_then_user(hdr):
    spec = build_spec(hdr, opts(preset="debug", env=("NCCL_DEBUG=WARN", "NCCL_SOCKET_IFNAME=ib1", "X=a=b")))
    env = dict(spec.env)
    assert env["NCCL_DEBUG"] == "WARN"  # user beats preset's INFO
    assert env["NCCL_SOCKET_IFNAME"] == "ib1"
    assert env["X"] == "a=b"
    keys = [k for k, _ in spec.env]
    assert keys.index("NCCL_IB_HCA") < keys.index("NCCL_DEBUG") < keys.index("X")


def test_preset_supplies_partition_and_nodes(hdr):
    spec = build_spec(hdr, opts(preset="debug"))
    assert (spec.partition, spec.nodes, spec.time, spec.preset) == ("debug", 1, "00:15:00", "debug")


def test_torchrun_gives_one_agent_per_node_with_all_cpus(hdr):
    spec = build_spec(hdr, opts(launcher="torchrun", nodes=2))
    d = dict(spec.directives)
    assert (d["ntasks-per-node"], d["cpus-per-task"], spec.ntasks_per_node) == ("1", "128", 8)


def test_module_instead_of_script(testbed_site):
    spec = build_spec(testbed_site, opts(script=None, module="pkg.train", script_args=("--x",)))
    assert (spec.module, spec.script, spec.job_name) == ("pkg.train", None, "pkg.train")


def test_spec_is_frozen(testbed_site):
    spec = build_spec(testbed_site, opts())
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.nodes = 3


def test_mpirun_kind_needs_n_and_ignores_partition_limits(testbed_site):
    spec = build_spec(testbed_site, opts(kind="mpirun", ntasks=16))
    assert (spec.ntasks, spec.partition, spec.directives) == (16, None, ())
    with pytest.raises(SpecError, match="number of ranks"):
        build_spec(testbed_site, opts(kind="mpirun"))


def test_more_gpus_than_the_node_type_has_says_how_many_it_has_or_that_it_has_none(testbed_site, hdr):
    """Issue 44: on a node type without GPUs the tip read "use --gpus-per-node 0 or less"."""
    with pytest.raises(SpecError) as e:
        build_spec(testbed_site, opts(gpus_per_node=2))
    assert e.value.message == "2 GPUs per node requested, but node type 'cpu' of partition 'debug' has no GPUs"
    assert e.value.tip == "leave --gpus-per-node out, or ask for a partition whose nodes have GPUs (-p PARTITION)"
    with pytest.raises(SpecError) as e:
        build_spec(hdr, opts(gpus_per_node=9))
    assert e.value.message == "9 GPUs per node requested, but node type 'a100' of partition 'gpu' has 8"
    assert e.value.tip == "use --gpus-per-node 8 or fewer, or another partition"


@pytest.mark.parametrize(
    "kw, message, tip",
    [
        (dict(preset="big"), "unknown preset 'big'", "valid presets: 'smoke'"),
        (dict(partition="debg"), "unknown partition 'debg'", "did you mean 'debug'?"),
        (dict(nodes=5), "5 nodes requested, but partition 'debug' allows at most 4", "--nodes 4"),
        (dict(nodes=0), "--nodes must be at least 1", None),
        (dict(time="1-00:00:01"), "exceeds the maximum 1-00:00:00 of partition 'debug'", "--time 1-00:00:00"),
        (dict(time="2h"), "invalid --time '2h'", "D-HH:MM:SS"),
        (dict(gpus_per_node=1), "1 GPUs per node requested, but node type 'cpu'", "leave --gpus-per-node out"),
        (dict(ntasks_per_node=2, cpus_per_task=2), "exceeds the 2 CPUs", "--cpus-per-task 1"),
        (dict(env=("NOEQUALS",)), "malformed --env 'NOEQUALS': expected NAME=VALUE", "NCCL_DEBUG=INFO"),
        (dict(env=("1X=y",)), "invalid environment variable name '1X'", None),
        (dict(env=("A B=y",)), "invalid environment variable name 'A B'", None),
        (dict(job_name="a\nb"), "contains a newline", None),
        (dict(account="x\r"), "contains a newline", None),
        (dict(module="pkg.train"), "exactly one of SCRIPT or -m MODULE", None),
        (dict(script=None), "exactly one of SCRIPT or -m MODULE", None),
        (dict(script=None, module="pkg/train"), "invalid module name", None),
        (dict(backend="nccl2"), "unknown backend 'nccl2'", "auto, nccl, gloo, mpi"),
        (dict(launcher="ssh"), "unknown launcher 'ssh'", None),
        (dict(timeout=0), "--timeout must be at least 1", None),
    ],
)
def test_bad_options_raise_spec_error_with_a_tip(testbed_site, kw, message, tip):
    with pytest.raises(SpecError) as e:
        build_spec(testbed_site, opts(**kw))
    assert message in e.value.message
    assert "\n" not in e.value.message
    if tip:
        assert tip in e.value.tip


@pytest.mark.parametrize("name", ["SLURM_EXPORT_ENV", "SLURMTORCH_JOB_DIR", "MASTER_PORT", "MASTER_ADDR",
                                  "SLURMTORCH_ROLES", "SLURMTORCH_TRIAL", "SLURMTORCH_PARAMS", "SLURMTORCH_SWEEP_LR",
                                  "SLURMTORCH_PREEMPT_SIGNAL"])
def test_env_refuses_names_the_batch_script_sets_itself(testbed_site, name):
    with pytest.raises(SpecError) as e:
        build_spec(testbed_site, opts(env=(f"{name}=x",)))
    assert e.value.message == f"--env {name}: the batch script sets {name} itself" and e.value.tip
    assert build_spec(testbed_site, opts(env=("MASTER_PORTS=1", "SLURM_CPU_BIND=none"))).env[-2:] == (
        ("MASTER_PORTS", "1"), ("SLURM_CPU_BIND", "none"))


@pytest.mark.parametrize("item, refused", [
    ("BASH_ENV=/home/me/hook.sh", "every non-interactive bash the job starts"),
    ("ENV=/home/me/hook.sh", "an interactive sh (dash, or bash started as sh) would first run the file it names"),
    ("SHELLOPTS=xtrace", "every bash the job starts would take these options"),
    ("BASHOPTS=extdebug", "every bash the job starts would take these shopt options"),
    ("PS4=$(id)", "running any $(...) in it"),
    ("PROMPT_COMMAND=id", "would run it before every prompt"),
    ("CDPATH=/tmp", "a relative cd in any of the job's shells could land in another folder"),
    ("LD_PRELOAD=/tmp/x.so", "the loader would run the libraries it names inside srun, mpirun and bash"),
    ("LD_AUDIT=/tmp/x.so", "the loader would run the audit libraries it names"),
    ("BASH_FUNC_srun%%=() { id; }", "invalid environment variable name 'BASH_FUNC_srun%%'"),
    ("LD_LIBRARY_PATH=/opt/nccl-plugin/lib", None),
    ("IFS=:", None),
    ("GLOBIGNORE=*.tmp", None),
    ("BASH_FUNC_srun=() { id; }", None),  # bash imports only BASH_FUNC_name%%: an ordinary string
    ("PYTHONPATH=/home/me/src", None),
])
@pytest.mark.parametrize("kind", ["sbatch", "mpirun"])
def test_env_refuses_what_makes_a_shell_or_the_loader_run_code(item, refused, kind):
    """Each such variable is exported before the launch line: it would act on srun, mpirun and
    every shell of the job, not only the ranks. Each is refused with its reason."""
    if refused is None:
        assert parse_env([item], batch=kind == "sbatch") == [tuple(item.split("=", 1))]
        return
    with pytest.raises(SpecError) as e:
        parse_env([item], batch=kind == "sbatch")
    assert refused in e.value.message and "\n" not in e.value.message and e.value.tip


def test_mpirun_kind_keeps_a_users_master_addr_and_port(testbed_site):
    """`slurmtorch mpirun` (and Distributor's local mode) write no such variables."""
    spec = build_spec(testbed_site, opts(kind="mpirun", ntasks=2, env=("MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500")))
    assert dict(spec.env)["MASTER_ADDR"] == "127.0.0.1" and dict(spec.env)["MASTER_PORT"] == "29500"


@pytest.mark.parametrize("kw, what", [
    (dict(script="/w/caf\udce9.py"), "SCRIPT path '/w/caf\\udce9.py'"),
    (dict(script_args=("a", "\udcff")), "script argument 2 '\\udcff'"),
    (dict(sweep=("lr=1,\udcff",)), "--sweep lr value '\\udcff'"),
    (dict(account="\ud800"), "#SBATCH --account value '\\ud800'"),
])
def test_text_that_is_not_utf8_is_refused_naming_the_value(testbed_site, kw, what):
    """A lone surrogate (a non-UTF-8 byte from argv or a file name) could not be written."""
    with pytest.raises(ShellSafetyError) as e:
        build_spec(testbed_site, opts(**kw))
    assert e.value.message.startswith(f"{what} is not UTF-8 text"), e.value.message
    assert e.value.tip


def test_parse_env_keeps_everything_after_the_first_equals():
    assert parse_env(["A=", "B=x=y", "C=a b\nc"]) == [("A", ""), ("B", "x=y"), ("C", "a b\nc")]
    with pytest.raises(ShellSafetyError):
        parse_env(["A=\x00"])


def test_build_spec_is_deterministic(hdr):
    o = opts(nodes=2, env=("B=1", "A=2"))
    assert build_spec(hdr, o) == build_spec(hdr, o)


def test_an_sbatch_line_is_checked_and_quoted_once_in_the_spec_and_rendered_as_it_is(hdr):
    assert sbatch_line("exclusive", True) == "#SBATCH --exclusive"
    assert sbatch_line("comment", "a b\\c") == "#SBATCH --comment='a b\\\\c'"
    with pytest.raises(SpecError, match="invalid #SBATCH option name 'Bad name'"):
        sbatch_line("Bad name", "x")
    with pytest.raises(ShellSafetyError, match="#SBATCH --comment value"):
        sbatch_line("comment", "a\nb")
    spec = build_spec(hdr, opts())
    assert spec.sbatch_lines == tuple(sbatch_line(n, v) for n, v in spec.directives)
    lines = render_sbatch(spec).splitlines()
    assert [ln for ln in lines if ln.startswith("#SBATCH")] == list(spec.sbatch_lines)
