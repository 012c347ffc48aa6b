"""`slurmtorch alloc` as values: the salloc command, the shell's set-up, what `slurmtorch run`
reads back and the launch script it runs from the shell (pure; the testbed drives the real
thing in tests/cli/test_alloc_testbed.py). Goldens: SLURMTORCH_UPDATE_GOLDEN=1."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from slurmtorch import protocol
from slurmtorch.errors import SpecError
from slurmtorch.submit import sites
from slurmtorch.submit.launch import interactive, launchplan, render
from slurmtorch.submit.launch.spec import build_spec
from test_render import bash_syntax_ok, check_golden, golden_options

CLI = [sys.executable, "-m", "slurmtorch"]


def alloc_spec(site: str = "testbed", **kw):
    """The spec `slurmtorch alloc` builds: no program yet."""
    opts = dict(script=None, script_args=(), interactive=True, job_name="interactive",
                command=("slurmtorch", "alloc", "--site", site))
    opts.update(kw)
    return build_spec(sites.load_site(site), golden_options(site, **opts))


def run_spec(site: str = "testbed", **kw):
    """The spec `slurmtorch run train.py --epochs 3` builds in the shell."""
    return build_spec(sites.load_site(site), golden_options(site, interactive=True, **kw))


def test_salloc_asks_for_what_the_batch_job_would_less_its_batch_only_lines():
    spec = alloc_spec(nodes=2, time="30")
    argv = interactive.salloc_argv(spec, "/tmp/x/setup.sh")
    assert argv == ["salloc", "--cpus-per-task=2", "--job-name=interactive", "--nodes=2", "--ntasks-per-node=1",
                    "--partition=debug", "--time=30", "bash", "--rcfile", "/tmp/x/setup.sh", "-i"]
    batch = dict(build_spec(sites.load_site("testbed"), golden_options("testbed", nodes=2, time="30")).directives)
    assert {"output", "no-requeue"} <= batch.keys()  # the batch job's own, which salloc has no option for
    assert not any(a.startswith(("--output", "--no-requeue", "--open-mode")) for a in argv)


@pytest.mark.parametrize("launcher", ["srun", "torchrun", "mpirun"])
def test_alloc_renders_for_every_launcher_before_there_is_a_program(launcher):
    spec = alloc_spec(nodes=2, launcher=launcher)
    assert interactive.salloc_argv(spec, "S")[0] == "salloc"
    assert interactive.render_setup(spec, "{}", ["python3"])


def test_salloc_passes_sbatch_options_and_flags_on():
    spec = alloc_spec(nodes=1, exclusive=True, constraint="cpu&testbed", sbatch_args=("--licenses=fs:1",))
    argv = interactive.salloc_argv(spec, "S")
    assert "--exclusive" in argv and "--constraint=cpu&testbed" in argv and "--licenses=fs:1" in argv


def test_the_shell_setup_has_the_sites_environment_and_modules_and_reads_bashrc():
    spec = alloc_spec("hdr-ib", nodes=2)
    text = interactive.render_setup(spec, interactive.stored("hdr-ib", {"nodes": 2}), ["/v/bin/python", "-m", "slurmtorch"])
    bash_syntax_ok(text)
    assert '. "$HOME/.bashrc"' in text
    for name in spec.modules:
        assert f"module load {name}" in text
    for name, _ in spec.env:
        assert f"export {name}=" in text
    assert "slurmtorch() { /v/bin/python -m slurmtorch \"$@\"; }" in text
    assert interactive.RUN_HINT in text


def test_the_shell_setup_matches_golden():
    spec = alloc_spec("hdr-ib", nodes=2, env=("A=b c",))
    stored = interactive.stored("hdr-ib", {"nodes": 2, "env": ["A=b c"]})
    check_golden("alloc-shell-hdr-ib.sh", interactive.render_setup(spec, stored, ["/opt/venv/bin/python", "-m",
                                                                                  "slurmtorch"]))


def test_the_setup_carries_the_options_back_to_run_through_a_real_shell():
    """What alloc stores reaches `slurmtorch run` byte for byte, however odd the values."""
    params = {"nodes": 2, "env": ["X=a'; echo pwned", "Y=$(id)\n"], "job_name": None, "sweep": []}
    stored = interactive.stored("/sites/a b.yaml", params)
    setup = interactive.render_setup(alloc_spec(), stored, ["python3"])
    out = subprocess.run(["bash", "-c", f'PS1=; {setup}\nprintf %s "${protocol.ALLOC}" >&2'], capture_output=True,
                         text=True, env={"HOME": "/nonexistent", "PATH": os.environ["PATH"]}, timeout=30)
    environ = {protocol.ALLOC: out.stderr, "SLURM_JOB_ID": "7"}
    assert interactive.read_stored(environ) == ("7", "/sites/a b.yaml", {"nodes": 2, "env": params["env"]})


@pytest.mark.parametrize("environ", [{}, {"SLURM_JOB_ID": "7"}, {protocol.ALLOC: "{}"}])
def test_run_outside_an_allocation_shell_is_one_line_with_the_fix(environ):
    with pytest.raises(SpecError, match="shell of slurmtorch alloc") as e:
        interactive.read_stored(environ)
    assert "slurmtorch alloc --site" in (e.value.tip or "")


def test_a_mangled_alloc_variable_is_named():
    with pytest.raises(SpecError, match=protocol.ALLOC):
        interactive.read_stored({protocol.ALLOC: "[1]", "SLURM_JOB_ID": "7"})


@pytest.mark.parametrize("ref, kept", [("testbed", "testbed"), ("sites/x.yaml", os.path.abspath("sites/x.yaml")),
                                       ("x.yml", os.path.abspath("x.yml"))])
def test_a_site_path_is_kept_absolute_for_runs_in_other_folders(ref, kept):
    assert interactive.site_for_later(ref) == kept


@pytest.mark.parametrize("launcher", ["srun", "torchrun", "mpirun"])
def test_the_run_script_matches_golden(launcher):
    spec = run_spec(nodes=2, launcher=launcher,
                    command=("slurmtorch", "run", "train.py", "--epochs", "3"))
    text = render.render_sbatch(spec)
    bash_syntax_ok(text)
    check_golden(f"alloc-run-testbed-{launcher}.sh", text)


def test_the_run_script_leaves_modules_and_environment_to_the_shell():
    """A variable exported in the shell for one run (NCCL_DEBUG=INFO) must win over the site's."""
    spec = run_spec("hdr-ib", nodes=2)
    batch = render.render_sbatch(build_spec(sites.load_site("hdr-ib"), golden_options("hdr-ib", nodes=2)))
    text = render.render_sbatch(spec)
    assert "module load" in batch and "module load" not in text
    name = spec.env[0][0]
    assert f"export {name}=" in batch and f"export {name}=" not in text


def test_the_run_picks_rank_0s_port_and_address_on_the_first_node_with_srun():
    """salloc's shell stays on the login host: a port free there says nothing of node 1, and
    its address is not node 1's."""
    text = render.render_sbatch(run_spec(nodes=2))
    assert "MASTER_PORT=$(on_first_node free_port)" in text and "MASTER_ADDR=$(on_first_node fabric_address gloo)" in text
    assert 'first_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in text
    # One task on the first node, named: not --relative=0, where Slurm only begins to look (the
    # step may land on node 2); --overlap: it needs no CPUs of its own, so it never waits for a step.
    helper = next(line for line in text.splitlines() if line.startswith("on_first_node() {"))
    assert 'srun --nodes=1 --ntasks=1 --overlap --mpi=none --quiet --nodelist="$first_node" bash -c ' in helper
    assert "--relative" not in text


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_the_ranks_output_comes_to_the_terminal_and_one_ctrl_c_ends_the_step(launcher):
    (step,) = launchplan.plan(run_spec(nodes=2, launcher=launcher)).steps
    assert "--quit-on-interrupt" in step.options
    assert not any(a.startswith(("--output", "--error")) for a in step.options)
    (batch,) = launchplan.plan(build_spec(sites.load_site("testbed"), golden_options("testbed", nodes=2,
                                                                                    launcher=launcher))).steps
    assert "--quit-on-interrupt" not in batch.options


def test_mpirun_ranks_write_to_the_terminal():
    (step,) = launchplan.plan(run_spec(nodes=2, launcher="mpirun")).steps
    assert step.argv[:3] == ("bash", "-c", launchplan.TERMINAL_WRAPPER)
    out = subprocess.run(["bash", "-c", step.argv[2], "slurmtorch-rank", "/nowhere", "echo", "a b"],
                         capture_output=True, text=True, timeout=30)
    assert out.stdout == "a b\n"


def test_a_site_with_a_container_is_refused_in_one_line():
    spec = alloc_spec(container_image="nvcr.io#nvidia/pytorch:24.05-py3")
    with pytest.raises(SpecError, match="container"):
        interactive.check(spec)


def test_dry_run_text_shows_the_command_and_the_setup():
    spec = alloc_spec(nodes=2)
    text = interactive.dry_run_text(spec, "SETUP-TEXT\n")
    lines = text.splitlines()
    assert lines[1].startswith("salloc --cpus-per-task=2 ") and lines[1].endswith("bash --rcfile SETUP -i")
    assert lines[-1] == "SETUP-TEXT"


def run_cli(*args, env=None, cwd=None):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={**os.environ, **(env or {})})


def test_alloc_dry_run_obtains_nothing_and_prints_the_salloc_line():
    proc = run_cli("alloc", "--site", "testbed", "--nodes", "2", "--dry-run", env={"PATH": "/nonexistent"})
    assert proc.returncode == 0, proc.stderr
    assert "\nsalloc --cpus-per-task=2 --job-name=interactive --nodes=2 " in proc.stdout
    assert f"export {protocol.ALLOC}=" in proc.stdout


def test_alloc_takes_sbatchs_options_less_the_batch_only_ones():
    from slurmtorch.cli import alloc, sbatch

    assert set(alloc.ALLOC_OPTIONS) <= set(sbatch.SBATCH_OPTIONS)
    assert {"nodes", "partition", "time", "env", "launcher", "srun_args"} <= set(alloc.ALLOC_OPTIONS)
    proc = run_cli("alloc", "--site", "testbed", "--array", "0-3", "--dry-run")
    assert proc.returncode == 2 and "--array" in proc.stderr


@pytest.mark.parametrize("args, says", [
    (["--site", "no-such-site"], "unknown site 'no-such-site'"),
    (["--site", "testbed", "--nodes", "9"], "9 nodes requested, but partition 'debug' allows at most 4"),
])
def test_alloc_refusals_are_one_line_before_salloc(args, says, tmp_path):
    # No salloc on PATH at all: a refusal must come before anything is asked of Slurm.
    proc = run_cli("alloc", *args, env={"PATH": str(tmp_path), "SLURMTORCH_HOME": str(tmp_path / "home")})
    assert proc.returncode != 0
    assert proc.stderr.splitlines()[0].startswith(f"error: {says}")
    assert "Traceback" not in proc.stderr and not (tmp_path / "home").exists()


def test_run_in_a_plain_shell_says_where_it_works(tmp_path):
    (tmp_path / "train.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k not in (protocol.ALLOC, "SLURM_JOB_ID")}
    proc = subprocess.run([*CLI, "run", "train.py"], capture_output=True, text=True, timeout=60, env=env,
                          cwd=tmp_path)
    assert proc.returncode != 0
    assert proc.stderr.startswith("error: slurmtorch run starts ranks in the shell of slurmtorch alloc")


def test_run_dry_run_in_an_allocation_shell_renders_the_launch(tmp_path):
    (tmp_path / "train.py").write_text("")
    env = {protocol.ALLOC: json.dumps({"site": "testbed", "options": {"nodes": 2}}), "SLURM_JOB_ID": "12"}
    proc = run_cli("run", "--dry-run", "train.py", "--lr", "1", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "srun --nodes=2 --ntasks=2 " in proc.stdout and "--quit-on-interrupt" in proc.stdout
    assert f"{tmp_path / 'train.py'} --lr 1\n" in proc.stdout
