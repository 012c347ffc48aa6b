"""Roles on different node types (`--role worker=2:partition=fat`): the role syntax, the
heterogeneous job's script (pure), then such a job on the testbed's two node types
(partitions debug: node[1-4], fat: node[3-4])."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmtorch.bootstrap.fromenv import from_roles
from slurmtorch.errors import BootstrapError, SpecError
from slurmtorch.roles import RoleItem, parse_role_item, parse_roles
from slurmtorch.submit import sites
from slurmtorch.submit.launch import render
from slurmtorch import protocol
from slurmtorch.submit.jobfolder.jobstatus import parse_squeue
from slurmtorch.submit.jobfolder.report import failure_report
from slurmtorch.submit.launch.spec import build_spec

from helpers import read, st, wait_for
from test_render import bash_syntax_ok, check_golden, golden_options

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
HET = ("master=1", "worker=2:partition=fat")


def spec_of(**kw):
    return build_spec(sites.load_site("testbed"), golden_options("testbed", **kw))


# ------------------------------------------------------------------ the role syntax (pure)


@pytest.mark.parametrize("roles, message", [
    (("master=1", "worker=2:partition"), r"'partition' is not one of partition=\.\.\., gpus=\.\.\."),
    (("master=1", "worker=2:nodes=3"), "'nodes=3' is not one of"),
    (("master=1", "worker=2:gpus=two"), "gpus must be a whole number"),
    (("master=1", "worker=2:gpus=1:gpus=2"), "gpus given twice"),
    (("master=1", "worker=2:partition=nope"), "nope"),
    (("master=1", "worker=3:partition=fat"), "role worker needs 3 nodes, but partition 'fat' allows at most 2"),
    (("master=1", "worker=2:gpus=1"), "role worker: 1 GPUs per node requested, but node type 'fat'|"
                                      "role worker: 1 GPUs per node requested"),
    (("master=1", "worker=4:partition=debug"), "need 5 nodes, but partition 'debug' allows at most 4"),
    (("master=1", "worker=2:partition=fat", "ps=1:partition=fat"),
     "roles worker=2,ps=1 need 3 nodes of partition 'fat', which allows at most 2"),
])
def test_bad_role_resources_are_refused_naming_the_role(roles, message):
    with pytest.raises(SpecError, match=message):
        spec_of(roles=roles)


def test_one_parser_reads_a_role_item_for_the_submit_side_and_the_ranks():
    item = parse_role_item("worker=2:partition=fat:gpus=4:tasks=2:spare=1")
    assert item == RoleItem("worker", 2, partition="fat", gpus=4, tasks=2, spare=1)
    assert parse_roles(["master=1", "worker=2:partition=fat:tasks=2"]).tasks == (("worker", 2),)
    with pytest.raises(BootstrapError, match="tasks must be a whole number of tasks per node, at least 1"):
        parse_role_item("worker=2:tasks=0")
    with pytest.raises(SpecError, match="a role's tasks= cannot apply"):
        spec_of(roles=("master=1", "worker=2:partition=fat:tasks=2"), ray=True)


def test_a_heterogeneous_job_is_no_array():
    with pytest.raises(SpecError, match="no arrays of heterogeneous jobs"):
        spec_of(roles=HET, sweep=("lr=1,2",))


def test_bad_role_resources_are_one_error_line_and_a_non_zero_exit(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed", "--role",
                           "master=1", "--role", "worker=2:gpu=1", "--dry-run", str(script)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[0] == ("error: malformed --role 'worker=2:gpu=1': 'gpu=1' is not one of "
                                           "partition=..., gpus=..., tasks=..., spare=...")


def test_roles_that_name_the_jobs_own_resources_render_exactly_as_before():
    plain = render.render_sbatch(spec_of(roles=("master=1", "worker=2", "ps=1")))
    named = spec_of(roles=("master=1:partition=debug", "worker=2:gpus=0", "ps=1:partition=debug"))
    assert named.het_components == ()
    assert render.render_sbatch(named).split("\n", 3)[3] == plain.split("\n", 3)[3]  # but the `Run with:` line


# ------------------------------------------------------------------ the heterogeneous script (pure)


def test_roles_on_two_node_types_render_one_heterogeneous_job():
    spec = spec_of(roles=HET)
    text = render.render_sbatch(spec)
    bash_syntax_ok(text)
    check_golden("sbatch-hetjob-testbed.sh", text)
    header = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    hetjob = header.index("#SBATCH hetjob")
    assert "#SBATCH --partition=debug" in header[:hetjob] and "#SBATCH --nodes=1" in header[:hetjob]
    assert header[hetjob + 1:] == ["#SBATCH --cpus-per-task=2", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
                                   "#SBATCH --partition=fat"]
    # Each role's step in its component; the fat node type's own variable only on its step.
    assert "\nsrun --het-group=0 --kill-on-bad-exit=1 --mpi=none --nodes=1 --ntasks=1 " in text
    assert "\nenv TESTBED_NODE_TYPE=fat srun --het-group=1 --kill-on-bad-exit=1 --mpi=none --nodes=2 --ntasks=2 " in text
    assert "--nodelist" not in text
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_0,$SLURM_JOB_NODELIST_HET_GROUP_1"' in text
    assert "launch()" not in text  # the steps run once, at the script's top level


def test_a_restartable_heterogeneous_job_holds_each_roles_spares_in_its_component_under_the_supervisor():
    spec = spec_of(roles=("master=1", "worker=1:partition=fat:spare=1"), max_restarts=3)
    text = render.render_sbatch(spec)
    bash_syntax_ok(text)
    check_golden("sbatch-hetjob-restarts-testbed.sh", text)
    header = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert header[header.index("#SBATCH hetjob"):].count("#SBATCH --nodes=2") == 1  # the worker and its spare
    assert ("-m slurmtorch.submit.supervisor --nodes 2 --ntasks 2 --max-restarts 3 --spare-nodes 1 "
            "--roles master=1,worker=1 --backend gloo -- \\\n    bash -c 'launch \"$@\"' launch\n") in text
    # Inside launch each role's step names this start's nodes in its own component.
    assert ('    env TESTBED_NODE_TYPE=fat srun --het-group=1 --kill-on-bad-exit=1 --mpi=none --nodes=1 --ntasks=1 '
            '--ntasks-per-node=1 --overlap --cpus-per-task=2 --nodelist="$(IFS=,; echo "${nodes[*]:1:1}")"') in text


@pytest.mark.parametrize("kw, message", [
    ({"roles": HET, "max_restarts": 2, "spare_nodes": 1}, "hold spares of their own kind"),
    ({"roles": ("master=1", "worker=1:partition=fat:spare=2"), "max_restarts": 2},
     r"role worker needs 3 nodes \(2 of them spare\), but partition 'fat' allows at most 2"),
    ({"roles": ("master=1", "worker=1:spare=1")}, "a role's spare=N needs --max-restarts"),
    ({"roles": ("master=1", "worker=1:spare=x"), "max_restarts": 2}, "spare must be a whole number of spare nodes"),
])
def test_spares_that_cannot_be_held_are_refused(kw, message):
    with pytest.raises(SpecError, match=message):
        spec_of(**kw)


def test_a_role_on_its_own_node_type_gets_its_env_and_loses_what_the_leaders_has_alone(tmp_path):
    site = tmp_path / "two.yaml"
    site.write_text("extends: testbed\nnode_types:\n  cpu: {env: {ONLY_CPU: '1', NCCL_DEBUG: WARN}}\n"
                    "  fat: {env: {NCCL_DEBUG: \"it's INFO\"}}\n")
    spec = build_spec(sites.load_site(str(site)), golden_options("testbed", roles=("master=1", "ps=1:partition=fat")))
    text = render.render_sbatch(spec)
    bash_syntax_ok(text)
    assert "\nenv -u ONLY_CPU TESTBED_NODE_TYPE=fat 'NCCL_DEBUG=it'\"'\"'s INFO' srun --het-group=1 " in text


def test_a_later_components_expand_value_expands_when_its_step_starts(tmp_path):
    """Issue 44: a second node type's `env: {expand: ...}` reached its ranks as literal ${...}
    text (its step's `env` prefix quoted it whole); a plain job's expands."""
    site = tmp_path / "two.yaml"
    site.write_text("extends: testbed\nnode_types:\n  fat: {env: {SCRATCH: {expand: '/scratch/${SLURM_JOB_ID}/a b'}}}\n")
    text = render.render_sbatch(build_spec(sites.load_site(str(site)), golden_options("testbed", roles=HET)))
    bash_syntax_ok(text)
    line = next(ln for ln in text.splitlines() if ln.lstrip().startswith("env ") and " srun --het-group=1 " in ln)
    words = subprocess.run(["bash", "-c", 'printf "%s\\0" ' + line.split(" srun ")[0]], capture_output=True,
                           text=True, check=True, env={"SLURM_JOB_ID": "42"}).stdout.split("\0")[:-1]
    assert "SCRATCH=/scratch/42/a b" in words, line


@pytest.mark.parametrize("fat, message", [
    ("modules: [arch/fat]", "needs its own modules"),
    ("node_prologue: ['true']", "needs a node prologue"),
    ("prepend_path: {PATH: [/opt/fat/bin]}", r"needs its own path compositions \(prepend_path/append_path\)"),
])
def test_what_only_the_batch_script_sets_up_cannot_differ_between_the_roles_node_types(tmp_path, fat, message):
    site = tmp_path / "two.yaml"
    site.write_text(f"extends: testbed\nnode_types:\n  fat: {{{fat}}}\n")
    with pytest.raises(SpecError, match="role worker: partition 'fat' \\(node type 'fat'\\) " + message):
        build_spec(sites.load_site(str(site)), golden_options("testbed", roles=HET))


def test_a_rank_of_a_later_component_finds_its_place_from_every_roles_nodes():
    """A step's SLURM_JOB_NODELIST is its component's: SLURMTORCH_ROLE_NODES has every role's."""
    env = {"SLURM_JOB_NODELIST": "node[3-4]", "SLURMTORCH_ROLE_NODES": "node1,node3,node4", "SLURM_PROCID": "1",
           "SLURMD_NODENAME": "node4", "MASTER_ADDR": "198.18.0.139", "MASTER_PORT": "29500",
           "SLURMTORCH_ROLES": "master=1,worker=2"}
    info = from_roles(env, "node4", "worker")
    assert (info.rank, info.world_size, info.role_index, info.master_addr) == (2, 3, 1, "198.18.0.139")
    assert info.job_rank_hosts == ("node1", "node3", "node4")


def test_squeue_shows_a_heterogeneous_job_as_one_job_in_its_leaders_state_on_every_components_nodes():
    text = ("7+0|RUNNING|None|node1|2026-11-29T02:09:28|2026-11-29T02:09:29|root|2026-11-30T02:09:29|het\n"
            "7+1|RUNNING|None|node[3-4]|2026-11-29T02:09:28|2026-11-29T02:09:29|root|2026-11-30T02:09:29|het\n"
            "8|PENDING|Priority||2026-11-29T02:09:30|N/A|root|N/A|other\n")
    rows = parse_squeue(text)
    assert sorted(rows) == ["7", "8"]
    assert (rows["7"].job_id, rows["7"].state, rows["7"].nodes) == ("7", "RUNNING", "node1,node[3-4]")


def test_the_failure_report_places_sruns_per_role_task_lines_by_host_and_names_the_role(tmp_path):
    """srun numbers each role's tasks from 0: the worker's `task 0` on node3 is job rank 1."""
    folder = tmp_path / "7"
    folder.mkdir()
    (folder / "job.json").write_text(json.dumps({"launcher": "srun", "nodes": 3, "ntasks": 3, "ntasks_per_node": 1,
                                                 "roles": "master=1,worker=1,ps=1"}))
    (folder / "role-nodes").write_text("node1\nnode3\nnode4\n")
    (folder / "batch.out").write_text("srun: error: node3: task 0: Exited with exit code 4\n"
                                      "slurmtorch: role worker exited with 4; stopping the other steps\n"
                                      "srun: error: node4: task 0: Terminated\n")
    report = failure_report(folder)
    assert [(f.rank, f.role, f.host, f.code, f.primary) for f in report] == [
        (1, "worker 0", "node3", 4, True), (2, "ps 0", "node4", 143, False)]
    assert report[0].line().startswith("rank 1 (worker 0) on node3: ")
    assert report[1].cause == "stopped when role worker failed"


def test_the_failure_report_places_a_task_of_a_node_with_several_ranks_on_that_nodes_ranks(tmp_path):
    """worker=1:tasks=2 on node3: its task 1 is job rank 2 (the master's rank 0 comes first)."""
    folder = tmp_path / "7"
    folder.mkdir()
    (folder / "job.json").write_text(json.dumps({"launcher": "srun", "roles": "master=1,worker=1:tasks=2"}))
    (folder / "role-nodes").write_text("node1\nnode3\n")
    (folder / "batch.out").write_text("srun: error: node3: task 1: Killed\n")
    assert failure_report(folder)[0].line() == ("rank 2 (worker 1) on node3: killed by a signal (SIGKILL?) before it "
                                                "could report")


def test_roles_on_a_gpu_site_run_a_rank_per_gpu_on_each_of_their_nodes():
    """hdr-ib's nodes have 8 GPUs: a role job was refused there ("--ntasks-per-node 8 cannot apply")."""
    spec = build_spec(sites.load_site("hdr-ib"), golden_options("hdr-ib", roles=("master=1", "worker=2")))
    text = render.render_sbatch(spec)
    bash_syntax_ok(text)
    assert spec.role_layout.format() == "master=1:tasks=8,worker=2:tasks=8"
    assert "#SBATCH --ntasks-per-node=8" in text and "#SBATCH --nodes=3" in text
    assert "--nodes=2 --ntasks=16 --ntasks-per-node=8" in text and "slurmtorch-rank 8 " in text
    assert '"${nodes[*]:1:2}"' in text  # the workers' nodes: the second and third


def test_a_role_with_tasks_of_its_own_runs_in_a_component_of_its_own():
    spec = spec_of(roles=("master=1", "worker=1:tasks=2"))
    text = render.render_sbatch(spec)
    bash_syntax_ok(text)
    header = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert header[header.index("#SBATCH hetjob") + 1:] == [
        "#SBATCH --cpus-per-task=1", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=2", "#SBATCH --partition=debug"]
    # The leader's component asks for its own one task, not the job's 3 ranks on its one node.
    assert "#SBATCH --ntasks-per-node=1" in header and not any(h.startswith("#SBATCH --ntasks=") for h in header)
    assert "export SLURMTORCH_ROLES=master=1,worker=1:tasks=2" in text
    assert "srun --het-group=1 --kill-on-bad-exit=1 --mpi=none --nodes=1 --ntasks=2 --ntasks-per-node=2 " in text
    assert (spec.nodes, spec.ntasks) == (2, 3)


def test_the_failure_report_reads_the_role_reapers_line_of_a_job_from_before_issue_45(tmp_path):
    """The reaper's line said "stopping the other roles" then: an old job's folder still reads."""
    line = "slurmtorch: role worker exited with 3; stopping the other roles"
    assert protocol.STEP_STOPPED_RE.match(line)["role"] == "worker"


# ------------------------------------------------------------------ on the testbed


def het_records(folder: Path, ranks: int) -> list[dict]:
    out = []
    for r in range(ranks):
        line = next(ln for ln in (folder / f"rank-{r}.out").read_text().splitlines() if ln.startswith("HET "))
        out.append(json.loads(line[4:]))
    return out


@pytest.mark.slurm_versions
def test_a_heterogeneous_job_trains_the_readme_example_across_two_node_types(testbed, tmp_path):
    home = tmp_path / "home"
    # The fat node type's own variable expands when its step starts (issue 44: it was literal).
    site = tmp_path / "testbed-expand.yaml"
    site.write_text("extends: testbed\nnode_types:\n  fat: {env: {TESTBED_FAT_JOB: {expand: 'fat-${SLURM_JOB_ID}'}}}\n")
    proc = st(testbed, home, ["sbatch", "--site", str(site), "--role", "master=1", "--role", "worker=2:partition=fat",
                              "--wait", str(SCRIPTS / "het_probe.py"), "--epochs", "2"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.splitlines()[0]
    folder = home / "jobs" / job_id
    got = het_records(folder, 3)
    port = int(got[0]["MASTER_PORT"])
    workers = [g["host"] for g in got[1:]]
    assert got[0]["host"] not in workers and sorted(workers) == ["node3", "node4"]
    # MASTER_ADDR: the leader's node's address on the fabric (ib0: 198.18.0.138 + node number).
    master = f"198.18.0.{138 + int(got[0]['host'][4:])}"
    cluster = {"master": [f"{master}:{port}"], "worker": [f"{h}:{port + 1 + i}" for i, h in enumerate(workers)]}
    for r, g in enumerate(got):
        role, index = ("master", 0) if r == 0 else ("worker", r - 1)
        assert (g["RANK"], g["WORLD_SIZE"], g["ROLE_RANK"], g["SLURMTORCH_ROLE"], g["SLURMTORCH_ROLE_INDEX"]) == \
            (str(r), "3", str(r), role, str(index)), g
        # Each role's nodes in its own partition, with its node type's environment.
        assert (g["SLURM_JOB_PARTITION"], g["TESTBED_NODE_TYPE"], g["TESTBED_FAT_JOB"]) == \
            (("debug", None, None) if r == 0 else ("fat", "fat", f"fat-{job_id}")), g
        assert g["MASTER_ADDR"] == master
        assert g["cluster_spec"] == {"cluster": cluster, "task": {"type": role, "index": index}}, g
    rank0 = (folder / "rank-0.out").read_text()
    assert re.search(r"trained on 3 ranks across nodes node\d,node\d,node\d final loss", rank0), rank0
    assert "epoch 1 loss" in rank0


@pytest.mark.slurm_versions
def test_a_failing_rank_of_one_component_ends_the_heterogeneous_job_naming_its_role(testbed, tmp_path):
    home = tmp_path / "home"
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "--role", "master=1", "--role", "worker=1:partition=fat",
                              "--role", "ps=1:partition=fat", "--wait", str(SCRIPTS / "role_fail.py")], timeout=150)
    assert proc.returncode != 0, proc.stderr
    job_id = proc.stdout.splitlines()[0]
    batch = (home / "jobs" / job_id / "batch.out").read_text()
    assert "slurmtorch: role worker exited with 4; stopping the other steps" in batch, batch
    assert re.search(r"rank 1 on node[34] failed:", (home / "jobs" / job_id / "rank-1.err").read_text())
    # The same end report as any job's, the role named; srun's line for the worker's task 0 is rank 1's.
    assert re.search(r"^slurmtorch: failed: rank 1 \(worker 0\) on node[34]: .*\(exit 4\)$", proc.stderr, re.M), \
        proc.stderr + batch
    assert "rank 0 " not in proc.stderr.split("whole log")[0], proc.stderr + batch


@pytest.mark.slurm_versions
def test_stacks_reach_the_ranks_of_every_component(testbed, has_torch, tmp_path):
    """`slurmtorch stacks` on a heterogeneous job: scancel's signal to the job reaches each
    component's steps; the worker stuck in its data loader on a fat node is named."""
    home = tmp_path / "home"
    out = st(testbed, home, ["sbatch", "--site", "testbed", "--role", "master=1", "--role", "worker=2:partition=fat",
                             "--timeout", "200", "-t", "5", str(SCRIPTS / "stuck_rank.py"), "loader", "2"])
    assert out.returncode == 0, out.stderr
    job = out.stdout.splitlines()[0]
    folder = home / "jobs" / job
    try:
        wait_for(lambda: "FAULT" in "".join(read(p) for p in folder.glob("*.err")), "rank 2's fault", 120)
        time.sleep(2)  # the others reach the collective that waits for it
        said = st(testbed, home, ["stacks", job, "--native-wait-s", "0"])
        lines = said.stdout.splitlines()
        assert said.returncode == 0, said.stderr
        assert re.fullmatch(r"rank 2 on node[34]: stuck_rank\.py:\d+ __next__\(\)", lines[0]), lines
        assert re.fullmatch(r"ranks 0-1 \(2\): all_reduce <- stuck_rank\.py:\d+ step\(\)", lines[1]), lines
    finally:
        testbed.run(["scancel", job])
