"""Roles (CLUSTER_SPEC/TF_CONFIG per role), sweeps/arrays and containers: pure parts and goldens,
then role jobs and sweeps on the real 4-node Slurm testbed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtorch.submit.launch import launchplan, render
from slurmtorch.submit import sites
from slurmtorch.bootstrap.contracts import env_for
from slurmtorch.errors import BootstrapError, SlurmtorchError, SpecError
from slurmtorch.bootstrap.fromenv import from_roles, from_slurm
from slurmtorch.roles import parse_roles
from slurmtorch.submit.launch.spec import build_spec
from slurmtorch.submit.launch.sweeps import parse_array, parse_sweep, sweep_args, sweep_grid

from helpers import as_run, st
from test_render import bash_syntax_ok, check_golden, golden_options

NODES = "node[1-4]"


def role_env(procid, **kw):
    env = {"SLURM_JOB_NODELIST": NODES, "SLURM_PROCID": str(procid), "MASTER_PORT": "29500",
           "SLURMTORCH_ROLES": "master=1,worker=2,ps=1"}
    env.update(kw)
    return env


# ------------------------------------------------------------------ roles (pure)

def test_roles_are_ordered_leader_workers_ps_evaluator_whatever_the_flag_order():
    layout = parse_roles(["ps=2", "evaluator=1", "worker=3", "master=1"])
    assert layout.roles == (("master", 1), ("worker", 3), ("ps", 2), ("evaluator", 1))
    assert (layout.total, layout.training, layout.offset("ps"), layout.role_of(5)) == (7, 4, 4, ("ps", 1))


@pytest.mark.parametrize("items, message", [
    (["worker=2"], "exactly one of master=1 or chief=1"),
    (["master=1", "chief=1"], "not both"),
    (["master=2"], "exactly one master"),
    (["master=1", "boss=1"], "unknown role 'boss'"),
    (["master=1", "worker"], "expected ROLE=COUNT"),
    (["master=1", "worker=x"], "whole number"),
    (["master=1", "worker=1", "worker=2"], "given twice"),
])
def test_malformed_roles_are_refused_with_the_reason(items, message):
    with pytest.raises(BootstrapError, match=message):
        parse_roles(items)


def test_every_rank_of_a_role_job_sees_every_role_and_its_own_task():
    master = env_for(from_roles(role_env(0), "node1", "master"))
    worker1 = env_for(from_roles(role_env(1, SLURMD_NODENAME="node3"), "node3", "worker"))
    ps = env_for(from_roles(role_env(0), "node4", "ps"))
    cluster = {"master": ["node1:29500"], "worker": ["node2:29501", "node3:29502"], "ps": ["node4:29503"]}
    for env in (master, worker1, ps):
        assert json.loads(env["CLUSTER_SPEC"])["cluster"] == cluster
        tf = json.loads(env["TF_CONFIG"])["cluster"]
        assert tf == {"chief": cluster["master"], "worker": cluster["worker"], "ps": cluster["ps"]}
    assert json.loads(worker1["CLUSTER_SPEC"])["task"] == {"type": "worker", "index": 1}
    assert json.loads(master["TF_CONFIG"])["task"] == {"type": "chief", "index": 0}
    assert (worker1["RANK"], worker1["WORLD_SIZE"], worker1["NODE_RANK"]) == ("2", "3", "2")
    assert json.loads(ps["CLUSTER_SPEC"])["task"] == {"type": "ps", "index": 0}


def test_parameter_servers_know_the_master_but_have_no_rank_in_the_torch_world():
    info = from_roles(role_env(0), "node4", "ps")
    env = env_for(info)
    assert not info.in_group
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["WORLD_SIZE"]) == ("node1", "29500", "3")
    assert "RANK" not in env and "LOCAL_RANK" not in env
    assert (env["SLURMTORCH_ROLE"], env["SLURMTORCH_ROLE_INDEX"]) == ("ps", "0")


def test_chief_role_is_named_chief_in_cluster_spec_and_evaluator_stays_out_of_tf_config():
    env = role_env(0, SLURMTORCH_ROLES="chief=1,worker=1,evaluator=1", SLURM_ARRAY_TASK_ID="7")
    spec_env = env_for(from_roles(env, "node3", "evaluator"))
    spec, tf = json.loads(spec_env["CLUSTER_SPEC"]), json.loads(spec_env["TF_CONFIG"])
    assert spec["cluster"] == {"chief": ["node1:29500"], "worker": ["node2:29501"], "evaluator": ["node3:29502"]}
    assert spec["task"] == {"type": "evaluator", "index": 0, "trial": "7"}
    assert "evaluator" not in tf["cluster"] and tf["task"]["type"] == "evaluator"


def test_a_role_rank_on_the_wrong_node_or_past_its_role_is_an_error():
    with pytest.raises(BootstrapError, match="should run on node2"):
        from_roles(role_env(0, SLURMD_NODENAME="node4"), "node4", "worker")
    with pytest.raises(BootstrapError, match="the role has 1 tasks"):
        from_roles(role_env(1), "node4", "ps")
    with pytest.raises(BootstrapError, match="needs 4 nodes, the job has 2"):
        from_roles(role_env(0, SLURM_JOB_NODELIST="node[1-2]"), "node1", "master")
    with pytest.raises(BootstrapError, match="SLURMTORCH_ROLES is missing"):
        from_roles({"SLURM_JOB_NODELIST": NODES, "SLURM_PROCID": "0"}, "node1", "master")


def test_a_roles_tasks_per_node_are_consecutive_ranks_on_each_of_its_nodes():
    layout = parse_roles("master=1,worker=2:tasks=4,ps=1")
    assert (layout.nodes, layout.total, layout.training, layout.training_nodes) == (4, 10, 9, 3)
    assert (layout.offset("worker"), layout.node_offset("ps"), layout.offset("ps")) == (1, 3, 9)
    assert layout.rank_hosts(["n1", "n2", "n3", "n4"]) == ("n1", *["n2"] * 4, *["n3"] * 4, "n4")
    assert (layout.role_of(6), layout.node_of(6)) == (("worker", 5), 2)
    assert parse_roles(layout.format()) == layout  # SLURMTORCH_ROLES and job.json carry the tasks
    with pytest.raises(BootstrapError, match="tasks must be a whole number of tasks per node, at least 1"):
        parse_roles("master=1,worker=2:tasks=0")


def test_a_rank_of_a_role_with_several_tasks_a_node_knows_its_node_and_local_rank():
    env = role_env(5, SLURMTORCH_ROLES="master=1:tasks=2,worker=2:tasks=4,ps=1", SLURMD_NODENAME="node3")
    info = from_roles(env, "node3", "worker")
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (7, 10, 1, 4)
    assert (info.node_rank, info.num_nodes, info.nodes) == (2, 3, ("node1", "node2", "node3"))
    got = env_for(info)
    # A replica is a node: CLUSTER_SPEC lists each node once, at its first rank's nominal port.
    cluster = json.loads(got["CLUSTER_SPEC"])
    assert cluster["cluster"] == {"master": ["node1:29500"], "worker": ["node2:29502", "node3:29506"],
                                  "ps": ["node4:29510"]}
    assert cluster["task"] == {"type": "worker", "index": 1} and got["SLURMTORCH_ROLE_INDEX"] == "5"
    ps = from_roles(role_env(0, SLURMTORCH_ROLES="master=1:tasks=2,worker=2:tasks=4,ps=1"), "node4", "ps")
    assert (ps.rank, ps.world_size, env_for(ps)["WORLD_SIZE"]) == (10, 11, "10")


def test_one_task_per_node_knows_every_host_even_under_sbatchs_default_cyclic_distribution():
    env = {"SLURM_JOB_ID": "42", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
           "SLURM_NODEID": "1", "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
           "SLURM_DISTRIBUTION": "cyclic"}
    info = from_slurm(env, "node2")
    assert info.rank_hosts == ("node1", "node2") and "CLUSTER_SPEC" in env_for(info)


# ------------------------------------------------------------------ sweeps and arrays (pure)

def test_sweep_grid_is_the_product_with_the_last_parameter_fastest():
    grid = sweep_grid(parse_sweep(["lr=1e-3,1e-4", "bs=32,64"]))
    assert grid == [(("lr", "1e-3"), ("bs", "32")), (("lr", "1e-3"), ("bs", "64")),
                    (("lr", "1e-4"), ("bs", "32")), (("lr", "1e-4"), ("bs", "64"))]
    assert sweep_args(grid[2]) == ["--lr", "1e-4", "--bs", "32"]


@pytest.mark.parametrize("text, grid, expected", [
    ("0-19%4", None, ("0-19%4", tuple(range(20)))),
    ("1,3,5-9:2", None, ("1,3,5-9:2", (1, 3, 5, 7, 9))),
    ("%2", 4, ("0-3%2", (0, 1, 2, 3))),
    ("0-1", 4, ("0-1", (0, 1))),
])
def test_array_indices_expand(text, grid, expected):
    assert parse_array(text, grid) == expected


@pytest.mark.parametrize("text, grid, message", [
    ("", None, "malformed"), ("0-", None, "malformed"), ("a", None, "malformed"), ("3-1", None, "empty"),
    ("%0", 4, "never run"), ("%2", None, "names no indices"), ("0-4", 4, "has 4 trials"),
    ("0-5000", None, "exceeds"), ("0;rm -rf /", None, "malformed"),
])
def test_malformed_arrays_are_refused(text, grid, message):
    with pytest.raises(SpecError, match=message):
        parse_array(text, grid)


def test_array_bounds_are_checked_before_the_indices_are_expanded():
    # `--array 0-3000000 --dry-run` used 302 MB expanding every index before the bound was
    # checked (and 0-99999999 ran for over a minute): the bound comes first, named.
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(SpecError, match=r"index 3000000 exceeds MaxArraySize.*1001"):
            parse_array("0-3000000")
        with pytest.raises(SpecError, match=r"index 99999999 exceeds"):
            parse_array("0-99999999%4")
        with pytest.raises(SpecError, match="exceeds"):
            parse_array("0-99999999:1000")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


def test_a_sweep_grid_past_the_array_limit_is_refused_before_it_is_built():
    from slurmtorch.options import Options
    from slurmtorch.submit.launch.sweeps import plan_array

    values = ",".join(str(v) for v in range(100))
    o = Options(kind="sbatch", sweep=(f"a={values}", f"b={values}", f"c={values}"))
    with pytest.raises(SpecError, match=r"1000000 trials.*MaxArraySize"):
        plan_array(o)


def test_a_site_with_a_larger_max_array_size_takes_arrays_up_to_it_and_says_so_past_it(tmp_path):
    """Slurm's MaxArraySize is the cluster's (slurm.conf(5): default 1001, at most 4000001):
    a site that raised it says so in max_array_size, and the limit is its own."""
    from slurmtorch.options import Options

    (tmp_path / "big.yaml").write_text("extends: testbed\nmax_array_size: 10001\n")
    big = sites.load_site(str(tmp_path / "big.yaml"))
    assert build_spec(big, Options(kind="sbatch", script="/x/train.py", array="0-10000%8")).array == "0-10000%8"
    with pytest.raises(SpecError, match=r"index 10001 exceeds MaxArraySize 10001 \(indices 0\.\.10000\)") as e:
        build_spec(big, Options(kind="sbatch", script="/x/train.py", array="0-10001"))
    assert "jobs of at most 10001 tasks" in (e.value.tip or "")
    with pytest.raises(SpecError, match="index 1001 exceeds MaxArraySize 1001"):  # the default, Slurm's
        build_spec(sites.load_site("testbed"), Options(kind="sbatch", script="/x/train.py", array="0-1001"))
    (tmp_path / "past.yaml").write_text("extends: testbed\nmax_array_size: 4000002\n")
    with pytest.raises(SlurmtorchError, match="past Slurm's own limit on MaxArraySize"):
        sites.load_site(str(tmp_path / "past.yaml"))


@pytest.mark.parametrize("asked", [dict(array="0-3"), dict(array="%2", sweep=("lr=1,2",)), dict(sweep=("lr=1",))])
def test_a_cluster_without_job_arrays_says_so_for_array_and_sweep(tmp_path, asked):
    """Issue 44: `max_array_size: 0` (Slurm's MaxArraySize=0: no job arrays) with `--array 0-3`
    said "--sweep is a grid of 1 trials", of a sweep never asked for."""
    from slurmtorch.options import Options

    (tmp_path / "none.yaml").write_text("extends: testbed\nmax_array_size: 0\n")
    with pytest.raises(SpecError) as e:
        build_spec(sites.load_site(str(tmp_path / "none.yaml")), Options(kind="sbatch", script="/x/t.py", **asked))
    assert e.value.message == ("the site's cluster runs no job arrays (its max_array_size: 0, as MaxArraySize=0 "
                               "turns them off), so no --array or --sweep"), e.value.message
    assert "separate jobs" in (e.value.tip or "")
    (tmp_path / "below.yaml").write_text("extends: testbed\nmax_array_size: -1\n")
    with pytest.raises(SlurmtorchError, match="max_array_size"):
        sites.load_site(str(tmp_path / "below.yaml"))


@pytest.mark.parametrize("items, message", [
    (["lr"], "malformed"), (["=1"], "malformed"), (["l r=1"], "malformed"), (["lr=1,,2"], "empty value"),
    (["lr=1,1"], "repeats"), (["lr=1", "lr=2"], "twice"), (["a-b=1", "a_b=2"], "twice"),
])
def test_malformed_sweeps_are_refused(items, message):
    with pytest.raises(SpecError, match=message):
        parse_sweep(items)


ODD = ["a b", "it's", "$(touch /tmp/pwned-sweep)", "`id`", "x\ny", "*", "é"]


def test_sweep_values_reach_the_script_exactly_through_a_real_bash(tmp_path):
    site = sites.load_site("testbed")
    spec = build_spec(site, golden_options("testbed", nodes=2, sweep=("p=" + ",".join(ODD),)))
    text = render.render_sbatch(spec)
    bash_syntax_ok(text)
    block = text[text.index('case "$SLURMTORCH_TRIAL"'):text.index("esac") + 4]
    for trial, value in enumerate(ODD):
        code = (f"SLURMTORCH_TRIAL={trial}\n{block}\n"
                "printf '%s\\0' \"${sweep_args[@]}\" \"$SLURMTORCH_SWEEP_P\" \"$SLURMTORCH_PARAMS\"")
        out = subprocess.run(["bash", "-c", code], capture_output=True, check=True, cwd=tmp_path)
        assert out.stdout.decode().split("\0")[:-1] == ["--p", value, value, json.dumps({"p": value},
                                                                                     ensure_ascii=False,
                                                                                     separators=(",", ":"))]
    assert not os.path.exists("/tmp/pwned-sweep")


def test_array_jobs_write_each_trial_into_its_own_folder():
    site = sites.load_site("testbed")
    text = render.render_sbatch(build_spec(site, golden_options("testbed", array="0-19%4")))
    assert "#SBATCH --array=0-19%4" in text
    assert "#SBATCH --output=/home/user/.slurmtorch/jobs/%A/trial-%a/batch.out" in text
    assert "--output=/home/user/.slurmtorch/jobs/%A/trial-%a/rank-%t.out" in text
    assert 'SLURMTORCH_JOB_DIR=/home/user/.slurmtorch/jobs/"$SLURM_ARRAY_JOB_ID"/trial-"$SLURM_ARRAY_TASK_ID"' in text


# ------------------------------------------------------------------ spec checks

@pytest.mark.parametrize("kw, message", [
    (dict(roles=("master=1", "worker=4")), "need 5 nodes, but partition 'debug' allows at most 4"),
    (dict(roles=("master=1", "worker=1"), nodes=3), "roles add up to 2"),
    (dict(roles=("master=1",), launcher="torchrun"), "one srun step per role"),
    (dict(roles=("master=1",), ntasks=2), "-n/--ntasks cannot apply"),
    (dict(role_images=("ps=img",)), "--role-image needs --role"),
    (dict(roles=("master=1",), role_images=("ps=img",)), "no ps role"),
    (dict(roles=("master=1",), role_images=("ps",)), "expected ROLE=IMAGE"),
    (dict(container_image="img", container_runtime="docker"), "unknown --container-runtime"),
    (dict(container_image="img", launcher="mpirun"), "pyxis containers start under srun, not mpirun"),
])
def test_impossible_role_and_container_requests_are_refused(kw, message):
    with pytest.raises(SpecError, match=message):
        build_spec(sites.load_site("testbed"), golden_options("testbed", **kw))


# ------------------------------------------------------------------ goldens: roles and containers

ROLES = ("master=1", "worker=2", "ps=1")


@pytest.mark.parametrize("name, kw", [
    ("roles-testbed", dict(roles=ROLES)),
    ("roles-pyxis", dict(roles=ROLES, container_image="nvcr.io#nvidia/pytorch:24.01-py3",
                         role_images=("ps=registry.example/ps image:1",))),
    ("roles-apptainer", dict(roles=ROLES, container_image="/images/train.sif", container_runtime="apptainer",
                             role_images=("ps=/images/ps.sif",))),
    ("sweep-testbed", dict(nodes=2, sweep=("lr=1e-3,1e-4", "bs=32,64"), array="%2")),
    ("sweep-roles-testbed", dict(roles=ROLES, sweep=("lr=1e-3,1e-4",))),
    # A sweep's trial arguments reach every role's step through launch's "$@".
    ("sweep-roles-restarts-testbed", dict(roles=("master=1", "worker=1:spare=1"), sweep=("lr=1e-3,1e-4",),
                                          max_restarts=2, spare_nodes=1)),
])
def test_role_sweep_and_container_scripts_match_golden(name, kw):
    spec = build_spec(sites.load_site("testbed"), golden_options("testbed", **kw))
    text = render.render_sbatch(spec)
    bash_syntax_ok(text)
    check_golden(f"sbatch-{name}.sh", text)


def test_site_container_roles_pick_per_role_images_with_gpus(tmp_path):
    site_file = tmp_path / "gpu.yaml"
    site_file.write_text(
        "container:\n  runtime: apptainer\n  image: /img/base.sif\n  mounts: [/data:/data]\n"
        "  roles:\n    ps: /img/ps.sif\n"
        "node_types:\n  g:\n    gpus: 1\n    cpus: 8\n    fabric: ethernet\n"
        "partitions:\n  p:\n    max_nodes: 8\n    max_time: '1:00:00'\n    node_type: g\n    default: true\n")
    site = sites.load_site(str(site_file))
    spec = build_spec(site, golden_options("gpu", roles=("chief=1", "worker=1", "ps=1")))
    steps = {s.name.split()[1]: s.argv[6:] for s in launchplan.plan(spec).steps}  # after the log wrapper
    home = ("--bind", "/home/user:/home/user")  # the jobs folder and the script's, at their own paths
    assert steps["chief"][:8] == ("apptainer", "exec", "--nv", *home, "--bind", "/data:/data", "/img/base.sif")
    assert steps["ps"][:8] == ("apptainer", "exec", "--nv", *home, "--bind", "/data:/data", "/img/ps.sif")
    assert "--nv" not in render.render_sbatch(build_spec(site, golden_options("gpu", roles=("chief=1",), gpus_per_node=0))) \
        .split("apptainer exec", 1)[1].split("\n", 1)[0]


def test_site_container_roles_must_name_known_roles(tmp_path):
    from slurmtorch.errors import SiteError

    site_file = tmp_path / "bad.yaml"
    site_file.write_text(
        "container:\n  runtime: pyxis\n  image: base\n  roles:\n    boss: x\n"
        "node_types:\n  g:\n    gpus: 0\n    cpus: 8\n    fabric: ethernet\n"
        "partitions:\n  p:\n    max_nodes: 8\n    max_time: '1:00:00'\n    node_type: g\n    default: true\n")
    with pytest.raises(SiteError, match="unknown role 'boss'"):
        sites.load_site(str(site_file))


# ------------------------------------------------------------------ CLI: bad input, no folder

@pytest.mark.parametrize("args, message", [
    (["--role", "worker=2"], "error: a role job needs exactly one of master=1 or chief=1"),
    (["--role", "master=1", "--role", "worker=9"], "error: roles master=1,worker=9 need 10 nodes"),
    (["--sweep", "lr"], "error: malformed --sweep 'lr'"),
    (["--array", "0-3%x"], "error: malformed --array '0-3%x'"),
    (["--sweep", "lr=1,2", "--array", "0-5"], "error: --array '0-5': the sweep has 2 trials"),
])
def test_bad_role_sweep_array_input_is_one_error_line_and_no_job_folder(tmp_path, args, message):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    env = dict(os.environ, SLURMTORCH_HOME=str(tmp_path / "home"))
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed", *args,
                           str(script)], capture_output=True, text=True, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[0].startswith(message), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "home").exists()


# ------------------------------------------------------------------ the role wait loop (real bash, stand-in srun)

FAKE_SRUN = """#!/bin/bash
# Stand-in for srun in a unit test of the batch script's wait loop: runs $FAKE_<ROLE>.
role=; prev=
for a in "$@"; do [ "$prev" = --role ] && role=$a; prev=$a; done
var=FAKE_${role^^}
eval "${!var}"
"""


def run_role_script(tmp_path, grace=None, **behaviour):
    """Render a master=1,worker=2,ps=1 job, then run the whole script in bash with `srun`
    replaced by a stand-in whose per-role behaviour is a shell snippet. Returns
    (exit status, stderr, seconds, exit-code file)."""
    import time

    # This machine has no ib0 (the testbed's fabric): the script finds MASTER_ADDR on lo here.
    spec = build_spec(sites.load_site("testbed"), golden_options(
        "testbed", roles=ROLES, python=sys.executable, job_root=str(tmp_path / "jobs"),
        env=("GLOO_SOCKET_IFNAME=lo", "NCCL_SOCKET_IFNAME==lo")))
    text = as_run(spec)
    if grace is not None:
        assert "\nsettle 30\n" in text
        text = text.replace("\nsettle 30\n", f"\nsettle {grace}\n")
    (tmp_path / "jobs" / "7").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text(FAKE_SRUN)
    (tmp_path / "bin" / "srun").chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", SLURM_JOB_ID="7",
               **{f"FAKE_{role.upper()}": snippet for role, snippet in behaviour.items()})
    start = time.monotonic()
    # Output to a file, not a pipe: a stand-in left behind (as a task that ignores TERM
    # would be, until Slurm ends the job) must not hold the test until it exits.
    with open(tmp_path / "batch.out", "w") as out:
        proc = subprocess.run(["bash", "-c", text], env=env, stdout=out, stderr=out, timeout=60)
    took = time.monotonic() - start
    return (proc.returncode, (tmp_path / "batch.out").read_text(), took,
            (tmp_path / "jobs" / "7" / "exit-code").read_text())


def test_role_wait_loop_a_failing_worker_stops_the_master_at_once(tmp_path):
    rc, err, took, code = run_role_script(tmp_path, master="exec sleep 30", worker="sleep 0.3; exit 3",
                                          ps="exec sleep 30")
    assert (rc, code) == (3, "3\n")
    assert "slurmtorch: role worker exited with 3; stopping the other steps" in err
    assert took < 10, took


def test_role_wait_loop_a_failing_parameter_server_stops_training(tmp_path):
    rc, err, took, code = run_role_script(tmp_path, master="exec sleep 30", worker="exec sleep 30",
                                          ps="sleep 0.3; exit 5")
    assert (rc, code) == (5, "5\n") and "role ps exited with 5" in err and took < 10


def test_role_wait_loop_ends_when_training_succeeds_and_stops_the_parameter_server(tmp_path):
    # The master's task 0 leaves SLURMTORCH_STARTED, as its bootstrap would.
    rc, err, took, code = run_role_script(tmp_path, master='sleep 1; : >"$SLURMTORCH_STARTED"; exit 0',
                                          worker="exit 0", ps="exec sleep 30")
    assert (rc, code) == (0, "0\n") and "stopping" not in err
    assert 1 <= took < 10, took
    assert not list((tmp_path / "jobs" / "7").glob(".started-*"))


def test_role_job_whose_steps_exit_0_without_starting_a_rank_fails(tmp_path):
    """srun exits 0 when its step never launched; no task 0 left SLURMTORCH_STARTED."""
    rc, err, _, code = run_role_script(tmp_path, master="exit 0", worker="exit 0", ps="exit 0")
    assert (rc, code) == (1, "1\n")
    assert "slurmtorch: error: srun exited 0 but no rank started" in err


def test_role_wait_loop_does_not_wait_forever_for_a_step_that_ignores_term(tmp_path):
    rc, err, took, code = run_role_script(tmp_path, grace=1, master="sleep 0.3; exit 4",
                                          worker="trap '' TERM; sleep 8", ps="exec sleep 30")
    assert (rc, code) == (4, "4\n") and "role master exited with 4" in err
    assert took < 6, took


# ------------------------------------------------------------------ on the testbed
# Role jobs and sweeps on the real 4-node Slurm testbed (real sbatch/srun, real gloo).


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def test_a_role_with_two_tasks_a_node_joins_the_master_in_one_world(testbed, tmp_path):
    """Issue 38: a role's own tasks per node (`worker=1:tasks=2`: a component of its own)."""
    home = tmp_path / "home"
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "--role", "master=1", "--role", "worker=1:tasks=2",
                              "--role", "ps=1", "--wait", str(SCRIPTS / "role_probe.py")], timeout=120)
    assert proc.returncode == 0, proc.stderr
    folder = home / "jobs" / proc.stdout.splitlines()[0]
    ranks = [json.loads((folder / f"rank-{r}.out").read_text()) for r in range(4)]
    assert [(r["RANK"], r["LOCAL_RANK"], r["LOCAL_WORLD_SIZE"], r["NODE_RANK"]) for r in ranks[:3]] == [
        ("0", "0", "1", "0"), ("1", "0", "2", "1"), ("2", "1", "2", "1")]
    assert ranks[1]["host"] == ranks[2]["host"] != ranks[0]["host"]
    assert all(r["all_reduce"] == 6 and r["group_size"] == 3 for r in ranks[:3])
    worker = ranks[2]["cluster_spec"]
    assert len(worker["cluster"]["worker"]) == 1 and worker["task"] == {"type": "worker", "index": 0}
    assert ranks[3]["SLURMTORCH_ROLE"] == "ps" and ranks[3]["in_group"] is False


@pytest.mark.slurm_versions
def test_role_job_gives_every_rank_the_cluster_and_only_training_ranks_all_reduce(testbed, tmp_path):
    home = tmp_path / "home"
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "--role", "master=1", "--role", "worker=2",
                              "--role", "ps=1", "--wait", str(SCRIPTS / "role_probe.py")], timeout=120)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.splitlines()[0]
    folder = home / "jobs" / job_id
    ranks = [json.loads((folder / f"rank-{r}.out").read_text()) for r in range(4)]
    port = int(ranks[0]["MASTER_PORT"])
    # The master (rank 0, whose store the others reach) at node1's address on the site's
    # interface (ib0, the testbed's fabric: node1's host name resolves to eth0); the others by name.
    master = "198.18.0.139"
    cluster = {"master": [f"{master}:{port}"], "worker": [f"node2:{port + 1}", f"node3:{port + 2}"],
               "ps": [f"node4:{port + 3}"]}
    for r, (rank, role, index) in enumerate([(0, "master", 0), (1, "worker", 0), (2, "worker", 1), (3, "ps", 0)]):
        got = ranks[r]
        assert got["host"] == f"node{r + 1}"
        assert got["cluster_spec"] == {"cluster": cluster, "task": {"type": role, "index": index}}
        tf_role = "chief" if role == "master" else role
        assert got["tf_config"]["task"] == {"type": tf_role, "index": index}
        assert got["tf_config"]["cluster"]["chief"] == cluster["master"]
        assert (got["MASTER_ADDR"], got["WORLD_SIZE"]) == (master, "3")
    for r in range(3):
        assert ranks[r]["in_group"] and ranks[r]["group_size"] == 3 and ranks[r]["all_reduce"] == 6
        assert ranks[r]["RANK"] == str(r)
    assert ranks[3]["in_group"] is False and ranks[3]["RANK"] is None


@pytest.mark.slurm_versions
def test_sweep_runs_a_2x2_grid_of_two_node_jobs_as_one_array(testbed, tmp_path):
    home = tmp_path / "home"
    argv = ["sbatch", "--site", "testbed", "-N", "2", "--sweep", "lr=1e-3,it's $x", "--sweep", "bs=32,64",
            "--array", "%2", "--env", "FAIL_TRIAL=3", "--wait", str(SCRIPTS / "sweep_probe.py"), "--fixed", "1"]
    proc = st(testbed, home, argv, timeout=120)
    assert proc.returncode == 1, proc.stderr  # trial 3 fails on purpose
    job_id = proc.stdout.splitlines()[0]
    assert "job %s: 3 of 4 trials succeeded; failed: 3" % job_id in proc.stderr
    said = proc.stderr.splitlines()  # the sweep's table, before that line
    head = next(i for i, line in enumerate(said) if line.startswith("TRIAL "))
    assert said[head].split() == ["TRIAL", "PARAMS", "STATE", "EXIT", "ELAPSED", "LAST", "LINE"]
    rows = said[head + 1:head + 5]
    assert [r.split()[0] for r in rows] == ["0", "1", "2", "3"], said
    assert "lr=1e-3,bs=32 " in rows[0] and " COMPLETED " in rows[0] and " FAILED " in rows[3], said
    folder = home / "jobs" / job_id
    token = (folder / "run-token").read_text().strip()
    grid = [("1e-3", "32"), ("1e-3", "64"), ("it's $x", "32"), ("it's $x", "64")]
    for trial, (lr, bs) in enumerate(grid):
        for rank in range(2):
            got = json.loads((folder / f"trial-{trial}" / f"rank-{rank}.out").read_text())
            # Each trial is its own run (docs/users-guide.md#one-run-across-restarts), each rank its own wandb run.
            assert got["run_id"] == f"{job_id}_{trial}-{token}"
            assert got["wandb_id"] == got["run_id"] + ("-rank1" if rank else "")
            assert got["trial"] == got["spec_trial"] == got["array_task"] == str(trial)
            assert (got["rank"], got["world"]) == (str(rank), "2")
            assert got["params"] == {"lr": lr, "bs": bs}
            assert got["env"] == {"SLURMTORCH_SWEEP_LR": lr, "SLURMTORCH_SWEEP_BS": bs}
            assert got["argv"] == ["--fixed", "1", "--lr", lr, "--bs", bs]

    status = st(testbed, home, ["status", job_id])
    lines = [ln for ln in status.stdout.splitlines() if ln.startswith("trial=")]
    assert [ln.split()[0] for ln in lines] == ["trial=0", "trial=1", "trial=2", "trial=3"]
    assert "state=COMPLETED exit_code=0" in lines[0] and "params=lr=1e-3,bs=32" in lines[0]
    assert "state=FAILED exit_code=1" in lines[3]

    logs = st(testbed, home, ["logs", job_id, "--trial", "2", "--rank", "1"])
    assert logs.returncode == 0, logs.stderr
    assert json.loads(logs.stdout)["params"] == {"lr": "it's $x", "bs": "32"}
    no_trial = st(testbed, home, ["logs", job_id])
    assert no_trial.returncode != 0 and no_trial.stderr.startswith(f"error: job {job_id} is an array of 4 trials")


def test_a_failed_role_step_stops_the_others_and_is_named(testbed, tmp_path):
    """Each role is its own srun step: without the batch script's `wait -n` loop a failed
    worker would leave the ps step (and the master) running to the time limit. `st`'s
    timeout is the hang guard."""
    home = tmp_path / "home"
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "--role", "master=1", "--role", "worker=1",
                              "--role", "ps=1", "--wait", str(SCRIPTS / "role_fail.py")], timeout=150)
    assert proc.returncode != 0, proc.stderr
    job_id = proc.stdout.splitlines()[0]
    batch = (home / "jobs" / job_id / "batch.out").read_text()
    assert "slurmtorch: role worker exited with 4; stopping the other steps" in batch, batch
    assert re.search(r"rank 1 on node\d+ failed:", (home / "jobs" / job_id / "rank-1.err").read_text())


def test_a_worker_killed_by_a_signal_is_named_as_the_worker_not_the_master(testbed, tmp_path):
    """srun numbers each role's tasks from 0: its `node2: task 0: Killed` is the worker's
    rank 1, placed by its host, not rank 0 (the master)."""
    home = tmp_path / "home"
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "--role", "master=1", "--role", "worker=1",
                              "--wait", str(SCRIPTS / "role_fail.py"), "kill"], timeout=150)
    assert proc.returncode != 0, proc.stderr
    assert re.search(r"failed: rank 1 \(worker 0\) on node\d+: killed by a signal", proc.stderr), proc.stderr
    assert "failed: rank 0" not in proc.stderr, proc.stderr
