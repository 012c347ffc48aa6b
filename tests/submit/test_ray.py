"""`--ray`: a Ray cluster in the allocation (submit/launch/raycluster.py, bootstrap/raynode.py), pure
parts: the rendered script (golden, read by bash), its steps in a container, the refusals, the
reaping of its steps in a real bash, raynode's words. tests/submit/test_ray_testbed.py runs
Ray for real on the testbed."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from slurmtorch.bootstrap import raydriver, raynode
from slurmtorch.errors import SpecError
from slurmtorch.submit import sites
from slurmtorch.submit.launch import launchplan, render
from slurmtorch.submit.launch.raycluster import JOIN_S, RAY_HEAD
from slurmtorch.submit.launch.steps import CLEANUP, JOB, VITAL
from slurmtorch.submit.launch.spec import build_spec

from test_render import bash_syntax_ok, check_golden, golden_options, required_options


def ray_spec(site: str = "testbed", **kw):
    return build_spec(sites.load_site(site), golden_options(site, ray=True, nodes=2, **kw))


def test_a_ray_job_matches_golden_and_bash_reads_it():
    spec = ray_spec(script_args=("--name", "a'; echo foo", "$(touch pwned)"))
    text = render.render_sbatch(spec)
    bash_syntax_ok(text)
    check_golden("sbatch-testbed-ray.sh", text)


def steps(spec) -> dict:
    """The launch's steps by name (launchplan.plan)."""
    return {step.name: step for step in launchplan.plan(spec).steps}


def test_the_head_is_on_the_fabric_address_and_the_script_runs_once_as_the_driver():
    spec = ray_spec()
    launch = launchplan.plan(spec)
    text = render.render_sbatch(spec)
    # MASTER_ADDR: picked on the site's interface (ib0 on the testbed) on this, the first node.
    assert launch.pick_addr and launch.pick_port and launch.ray
    assert 'ray_head="${MASTER_ADDR:-${nodes[0]}}:$MASTER_PORT"' in text
    assert "raynode head \"$ray_head\" --cpus 2 --gpus 0 --backend gloo" in text
    assert "raynode worker \"$ray_head\"" in text and "raynode stop \"$ray_head\"" in text
    # One driver: one task on the first node, the script from the job's copy, no torch bootstrap.
    by_name = steps(spec)
    driver = by_name["Ray driver"]
    assert "--ntasks=1" in driver.options and driver.nodes == (0, 1) and driver.end == JOB
    assert driver.argv[3:] == ("driver", RAY_HEAD, "--nodes", "2", "--deadline", str(JOIN_S), "/home/user/train.py",
                               "--epochs", "3")
    assert "slurmtorch.bootstrap --backend" not in text
    # One Slurm task per node holding the node's CPUs: Ray's node is the unit.
    assert (spec.ntasks_per_node, spec.ntasks, spec.cpus_per_task) == (1, 2, 2)
    workers = by_name["Ray workers"]
    assert "--nodes=1" in workers.options and "--kill-on-bad-exit=1" in workers.options and workers.nodes == (1, 1)
    assert (by_name["Ray head"].end, workers.end, by_name["Ray stop"].end) == (VITAL, VITAL, CLEANUP)


def test_a_ray_job_over_two_node_types_runs_a_worker_step_a_role_each_with_its_roles_resource():
    spec = build_spec(sites.load_site("testbed"), golden_options("testbed", ray=True,
                                                                 roles=("master=1", "worker=2:partition=fat")))
    text = render.render_sbatch(spec)
    bash_syntax_ok(text)
    check_golden("sbatch-testbed-ray-roles.sh", text)
    launch = launchplan.plan(spec)
    assert launch.node_list == "\"$SLURM_JOB_NODELIST_HET_GROUP_0,$SLURM_JOB_NODELIST_HET_GROUP_1\""
    head, workers, driver, *stops = launch.steps
    assert "--het-group=0" in head.options and head.argv[-2:] == ("--role", "master")
    assert (workers.nodes, workers.argv[-2:]) == ((1, 2), ("--role", "worker"))
    assert "--het-group=1" in workers.options and workers.env == ("env", "TESTBED_NODE_TYPE=fat")
    assert [s.nodes for s in stops] == [(0, 1), (1, 2)]  # a stop step a component
    assert driver.argv[5:7] == ("--nodes", "3")


def test_hang_timeout_is_how_long_the_cluster_may_take_to_form():
    head = steps(ray_spec(hang_timeout=45))["Ray head"]
    assert head.argv[head.argv.index("--deadline") + 1] == "45"
    with pytest.raises(SpecError, match="--hang-timeout needs --max-restarts"):
        build_spec(sites.load_site("testbed"), golden_options("testbed", nodes=2, hang_timeout=45))


def test_a_module_runs_from_the_jobs_copy_as_the_driver():
    driver = steps(ray_spec(script=None, module="pkg.train"))["Ray driver"]
    assert driver.argv[-4:] == ("-m", "pkg.train", "--epochs", "3")


@pytest.mark.parametrize("kw, message", [
    (dict(roles=("master=1", "worker=1:tasks=2")), "a role's tasks= cannot apply"),
    (dict(roles=("master=1", "worker=1"), role_images=("worker=img",)), "--role-image cannot apply"),
    (dict(launcher="mpirun"), "--launcher mpirun cannot"),
    (dict(launcher="torchrun"), "--launcher torchrun cannot"),
    (dict(max_restarts=2), "--ray does not restart"),
    (dict(ntasks=4), "one Ray node per Slurm node"),
    (dict(ntasks_per_node=2), "one Ray node per Slurm node"),
    (dict(kind="mpirun"), "a batch job"),
])
def test_what_a_ray_job_cannot_be_is_refused_in_one_line(kw, message):
    with pytest.raises(SpecError, match=message) as exc:
        ray_spec(**kw)
    assert "\n" not in exc.value.message


def test_a_sites_default_launcher_does_not_stop_a_ray_job():
    spec = ray_spec("jsc-juwels-booster", **required("jsc-juwels-booster"))  # the site's launcher: mpirun
    assert spec.launcher == "srun" and launchplan.plan(spec).ray


def test_every_ray_step_runs_in_the_jobs_apptainer_container():
    spec = ray_spec("idris-jean-zay-singularity", **required("idris-jean-zay-singularity"))
    assert spec.container is not None
    for step in launchplan.plan(spec).steps:
        assert step.argv[:2] == ("singularity", "exec")
        assert spec.container.interpreter in step.argv and "slurmtorch.bootstrap.raynode" in step.argv
    bash_syntax_ok(render.render_sbatch(spec))


def test_every_ray_step_names_the_pyxis_image():
    spec = ray_spec("cscs-alps", container_image="nvcr.io#nvidia/pytorch:25.01-py3", container_runtime="pyxis",
                    **required("cscs-alps"))
    for step in launchplan.plan(spec).steps:
        assert "--container-image=nvcr.io#nvidia/pytorch:25.01-py3" in step.options
    bash_syntax_ok(render.render_sbatch(spec))


def required(site_name: str) -> dict:
    return required_options(sites.load_site(site_name))


# The steps reaped, in a real bash: tests/submit/test_batchnode_shell.py.


# ------------------------------------------------------------------ raynode's words

def test_raynode_reads_the_batch_scripts_words():
    assert raynode.parse(["head", "10.0.0.1:6379", "--cpus", "2", "--gpus", "0", "--backend", "gloo",
                          "--deadline", "30"]) == ("head", "10.0.0.1:6379", {"--cpus": "2", "--gpus": "0",
                                                                             "--backend": "gloo",
                                                                             "--deadline": "30"}, [])
    kind, _, opts, program = raynode.parse(["driver", "h:1", "--nodes", "2", "--deadline", "9", "s.py", "--nodes", "x"])
    assert (kind, opts, program) == ("driver", {"--nodes": "2", "--deadline": "9"}, ["s.py", "--nodes", "x"])
    assert raynode.parse(["driver", "h:1", "--nodes", "2", "--deadline", "9", "--import-from", "/c", "-m", "p"])[2:] \
        == ({"--nodes": "2", "--deadline": "9", "--import-from": "/c"}, ["-m", "p"])
    assert raynode.parse(["stop", "h:1"]) == ("stop", "h:1", {}, [])


@pytest.mark.parametrize("argv", [[], ["boss", "h:1"], ["head", "h:1", "--cpus", "2"], ["driver", "h:1", "--nodes",
                                                                                         "2", "--deadline", "9"],
                                  ["driver", "h:1", "--nodes", "2", "--deadline", "9", "-m"]])
def test_raynode_refuses_words_it_cannot_read(argv):
    with pytest.raises(ValueError, match="usage"):
        raynode.parse(argv)


def test_rays_folder_is_per_job_and_node_and_short_enough_for_its_sockets(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "123456")
    monkeypatch.setenv("SLURMD_NODENAME", "node2")
    assert raynode.temp_dir() == "/tmp/slurmtorch-ray-123456-node2"
    monkeypatch.setenv("SLURMD_NODENAME", "n" * 40)
    with pytest.raises(raynode.BootstrapError, match="too long for Ray's sockets"):
        raynode.temp_dir()


def test_rendering_a_ray_job_imports_no_ray(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text("import ray\n")
    code = ("import sys\nfrom slurmtorch.cli.main import main\n"
            f"try:\n    main(['sbatch', '--site', 'testbed', '-N', '2', '--ray', '--dry-run', {str(script)!r}])\n"
            "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            "print('HEAVY', [m for m in ('ray', 'torch') if m in sys.modules], file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"SLURMTORCH_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"})
    assert "HEAVY []" in proc.stderr, proc.stderr
    assert "raynode driver" in proc.stdout


def test_the_nodes_that_did_not_join_are_named_by_their_slurm_names():
    alive = [{"NodeManagerHostname": "node1.cluster", "NodeManagerAddress": "198.18.0.139"}]
    assert raydriver.missing_nodes(alive, ["node1", "node2", "node3"], 3) == ["node2", "node3"]
    # Host names that are not Slurm's: every Slurm name is listed, none can be told joined.
    assert raydriver.missing_nodes([{"NodeManagerHostname": "x", "NodeManagerAddress": "10.0.0.1"}], ["a", "b"], 2) \
        == ["a", "b"]
    # Every Slurm name seen, yet fewer Ray nodes than wanted: how many are missing.
    assert raydriver.missing_nodes(alive, ["node1"], 2) == ["1 node(s)"]


# ------------------------------------------------------------------ Ray's ports, the job's own

def test_ray_start_takes_the_ports_picked_here_not_rays_fixed_defaults():
    """Ray's defaults (dashboard 8265, client server 10001, agent 52365, workers 10002-19999)
    are the same for every Ray on a node: two jobs sharing it would meet there."""
    opts = {"--cpus": "2", "--gpus": "0"}
    ports = raynode.RayPorts(agent=21001, dashboard=21002, client=21003)
    head = raynode.ray_start_argv("head", ("10.0.0.1", 23456), "10.0.0.1", opts, "/tmp/r", ports)
    assert head[1:4] == ["-m", "ray.scripts.scripts", "start"]
    assert {"--head", "--port=23456", "--dashboard-port=21002", "--dashboard-host=127.0.0.1",
            "--ray-client-server-port=21003", "--dashboard-agent-listen-port=21001",
            "--min-worker-port=0", "--max-worker-port=0", "--node-ip-address=10.0.0.1"} <= set(head)
    assert "--include-dashboard" not in " ".join(head)  # Ray's default: on, and a port it cannot bind is no failure
    worker = raynode.ray_start_argv("worker", ("10.0.0.1", 23456), "10.0.0.2", opts, "/tmp/r",
                                    raynode.RayPorts(agent=21004))
    assert {"--address=10.0.0.1:23456", "--dashboard-agent-listen-port=21004", "--min-worker-port=0",
            "--max-worker-port=0"} <= set(worker)
    assert not [a for a in worker if a.startswith(("--head", "--dashboard-port", "--ray-client-server-port"))]


def test_a_role_jobs_ray_node_has_one_of_its_roles_resource():
    kind, _, opts, _ = raynode.parse(["worker", "10.0.0.1:6379", "--cpus", "2", "--gpus", "0", "--backend", "gloo",
                                      "--deadline", "30", "--role", "worker"])
    argv = raynode.ray_start_argv(kind, ("10.0.0.1", 6379), "10.0.0.2", opts, "/tmp/r", raynode.RayPorts(agent=1))
    assert '--resources={"role:worker": 1}' in argv


def test_a_head_without_rays_client_gets_no_client_server_port():
    """Ray refuses --ray-client-server-port where its client's grpc is missing (minimal Ray)."""
    head = raynode.ray_start_argv("head", ("h", 1), "10.0.0.1", {"--cpus": "1", "--gpus": "0"}, "/tmp/r",
                                  raynode.RayPorts(agent=2, dashboard=3))
    assert not [a for a in head if a.startswith("--ray-client-server-port")]


def test_the_ports_picked_are_free_distinct_and_not_the_gcs_ports():
    """Ray refuses one port given to two of its parts; each must be bindable here now."""
    for _ in range(20):
        ports = raynode.pick_ports("head", taken=23456)
        picked = [p for p in (ports.agent, ports.dashboard, ports.client) if p is not None]
        assert len(set(picked)) == len(picked) and 23456 not in picked and ports.dashboard is not None
        for port in picked:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
    worker = raynode.pick_ports("worker", taken=23456)
    assert worker.dashboard is None and worker.client is None and worker.agent != 23456


def test_the_heads_line_says_where_its_dashboard_is(monkeypatch):
    monkeypatch.setenv("SLURMTORCH_JOB_DIR", "/home/u/jobs/7")
    line = raynode.up_line("head", "node1", "198.18.0.139", 23456, 31234)
    assert line == ("Ray head on node1 up at 198.18.0.139:23456; its dashboard at http://127.0.0.1:31234 on node1 "
                    "(from the login node: ssh -L 31234:127.0.0.1:31234 node1)")
    assert raynode.up_line("head", "node1", "198.18.0.139", 23456, None) == (
        "Ray head on node1 up at 198.18.0.139:23456; no dashboard (Ray runs one where ray[default] is installed; "
        "why not: /home/u/jobs/7/ray-node1.out)")
    assert raynode.up_line("worker", "node2", "198.18.0.140", 23456, None) == "Ray worker on node2 up at 198.18.0.140"


def test_a_ray_start_that_gave_up_on_registration_with_the_nodes_vital_processes_running_is_a_node_starting_late():
    """Issue 44: `ray start` waits 30 s (Ray's, fixed) for its node to register; on a loaded
    node it exits 1 while the raylet goes on and registers later: that node runs."""
    assert raynode.started("worker", 0, set())
    assert raynode.started("worker", 1, {"raylet", "python"})
    assert not raynode.started("worker", 1, {"python"})  # its raylet gone: it did not start
    assert raynode.started("head", 1, {"gcs_server", "raylet"})
    assert not raynode.started("head", 1, {"raylet"})


def test_a_late_nodes_line_says_ray_start_gave_up_and_the_hang_timeout_decides():
    assert raynode.late_note("head", 1, 300) == (
        "it registers late: ray start stopped waiting after Ray's own 30 s and exited with 1, its gcs_server and "
        "raylet running; the driver waits up to 300 s (--hang-timeout) for every node")


def test_a_raylet_that_ended_before_its_agents_wrote_their_ports_ended_unregistered(tmp_path):
    """Issue 44: a raylet waits 15 s (Ray's, fixed) for its agents' port files, then ends; it
    registers its node only once it has read them all. A worker whose raylet ended before
    they were all there is started again; one that ended after is a node that died."""
    temp = tmp_path / "slurmtorch-ray-unit-node9"  # no process of this test's session names it
    logs = temp / "session_2026-12-07_1" / "logs"
    logs.mkdir(parents=True)
    no_session = 2 ** 22 + 7  # above any pid this test can meet
    (logs / "raylet.out").write_text("")
    assert raynode.raylet_ended(no_session, str(temp)) is None  # it has not run yet
    (logs / "raylet.out").write_text("[...] (raylet) main.cc:283: Setting cluster ID to: 18a2\n")
    for name in raynode.AGENT_PORT_FILES[:-1]:
        (logs.parent / f"{name}_b762f0").write_text("35069")
    assert raynode.raylet_ended(no_session, str(temp)) == "unready"
    (logs.parent / f"{raynode.AGENT_PORT_FILES[-1]}_b762f0").write_text("35070")
    assert raynode.raylet_ended(no_session, str(temp)) == "died"
