"""Other people's scripts, unchanged, on every front end and launcher: ModelArts- and
imagenet-style argument passing (`--init-args`), IDRIS's idr_torch, Vertex AI's CLUSTER_SPEC.

Real torch, real Open MPI (loopback), the peers' real code where it is installed
(idr_torch: `pip install idr-torch==2.5.0`, in scripts/setup's interop pins).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtorch.bootstrap.contracts import init_args
from slurmtorch.bootstrap.options import UsageError, parse_args
from slurmtorch.bootstrap.rankinfo import RankInfo
from slurmtorch.errors import BootstrapError

from helpers import st

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "tests" / "scripts"


@pytest.fixture(scope="module")
def env(mpi_env, has_torch):
    env = dict(mpi_env, GLOO_SOCKET_IFNAME="lo")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NTASKS", "SLURM_PROCID", "PMI_RANK", "PMIX_RANK"):
        env.pop(key, None)
    return env


def run(argv, env, cwd=REPO, timeout=120):
    return subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def info(**kw) -> RankInfo:
    base = dict(rank=1, world_size=4, local_rank=1, local_world_size=2, node_rank=0, num_nodes=2,
                master_addr="198.18.0.1", master_port=29500, hostname="n1", source="slurm")
    base.update(kw)
    return RankInfo(**base)


# ----------------------------------------------------------------------------- --init-args

def test_init_args_take_the_scripts_own_flag_names():
    assert init_args(info(), "rank:dist-url,rank,world-size") == [
        "--dist-url", "tcp://198.18.0.1:29500", "--rank", "1", "--world-size", "4"]
    one_per_node = info(rank=1, local_rank=0, local_world_size=1, node_rank=1, num_nodes=2, world_size=2)
    assert init_args(one_per_node, "node:dist-url,rank,world-size")[2:] == ["--rank", "1", "--world-size", "2"]
    assert init_args(info(), "rank")[::2] == ["--init_method", "--rank", "--world_size"]  # ModelArts' by default


@pytest.mark.parametrize("text, message", [
    ("nodes", "the shape 'nodes' is not rank or node"), ("rank:a,b", "three flag names"),
    ("rank:a,b,a", "must differ"), ("rank:a,b,$(id)", "three flag names"), ("node:", "three flag names"),
])
def test_a_malformed_init_args_value_is_one_usage_line(text, message):
    with pytest.raises(UsageError, match=message):
        parse_args([f"--init-args={text}", "x.py"])
    with pytest.raises(BootstrapError, match=message):
        init_args(info(), text)


def test_init_args_with_names_per_node_implies_no_init():
    opts = parse_args(["--init-args=node:dist-url,rank,world-size", "main.py", "-a", "resnet50"])
    assert (opts.init_args, opts.init, opts.script, opts.args) == (
        "node:dist-url,rank,world-size", False, "main.py", ["-a", "resnet50"])


def test_slurmtorch_mpirun_init_args_reach_every_rank_under_the_scripts_own_names(env, tmp_path):
    # Was: `slurmtorch mpirun --init-args` -> "No such option" (only the bootstrap had it).
    result = run([sys.executable, "-m", "slurmtorch", "mpirun", "-n", "2", "--backend", "gloo",
                  "--init-args", "rank:dist-url,rank,world-size", SCRIPTS / "imagenet_args.py"],
                 {**env, "SLURMTORCH_HOME": str(tmp_path / "home")}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = sorted(ln for ln in result.stdout.splitlines() if ln.startswith("IMAGENET"))
    assert len(lines) == 2
    for rank, line in enumerate(lines):
        assert line.startswith("IMAGENET --dist-url tcp://127.0.0.1:") and line.endswith(
            f"--rank {rank} --world-size 2 sum 3.0")


@pytest.mark.parametrize("launcher", ["srun", "torchrun", "mpirun"])
def test_sbatch_gives_init_args_to_every_rank_under_each_launcher(tmp_path, launcher):
    script = tmp_path / "main.py"
    script.write_text("pass\n")
    proc = run([sys.executable, "-m", "slurmtorch", "sbatch", "--site", "testbed", "-N", "2", "--ntasks-per-node", "1",
                "--launcher", launcher, "--init-args", "node:dist-url,rank,world-size", "--dry-run", script, "-a", "x"],
               {**os.environ, "SLURMTORCH_HOME": str(tmp_path / "home")}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    launch = next(ln for ln in proc.stdout.replace("\\\n", " ").splitlines()
                  if "-m slurmtorch.bootstrap " in ln and not ln.startswith("#"))
    assert "--init-args=node:dist-url,rank,world-size " in launch
    assert launch.index("--init-args=") < launch.index("main.py")


FRONT_ENDS = [["sbatch", "--site", "testbed"], ["mpirun", "-n", "2"]]


def dry_run(tmp_path, verb, *options):
    """`slurmtorch VERB OPTIONS --dry-run t.py` in a fresh home."""
    (tmp_path / "t.py").write_text("pass\n")
    return run([sys.executable, "-m", "slurmtorch", *verb, *options, "--dry-run", "t.py"],
               {**os.environ, "SLURMTORCH_HOME": str(tmp_path / "home")}, cwd=tmp_path)


@pytest.mark.parametrize("verb", FRONT_ENDS)
def test_a_malformed_init_args_on_the_command_line_is_one_error_line(tmp_path, verb):
    proc = dry_run(tmp_path, verb, "--init-args", "rank:a,b")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: --init-args=rank:a,b: give three flag names"), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("verb, shape, tasks", [(["sbatch", "--site", "testbed", "--ntasks-per-node", "2"], [], 2),
                                               (["sbatch", "--site", "testbed", "-N", "2", "-n", "3"], [], 2),
                                               (["sbatch", "--site", "testbed", "--launcher", "torchrun",
                                                 "--ntasks-per-node", "2"], [], 2),
                                               (["mpirun", "-n", "3"], [":dist-url,rank,world-size"], 3)])
def test_init_args_per_node_with_several_tasks_on_a_node_is_refused_at_submission(tmp_path, verb, shape, tasks):
    """Issue 44: known when it is submitted, it was said only once the job ran (every rank's
    bootstrap refused it: "each would claim the same rank")."""
    proc = dry_run(tmp_path, verb, "--init-args", "node" + "".join(shape))
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout[-500:]
    assert proc.stderr.startswith(f"error: --init-args=node{''.join(shape)} gives each task its node's rank and "
                                  f"the node count, but {tasks} tasks run on a node: each would claim the same "
                                  "rank\ntip: one task per node"), proc.stderr


@pytest.mark.parametrize("verb", [["sbatch", "--site", "testbed"], ["mpirun", "-n", "1"]])  # node: one task a node
@pytest.mark.parametrize("typed, given", [(["--init-args"], "rank"), (["--init-args", "node"], "node"),
                                          (["--init-args", "node:dist-url,rank,world-size"],
                                           "node:dist-url,rank,world-size"), (["--init-args=rank"], "rank")])
def test_init_args_takes_a_value_only_when_it_is_one_and_never_the_script(tmp_path, verb, typed, given):
    """Issue 44: `--init-args t.py` took t.py for its value ("error: missing SCRIPT"), though the
    docs call `rank` the default and the bootstrap takes the bare flag."""
    (tmp_path / "t.py").write_text("pass\n")
    proc = run([sys.executable, "-m", "slurmtorch", *verb, "--dry-run", *typed, "t.py", "--lr", "1"],
               {**os.environ, "SLURMTORCH_HOME": str(tmp_path / "home")}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"--init-args={given} " in proc.stdout.replace("\\\n", " ") and " t.py --lr 1" in proc.stdout, proc.stdout
    # Before another option, too (click's own optional value).
    proc = dry_run(tmp_path, verb, *typed)
    assert proc.returncode == 0 and f"--init-args={given} " in proc.stdout.replace("\\\n", " "), proc.stderr


# ----------------------------------------------------------------------------- rank and world of the script's own

def mpirun(n: int, *args) -> list:
    return ["mpirun", "-n", str(n), "--oversubscribe", sys.executable, "-m", "slurmtorch.bootstrap",
            "--backend", "gloo", *args]


def test_a_script_whose_own_rank_and_world_are_not_ours_is_told_about_init_args_not_no_init(env):
    # A ModelArts script run without --init-args: its defaults (rank 0, a world of 1) reach init_process_group.
    result = run(mpirun(2, SCRIPTS / "init_args.py", "--init_method", "tcp://127.0.0.1:23456", "--rank", "0",
                        "--world_size", "1"), env)
    assert result.returncode != 0
    assert re.search(r"the script calls init_process_group\((world_size=1|rank=0)\) but slurmtorch set up "
                     r"(world_size 2|rank 1)", result.stderr), result.stderr
    assert "--init-args" in result.stderr and "--no-init" not in result.stderr


WORLD_OF_ONE = """
import socket, torch, torch.distributed as dist
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
print("ALONE", flush=True)
"""


def test_under_no_init_a_world_of_one_in_a_job_of_several_ranks_is_refused_not_run_n_times(env, tmp_path):
    # Was: exit 0 after two independent one-rank trainings (what the old tip, --no-init, led to).
    script = tmp_path / "alone.py"
    script.write_text(WORLD_OF_ONE)
    result = run(mpirun(2, "--no-init", script), env)
    assert result.returncode != 0, result.stdout
    assert "ALONE" not in result.stdout
    assert "init_process_group(world_size=1) in a world of 2 ranks: each rank would train alone" in result.stderr


# ----------------------------------------------------------------------------- IDRIS's idr_torch

# What the ranks of `--launcher mpirun` inherit inside an allocation: Open MPI starts its daemons with
# one srun task per node, so each rank sees that step's SLURM_* (here one node: one task, step 0).
ORTED_STEP = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
              "SLURM_NODEID": "0", "SLURM_NTASKS": "1", "SLURM_NNODES": "1", "SLURM_JOB_NUM_NODES": "1",
              "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_TASKS_PER_NODE": "1",
              "SLURM_STEP_NODELIST": "localhost", "SLURM_JOB_NAME": "train"}


def idr_records(out: str) -> list[dict]:
    return sorted((json.loads(ln[4:]) for ln in out.splitlines() if ln.startswith("IDR ")), key=lambda r: r["rank"])


@pytest.fixture
def idr(env):
    pytest.importorskip("idr_torch", reason="pip install idr-torch==2.5.0 (scripts/setup's interop pins)")
    return env


@pytest.mark.parametrize("ours", [[], ["--no-init"]], ids=["our-group", "no-init"])
def test_idr_torch_under_mpirun_in_an_allocation_sees_this_world(idr, ours):
    # idr_torch trusts SLURM_PROCID / SLURM_STEP_NUM_TASKS / SLURM_STEP_TASKS_PER_NODE when SLURM_STEP_ID is
    # set; the daemon step's (one task) made it call init_process_group(world_size=1).
    result = run(mpirun(2, *ours, SCRIPTS / "idr_probe.py"), {**idr, **ORTED_STEP})
    assert result.returncode == 0, result.stderr[-3000:]
    found = idr_records(result.stdout)
    assert [(r["rank"], r["size"], r["dist_rank"], r["dist_size"], r["sum"]) for r in found] == [
        (0, 2, 0, 2, 2.0), (1, 2, 1, 2, 2.0)]
    assert all(r["api"] == "Slurm" and r["local_size"] == 2 and r["nodes"] == 1 for r in found)


def test_idr_torch_under_torchrun_in_an_allocation_sees_the_workers_not_the_agents_task(idr, tmp_path):
    # torchrun's workers inherit the agent's srun task (SLURM_PROCID = node index, one task per node),
    # and idr_torch prefers SLURM_* to TORCHELASTIC_RUN_ID: every worker of a node was "rank 0 of 1".
    result = run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                  "--rdzv-endpoint", "127.0.0.1:0", "-m", "slurmtorch.bootstrap", "--backend", "gloo",
                  SCRIPTS / "idr_probe.py"], {**idr, **ORTED_STEP}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    found = idr_records(result.stdout)
    assert [(r["rank"], r["size"], r["local_rank"], r["dist_size"], r["sum"]) for r in found] == [
        (0, 2, 0, 2, 2.0), (1, 2, 1, 2, 2.0)]


@pytest.mark.testbed
@pytest.mark.parametrize("launcher", ["srun", "mpirun", "torchrun"])
def test_idr_torch_sees_this_world_under_every_sbatch_launcher(testbed, has_torch, tmp_path, launcher):
    # The real thing: two nodes of two ranks; under mpirun the ranks inherit the prted step's SLURM_STEP_*
    # (node 0's: the batch step's), under torchrun the agent's task.
    pytest.importorskip("idr_torch", reason="pip install idr-torch==2.5.0 (scripts/setup's interop pins)")
    home = tmp_path / "home"
    proc = subprocess.run([testbed.python, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed", "-N", "2",
                           "--ntasks-per-node", "2", "--launcher", launcher, "--backend", "gloo", "-t", "5", "--wait",
                           str(SCRIPTS / "idr_probe.py")], env=dict(testbed.env, SLURMTORCH_HOME=str(home)),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = "".join(p.read_text() for p in (home / "jobs").glob("*/*.out"))
    found = idr_records(out)
    assert [(r["rank"], r["size"], r["dist_rank"], r["dist_size"], r["sum"]) for r in found] == [
        (r, 4, r, 4, 4.0) for r in range(4)]
    assert [r["local_rank"] for r in found] == [0, 1, 0, 1] and {r["nodes"] for r in found} == {2}


# ----------------------------------------------------------------------------- Vertex AI's CLUSTER_SPEC

def node_info(rank: int, nodes=("n1", "n2", "n3"), per_node=2, **kw) -> RankInfo:
    hosts = tuple(h for h in nodes for _ in range(per_node))
    return info(rank=rank, world_size=len(hosts), local_rank=rank % per_node, local_world_size=per_node,
                node_rank=rank // per_node, num_nodes=len(nodes), nodes=tuple(nodes), rank_hosts=hosts,
                hostname=hosts[rank], source="mpi", **kw)


def test_vertex_cluster_spec_has_one_entry_per_replica_the_primary_where_the_world_meets():
    from slurmtorch.bootstrap.contracts import vertex_cluster_spec

    first, later = vertex_cluster_spec(node_info(1)), vertex_cluster_spec(node_info(5, trial="3"))
    assert first["cluster"] == later["cluster"] == {"workerpool0": ["198.18.0.1:29500"],
                                                    "workerpool1": ["n2:29501", "n3:29502"]}
    assert first["environment"] == "cloud"
    assert first["task"] == {"type": "workerpool0", "index": 0}  # both ranks of the first node
    assert later["task"] == {"type": "workerpool1", "index": 1, "trial": "3"}


def test_vertex_cluster_spec_of_a_role_job_names_the_pools_by_role():
    from slurmtorch.bootstrap.contracts import vertex_cluster_spec
    from slurmtorch.roles import parse_roles

    layout = parse_roles("master=1,worker=2,ps=1,evaluator=1")
    hosts = ("n1", "n2", "n3", "n4", "n5")
    ps = info(rank=3, world_size=5, local_rank=0, local_world_size=1, node_rank=3, num_nodes=5, nodes=hosts,
              rank_hosts=hosts[:3], hostname="n4", source="slurm", role="ps", role_index=0, layout=layout,
              job_rank_hosts=hosts)
    spec = vertex_cluster_spec(ps)
    assert spec["cluster"] == {"workerpool0": ["198.18.0.1:29500"], "workerpool1": ["n2:29501", "n3:29502"],
                               "workerpool2": ["n4:29503"], "workerpool3": ["n5:29504"]}
    assert spec["task"] == {"type": "workerpool2", "index": 0}


def test_a_torchrun_ranks_hosts_are_each_nodes_in_the_order_its_rendezvous_numbered_them():
    from slurmtorch.bootstrap.torchrunhosts import hosts_of, wanted

    assert hosts_of([["b", 0, 2], ["a", 2, 2]], 4) == (("b", "a"), ("b", "b", "a", "a"))
    assert hosts_of([["b", 0, 1], ["a", 1, 3]], 4) == (("b", "a"), ("b", "a", "a", "a"))
    assert hosts_of([["b", 0, 2], ["a", 3, 2]], 5) is None and hosts_of([["b", 0, 2]], 4) is None
    agents = {"TORCHELASTIC_USE_AGENT_STORE": "True"}
    two = info(source="torchrun", num_nodes=2)
    assert wanted(two, agents) and not wanted(two, {})
    assert not wanted(info(source="slurm", num_nodes=2), agents)
    assert not wanted(info(source="torchrun", num_nodes=1, local_world_size=4, node_rank=0), agents)
    assert not wanted(info(source="torchrun", num_nodes=2, rank_hosts=("a", "a", "b", "b")), agents)


@pytest.mark.testbed
def test_torchrun_on_two_nodes_gives_every_rank_the_cluster_maps(testbed, has_torch, tmp_path):
    """Issue 44: `--launcher torchrun` on 2 nodes set no CLUSTER_SPEC or TF_CONFIG (a torchrun
    worker knows no other node's host), and nothing said so: a Vertex-style script failed with
    KeyError: 'CLUSTER_SPEC'. Two ranks a node, Vertex's shape; TF_CONFIG has one entry a rank."""
    home = tmp_path / "home"
    proc = st(testbed, home, ["sbatch", "--site", "testbed", "-N", "2", "--ntasks-per-node", "2", "--launcher",
                              "torchrun", "--cluster-spec", "vertex", "--time", "3", "--wait",
                              SCRIPTS / "vertex_probe.py"], timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = home / "jobs" / proc.stdout.split()[0]
    lines = [ln for p in sorted(folder.glob("*.out")) for ln in p.read_text().splitlines() if ln.startswith("VERTEX ")]
    found = sorted((json.loads(ln[7:]) for ln in lines), key=lambda r: r["rank"])
    assert [r["rank"] for r in found] == [0, 1, 2, 3], lines
    master = f"{found[0]['MASTER_ADDR']}:{found[0]['MASTER_PORT']}"
    port = found[0]["MASTER_PORT"]
    nodes = [found[0]["host"], found[2]["host"]]
    assert found[1]["host"] == nodes[0] != nodes[1] == found[3]["host"], found
    for r in found:
        node = r["rank"] // 2
        assert r["cluster_spec"] == {"cluster": {"workerpool0": [master], "workerpool1": [f"{nodes[1]}:{port + 1}"]},
                                     "environment": "cloud",
                                     "task": {"type": "workerpool1" if node else "workerpool0", "index": 0}}, r
        assert (r["node_rank"], r["NODE_RANK"], r["replicas"]) == (node, node, 2), r
        assert r["tf_config"] == {"cluster": {"chief": [master], "worker": [f"{found[w]['host']}:{port + w}"
                                                                            for w in (1, 2, 3)]},
                                  "task": {"type": "chief", "index": 0} if r["rank"] == 0 else
                                  {"type": "worker", "index": r["rank"] - 1}}, r


def test_the_cluster_spec_shape_is_chosen_by_option_and_ai_platforms_stays_the_default():
    from slurmtorch.bootstrap.contracts import env_for

    assert '"master"' in env_for(node_info(0))["CLUSTER_SPEC"]
    assert '"workerpool0"' in env_for(node_info(0), "vertex")["CLUSTER_SPEC"]
    assert parse_args(["--cluster-spec=vertex", "x.py"]).cluster_spec == "vertex"
    with pytest.raises(UsageError, match="--cluster-spec 'azure' is not one of ai-platform, vertex"):
        parse_args(["--cluster-spec", "azure", "x.py"])


def test_a_vertex_script_reads_its_replica_and_the_meeting_point_from_cluster_spec(env):
    # Was: KeyError: 'workerpool0' (we exported AI Platform's master/worker shape only).
    result = run(mpirun(2, "--cluster-spec=vertex", SCRIPTS / "vertex_probe.py"), env)
    assert result.returncode == 0, result.stderr[-3000:]
    found = sorted((json.loads(ln[7:]) for ln in result.stdout.splitlines() if ln.startswith("VERTEX ")),
                   key=lambda r: r["rank"])
    assert len(found) == 2
    for r in found:  # one replica (this host), where torch's world meets
        assert (r["main_address"], r["main_port"]) == (r["MASTER_ADDR"], r["MASTER_PORT"])
        assert (r["node_rank"], r["replicas"], r["environment"]) == (r["NODE_RANK"], 1, "cloud")


@pytest.mark.parametrize("verb", FRONT_ENDS)
def test_the_cluster_spec_shape_reaches_the_ranks_from_each_front_end(tmp_path, verb):
    proc = dry_run(tmp_path, verb, "--cluster-spec", "vertex")
    assert proc.returncode == 0, proc.stderr
    assert "--cluster-spec=vertex " in proc.stdout.replace("\\\n", " ")


# ----------------------------------------------------------------------------- a script's own group settings

def test_a_script_that_sets_up_its_own_group_gets_its_own_settings(env, tmp_path):
    # torchtitan sets the process group's environment, then calls init_process_group with its own
    # timeout: our group, made before those settings, was kept (timeout changed in place), so its
    # NCCL error handling and flight-recorder settings never applied. It is made again now.
    result = run(mpirun(2, SCRIPTS / "titan_init.py"), {**env, "TITAN_DUMP": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    found = sorted((json.loads(ln[6:]) for ln in result.stdout.splitlines() if ln.startswith("TITAN ")),
                   key=lambda r: r["rank"])
    assert [(r["rank"], r["sum"], r["replaced"], r["timeout"]) for r in found] == [(0, 2.0, True, 300.0),
                                                                                   (1, 2.0, True, 300.0)]
    assert {(r["fr_buffer"], r["async"]) for r in found} == {("20000", "3")}  # the script's, not ours


def test_no_init_on_slurmtorch_mpirun_lets_a_script_that_skips_an_existing_group_set_up_its_own(env, tmp_path):
    """Issue 44: torchtitan as written today returns early from its `init_distributed()` when a
    group exists, which under slurmtorch it always does, so its timeout, backend and flight-recorder
    settings were dropped; the docs said `--no-init`, which neither sbatch nor mpirun offered."""
    script = [SCRIPTS / "titan_init.py", "--as-titan-today"]
    result = run([sys.executable, "-m", "slurmtorch", "mpirun", "-n", "2", "--no-init", *script],
                 {**env, "TITAN_DUMP": str(tmp_path), "SLURMTORCH_HOME": str(tmp_path / "home")})
    assert result.returncode == 0, result.stderr[-3000:]
    found = sorted((json.loads(ln[6:]) for ln in result.stdout.splitlines() if ln.startswith("TITAN ")),
                   key=lambda r: r["rank"])
    assert [(r["rank"], r["sum"], r["replaced"], r["timeout"]) for r in found] == [(0, 2.0, False, 300.0),
                                                                                   (1, 2.0, False, 300.0)]
    assert "skipping its set-up" not in result.stdout


@pytest.mark.parametrize("verb", FRONT_ENDS)
def test_no_init_reaches_every_ranks_bootstrap_from_each_front_end(tmp_path, verb):
    proc = dry_run(tmp_path, verb, "--no-init")
    assert proc.returncode == 0, proc.stderr
    launch = proc.stdout.replace("\\\n", " ")
    assert re.search(r"-m slurmtorch\.bootstrap [^\n]*--no-init [^\n]*t\.py", launch), launch
    assert "--no-init" not in dry_run(tmp_path, verb).stdout


def test_a_script_asking_for_our_group_again_with_no_new_settings_keeps_it(env):
    result = run(mpirun(2, SCRIPTS / "probe.py", "--init-self"), env)
    assert result.returncode == 0, result.stderr[-3000:]
    found = [json.loads(ln[6:]) for ln in result.stdout.splitlines() if ln.startswith("PROBE ")]
    assert len(found) == 2 and not any(r["group_replaced"] for r in found)
