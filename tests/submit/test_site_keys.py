"""The site keys of issue 12, each from the site file to the rendered script.

srun_args (site, node type, partition; before --srun-arg), partition directives and
account/QOS defaults, `required:`, directives removed with null (a QOS-routed site's
missing `#SBATCH --partition`), env path composition (prepend_path/append_path, read
back in a real bash), module purge/use, the node prologue (its failure path run in a
real bash with a stand-in srun) and gpu_vendor. The site is tests/sites/site-keys.yaml.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from slurmtorch.errors import SiteError, SpecError
from slurmtorch.submit.launch import interactive, launchplan, render
from slurmtorch.submit import sites
from slurmtorch.submit.launch.environment import composed
from slurmtorch.submit.sites.slurmoptions import SRUN_REFUSED
from slurmtorch.submit.launch.spec import build_spec

from test_render import bash_syntax_ok, check_golden, golden_options

KEYS_SITE = Path(__file__).resolve().parents[1] / "sites" / "site-keys.yaml"


@pytest.fixture(scope="module")
def keys():
    return sites.load_site(KEYS_SITE)


def opts(**kw):
    return golden_options("site-keys", **{"account": "m1234", **kw})


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


MINIMAL = """\
node_types:
  cpu: {gpus: 0, cpus: 4, fabric: ethernet, interfaces: [eth0]}
partitions:
  debug: {max_nodes: 2, max_time: "01:00:00", node_type: cpu, default: true}
"""


def problems(path: Path) -> list[str]:
    with pytest.raises(SiteError) as e:
        sites.load_site(path)
    return [message for message, _tip in e.value.problems]


# ------------------------------------------------------------------ goldens

@pytest.mark.parametrize("launcher", ["srun", "torchrun", "mpirun"])
def test_every_site_key_matches_golden(keys, launcher):
    users = ("--label",) if launcher != "mpirun" else ()
    text = render.render_sbatch(build_spec(keys, opts(launcher=launcher, preset="plugin", srun_args=users)))
    bash_syntax_ok(text)
    check_golden(f"sbatch-site-keys-{launcher}.sh", text)


def test_a_debug_route_with_its_own_defaults_matches_golden(keys):
    text = render.render_sbatch(build_spec(keys, golden_options("site-keys", partition="debug", preset="exclusive")))
    bash_syntax_ok(text)
    check_golden("sbatch-site-keys-debug.sh", text)


# ------------------------------------------------------------------ srun_args

def test_site_node_type_and_partition_srun_args_come_before_the_users_on_every_rank_launch(keys):
    want = ["--cpu-bind=cores", "--gpu-bind=none", "--network=disable_rdzv_get", "--label"]
    for launcher in ("srun", "torchrun"):
        spec = build_spec(keys, opts(launcher=launcher, srun_args=("--label",)))
        assert list(spec.srun_args) == want
        assert list(launchplan.plan(spec).steps[-1].options[-4:]) == want  # after the node prologue
    roles = build_spec(keys, opts(roles=("master=1", "worker=1"), ntasks_per_node=1, srun_args=("--label",)))
    assert all(list(step.options[-4:]) == want for step in launchplan.plan(roles).steps if step.end != "check")


def test_the_mpirun_launcher_starts_no_srun_so_the_sites_srun_args_do_not_apply(keys):
    spec = build_spec(keys, opts(launcher="mpirun"))
    assert spec.srun_args == ()
    with pytest.raises(SpecError, match="launcher mpirun starts its ranks without srun"):
        build_spec(keys, opts(launcher="mpirun", srun_args=("--label",)))


@pytest.mark.parametrize("name", sorted(SRUN_REFUSED))
def test_site_srun_args_refuse_what_slurmtorch_sets_with_the_escape_hatchs_own_table(tmp_path, name):
    """One owner for the rule: every option --srun-arg refuses, srun_args: refuses on load."""
    found = problems(write(tmp_path, MINIMAL + f"srun_args: [--{name}=x]\n"))
    assert len(found) == 1 and f"srun_args[0]: '--{name}=x': " in found[0], found
    assert SRUN_REFUSED[name][0] in found[0]


def test_gpus_per_task_cannot_reach_torchruns_one_agent_per_node(tmp_path):
    site = sites.load_site(write(tmp_path, MINIMAL.replace("gpus: 0, cpus: 4", "gpus: 8, cpus: 64")
                                 + "srun_args: [--gpus-per-task=1]\n"))
    with pytest.raises(SpecError, match=r"--gpus-per-task=1 \(from the site's srun_args\) would give torchrun"):
        build_spec(site, golden_options("s", launcher="torchrun"))
    assert build_spec(site, golden_options("s", launcher="srun")).srun_args == ("--gpus-per-task=1",)


REMOVALS = MINIMAL.replace("fabric: ethernet,", "fabric: ethernet, srun_args: [--gpu-bind=none],") + """\
srun_args: [--cpu-bind=cores, --hint=nomultithread]
presets:
  unbound: {srun_args: [{--cpu-bind: null}, --cpu-bind=none]}
  free: {srun_args: [{--gpu-bind: null}, {--hint: null}]}
"""


def test_a_later_layers_null_removes_an_earlier_layers_srun_option(tmp_path):
    """A preset's (or a node type's, a partition's) `{--NAME: null}` takes --NAME out of the layers
    before it, as `directives:` null does: LUMI's torchrun preset drops the node type's CPU masks."""
    site = sites.load_site(write(tmp_path, REMOVALS))
    assert build_spec(site, golden_options("s")).srun_args == ("--cpu-bind=cores", "--hint=nomultithread",
                                                                "--gpu-bind=none")
    assert build_spec(site, golden_options("s", preset="unbound")).srun_args == (
        "--hint=nomultithread", "--gpu-bind=none", "--cpu-bind=none")
    spec = build_spec(site, golden_options("s", preset="free", srun_args=("--hint=compute_bound",)))
    assert spec.srun_args == ("--cpu-bind=cores", "--hint=compute_bound")  # the job's own --srun-arg stays
    assert sites.site_as_dict(site)["presets"]["unbound"]["srun_args"] == [{"--cpu-bind": None}, "--cpu-bind=none"]


@pytest.mark.parametrize("text, problem", [
    ("presets: {p: {srun_args: [{--cpu-bnd: null}]}}\n",
     "presets.p.srun_args[0]: removes --cpu-bnd, which no layer before it sets (site, node type, partition)"),
    ("srun_args: [{--cpu-bind: null}]\n",
     "srun_args[0]: the site's srun_args come first: there is nothing before them to remove"),
    ("presets: {p: {srun_args: [{--cpu-bind: cores}]}}\n",
     "presets.p.srun_args[0]: {'--cpu-bind': 'cores'}: a removal is {--NAME: null}"),
    ("presets: {p: {srun_args: [{--cpu-bind=cores: null}]}}\n",
     "presets.p.srun_args[0]: {'--cpu-bind=cores': None}: a removal is {--NAME: null}"),
])
def test_a_removal_names_an_option_an_earlier_layer_sets(tmp_path, text, problem):
    found = problems(write(tmp_path, MINIMAL + "srun_args: [--cpu-bind=cores]\n" * ("site's" not in problem) + text))
    assert any(p.endswith(problem) for p in found), found


GPU_BOARD = MINIMAL.replace("cpu: {gpus: 0, cpus: 4,", "cpu: {gpus: 4, cpus: 64, gpu_order: reverse,")


@pytest.mark.parametrize("launcher", ["srun", "torchrun", "mpirun"])
def test_a_node_types_gpu_order_reaches_the_ranks_of_a_slurm_job(tmp_path, launcher):
    """A board whose GPU 0 sits by the last NUMA node (ALCF's affinity table of the A100 board):
    local rank i takes GPU n-1-i in a batch job too (bootstrap.placement, SLURMTORCH_GPU_ORDER);
    the job's own --env wins."""
    site = sites.load_site(write(tmp_path, GPU_BOARD))
    assert dict(build_spec(site, golden_options("s", launcher=launcher)).env)["SLURMTORCH_GPU_ORDER"] == "reverse"
    mine = build_spec(site, golden_options("s", env=("SLURMTORCH_GPU_ORDER=natural",)))
    assert dict(mine.env)["SLURMTORCH_GPU_ORDER"] == "natural"
    natural = sites.load_site(write(tmp_path, GPU_BOARD.replace(" gpu_order: reverse,", "")))
    assert "SLURMTORCH_GPU_ORDER" not in dict(build_spec(natural, golden_options("s")).env)
    assert sites.site_as_dict(site)["node_types"]["cpu"]["gpu_order"] == "reverse"


# ------------------------------------------------------------------ directives, account, QOS

def test_a_qos_routed_site_writes_no_partition_line_and_routes_by_its_partition_entries(keys):
    spec = build_spec(keys, opts())
    header = dict(spec.directives)
    assert "partition" not in header and spec.partition == "regular"
    assert (header["qos"], header["constraint"], header["account"]) == ("regular", "gpu", "m1234")
    assert "#SBATCH --partition" not in render.render_sbatch(spec)
    debug = dict(build_spec(keys, opts(partition="debug")).directives)
    assert (debug["qos"], debug["reservation"]) == ("debug", "dbg") and "constraint" not in debug


def test_account_and_qos_come_from_the_option_then_the_preset_then_the_partition(tmp_path):
    site = sites.load_site(write(tmp_path, MINIMAL.replace("default: true}", "default: true, account: pa, qos: pq}")
                                 + "presets: {p: {qos: preset-q}}\n"))
    assert (build_spec(site, golden_options("s")).account, build_spec(site, golden_options("s")).qos) == ("pa", "pq")
    spec = build_spec(site, golden_options("s", preset="p", account="mine"))
    assert (spec.account, spec.qos) == ("mine", "preset-q")


def test_a_required_account_is_refused_before_sbatch_naming_the_partition_and_the_fix(keys):
    with pytest.raises(SpecError) as e:
        build_spec(keys, golden_options("site-keys"))
    assert e.value.message == ("partition 'regular' of site 'site-keys' requires a Slurm account and the job "
                               "names none")
    assert e.value.tip.startswith("pass -A ACCOUNT")
    assert build_spec(keys, golden_options("site-keys", partition="debug")).account == "m0000"  # required: []


def test_a_required_qos_and_a_partitions_own_list(tmp_path):
    site = sites.load_site(write(tmp_path, MINIMAL + "required: [qos]\n"))
    with pytest.raises(SpecError, match="requires a Slurm qos") as e:
        build_spec(site, golden_options("s"))
    assert "-q QOS" in e.value.tip
    assert build_spec(site, golden_options("s", qos="normal")).qos == "normal"
    assert build_spec(site, golden_options("s", kind="mpirun", ntasks=1)).qos is None  # no Slurm job, no QOS


def test_a_later_layers_null_removes_a_directive(keys):
    header = dict(build_spec(keys, opts(preset="exclusive")).directives)
    assert "constraint" not in header and header["exclusive"] is True


@pytest.mark.parametrize("name", ["nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "gpus-per-node", "time",
                                  "output", "error", "job-name", "account", "qos", "array", "open-mode", "signal"])
def test_lines_the_ranks_or_the_job_folder_depend_on_cannot_be_removed(tmp_path, name):
    found = problems(write(tmp_path, MINIMAL + f"directives: {{{name}: null}}\n"))
    assert len(found) == 1 and f"directives.{name}: the #SBATCH --{name} line cannot be removed" in found[0], found


def test_only_the_partition_line_may_be_removed_and_only_by_its_full_name(tmp_path):
    assert dict(sites.load_site(write(tmp_path, MINIMAL + "directives: {partition: null}\n")).directives) == {
        "partition": None}
    (found,) = problems(write(tmp_path, MINIMAL + "directives: {part: null}\n"))
    assert "read as --partition; write the option's full name" in found
    (found,) = problems(write(tmp_path, MINIMAL + "directives: {partition: gpu}\n"))
    assert "directives.partition: slurmtorch sets it" in found


# ------------------------------------------------------------------ env path composition

def _exports(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if ln.startswith("export "))


def _read_back(exports: str, name: str, before: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != name}
    if before is not None:
        env[name] = before
    out = subprocess.run(["bash", "-c", f"{exports}\nprintf '%s' \"${name}\""], capture_output=True, check=True,
                         env=env, text=True)
    return out.stdout


@pytest.mark.parametrize("before, after", [
    ("/usr/lib", "/opt/preset/lib:/opt/plugin/lib:/usr/lib:/opt/late/lib"),
    (None, "/opt/preset/lib:/opt/plugin/lib:/opt/late/lib"),
    ("", "/opt/preset/lib:/opt/plugin/lib:/opt/late/lib"),
])
def test_prepend_and_append_keep_the_jobs_own_value_in_a_real_shell(keys, before, after):
    """The issue's bug: `LD_LIBRARY_PATH: /opt/plugin/lib:$LD_LIBRARY_PATH` was exported
    literally. A composition keeps the value the job brings, with no stray ':' when it has none."""
    text = render.render_sbatch(build_spec(keys, opts(preset="plugin")))
    assert _read_back(_exports(text), "LD_LIBRARY_PATH", before) == after
    assert _read_back(_exports(text), "PATH", "/usr/bin") == "/usr/bin:/opt/tools/bin"


def test_path_folders_reach_the_script_through_the_one_quoting_path(tmp_path):
    site = sites.load_site(write(tmp_path, MINIMAL + "prepend_path: {PYTHONPATH: [\"/opt/a b\", \"/opt/it's\"]}\n"))
    text = render.render_sbatch(build_spec(site, golden_options("s")))
    line = next(ln for ln in text.splitlines() if ln.startswith("export PYTHONPATH="))
    assert line == "export PYTHONPATH='/opt/a b:/opt/it'\"'\"'s'\"${PYTHONPATH:+:$PYTHONPATH}\""
    assert _read_back(line, "PYTHONPATH", "/x") == "/opt/a b:/opt/it's:/x"


def test_compositions_apply_in_layer_order_and_a_later_plain_value_replaces_them(tmp_path):
    site = sites.load_site(write(tmp_path, MINIMAL.replace(
        "interfaces: [eth0]}", "interfaces: [eth0], prepend_path: {P: /node}, env: {Q: /base}}") + """\
prepend_path: {P: /site, Q: /site-q}
append_path: {P: [/site-end]}
presets:
  over: {prepend_path: {P: /preset}}
  plain: {env: {P: /only}}
"""))
    spec = build_spec(site, golden_options("s", preset="over"))
    assert spec.env_paths == (("P", ("/preset", "/node", "/site"), ("/site-end",)),)
    assert dict(spec.env)["Q"] == "/base"  # the node type's plain value replaced the site's composition
    assert dict(build_spec(site, golden_options("s", preset="plain")).env)["P"] == "/only"
    assert build_spec(site, golden_options("s", preset="plain")).env_paths == ()
    site2 = sites.load_site(write(tmp_path, MINIMAL + "env: {P: /base}\nprepend_path: {P: /front}\n"))
    assert dict(build_spec(site2, golden_options("s")).env)["P"] == "/front:/base"  # folded: a literal value
    user = build_spec(site, golden_options("s", preset="over", env=("P=/mine",)))
    assert dict(user.env)["P"] == "/mine" and user.env_paths == ()


def test_composed_gives_what_the_script_computes():
    edits = (("A", ("/f",), ()), ("B", (), ("/b",)), ("C", ("/f",), ("/b",)))
    assert composed(edits, {"A": "/x", "C": ""}) == [("A", "/f:/x"), ("B", "/b"), ("C", "/f:/b")]


@pytest.mark.parametrize("value, fix", [("/opt/plugin/lib:$LD_LIBRARY_PATH", "prepend_path"),
                                        ("${HOME}/lib", "{expand:"), ("$X", "{expand:")])
def test_a_plain_env_value_that_expects_expansion_is_refused_with_the_fix(tmp_path, value, fix):
    """The fix fits what was written (issue 34): folders before the variable's own value are a
    composition; any other variable a job-time value."""
    (found,) = problems(write(tmp_path, MINIMAL + f"env: {{LD_LIBRARY_PATH: '{value}'}}\n"))
    assert f"env.LD_LIBRARY_PATH: {value!r} would be exported literally" in found
    with pytest.raises(SiteError) as e:
        sites.load_site(write(tmp_path, MINIMAL + f"env: {{LD_LIBRARY_PATH: '{value}'}}\n"))
    assert fix in e.value.tip


@pytest.mark.parametrize("entry, problem", [
    ("/a:/b", "is not one literal folder"), ("$HOME/lib", "is not one literal folder"), ("''", "is not one literal"),
    ("[]", "expected a folder or a list of folders"), ("3", "expected a folder or a list of folders"),
])
def test_path_entries_must_be_literal_folders(tmp_path, entry, problem):
    (found,) = problems(write(tmp_path, MINIMAL + f"append_path: {{LD_LIBRARY_PATH: {entry}}}\n"))
    assert problem in found and "append_path.LD_LIBRARY_PATH" in found


# ------------------------------------------------------------------ modules

def test_module_purge_and_use_come_before_the_loads_in_a_login_shell(keys):
    text = render.render_sbatch(build_spec(keys, opts()))
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash -l"
    i = lines.index("module purge")
    assert lines[i:i + 4] == ["module purge", "module use /opt/site/modulefiles",
                              "module use '/opt/site/my modules'", "module load cuda/12.4"]


def test_module_use_alone_makes_a_login_shell(tmp_path):
    site = sites.load_site(write(tmp_path, MINIMAL + "module_use: [/opt/mf]\n"))
    text = render.render_sbatch(build_spec(site, golden_options("s")))
    assert text.startswith("#!/bin/bash -l\n") and "module use /opt/mf\n" in text and "module purge" not in text


AFTER = MINIMAL + """\
module_use: [/soft/modulefiles]
modules: [conda]
after_modules: [conda activate]
env: {NCCL_DEBUG: WARN}
"""


def between_the_modules_and_the_exports(text: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index("module load conda") + 1
    exports = next(i for i, ln in enumerate(lines) if ln.startswith("export NCCL_IB_DISABLE"))  # the first
    assert lines.index("export NCCL_DEBUG=WARN") > exports
    return [ln for ln in lines[start:exports] if ln and not ln.startswith("#")]


@pytest.mark.parametrize("kind", ["sbatch", "mpirun"])
def test_after_modules_lines_run_after_the_modules_and_before_the_exports(tmp_path, kind):
    """ALCF Polaris's PyTorch page: `module use /soft/modulefiles; module load conda; conda
    activate`, and the job's exports after it (the activation would otherwise change them)."""
    site = sites.load_site(write(tmp_path, AFTER))
    spec = build_spec(site, golden_options("s", kind=kind, **({"ntasks": 2} if kind == "mpirun" else {})))
    text = render.render_sbatch(spec) if kind == "sbatch" else render.render_mpirun(spec)
    bash_syntax_ok(text)
    assert between_the_modules_and_the_exports(text) == ["conda activate"]


def test_alloc_shells_set_up_runs_the_after_modules_lines_too(tmp_path):
    site = sites.load_site(write(tmp_path, AFTER))
    spec = build_spec(site, golden_options("s", interactive=True, script=None))
    shell = interactive.render_setup(spec, "{}", ["python3"])
    assert between_the_modules_and_the_exports(shell) == ["conda activate"]


def test_after_modules_lines_are_shell_lines_without_a_nul(tmp_path):
    assert problems(write(tmp_path, MINIMAL + 'after_modules: ["a\\0b"]\n'))[0].endswith(
        "after_modules[0]: contains a NUL byte, which no shell can carry")
    assert problems(write(tmp_path, MINIMAL + "after_modules: conda activate\n"))[0].endswith(
        "after_modules: expected a list of strings")


# ------------------------------------------------------------------ node prologue

def test_the_node_prologue_is_its_own_step_once_per_node_before_the_ranks(keys):
    spec = build_spec(keys, opts())
    assert spec.node_prologue == ('nvidia-smi -pm 1 >/dev/null', 'echo "ready on $(hostname)"', "echo node-type line")
    text = render.render_sbatch(spec)
    step = text.index('srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 ')
    assert text.index("export LD_LIBRARY_PATH") < step < text.index("MASTER_PORT=") < text.index("srun --nodes=1 ")
    assert "--output=/home/user/.slurmtorch/jobs/%j/node-prologue-%t.out" in text
    assert "--cpu-bind=cores" not in text[step:text.index("\n", step)]  # the ranks' srun_args are theirs


def test_an_array_jobs_node_prologue_writes_into_the_trials_folder(keys):
    text = render.render_sbatch(build_spec(keys, opts(array="0-3")))
    assert "--output=/home/user/.slurmtorch/jobs/%A/trial-%a/node-prologue-%t.out" in text


def test_a_failing_node_prologue_ends_the_job_with_exit_1_one_line_and_the_exit_code_file(keys, tmp_path):
    """Run the rendered script's prologue block in bash with a stand-in srun that fails."""
    text = render.render_sbatch(build_spec(keys, opts()))
    start = text.index("# The node prologue")
    block = text[text.index("finish() {"):text.index("\n", text.index("die() {")) + 1] + \
        text[start:text.index("\n\n", start)]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/sh\necho \"srun $*\" >> \"$SLURMTORCH_JOB_DIR/calls\"\nexit 3\n")
    (fake / "srun").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SLURMTORCH_JOB_DIR": str(tmp_path),
           "SLURM_JOB_NUM_NODES": "2"}
    proc = subprocess.run(["bash", "-c", block + "\necho reached-the-ranks"], capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and "reached-the-ranks" not in proc.stdout
    assert proc.stderr.strip() == (f"slurmtorch: error: node prologue failed (srun exit 3; see "
                                   f"{tmp_path}/node-prologue-*.out)")
    assert (tmp_path / "exit-code").read_text() == "1\n"
    assert "--nodes=2 --ntasks=2 --ntasks-per-node=1" in (tmp_path / "calls").read_text()
    (fake / "srun").write_text("#!/bin/sh\nexit 0\n")
    ok = subprocess.run(["bash", "-c", block + "\necho reached-the-ranks"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and ok.stdout == "reached-the-ranks\n"


def test_the_node_prologue_lines_run_under_bash_eu_as_written(keys, tmp_path):
    text = render.render_sbatch(build_spec(keys, opts()))
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("bash -euc "))
    argv = subprocess.run(["bash", "-c", "printf '%s\\0' " + line.strip()], capture_output=True, check=True,
                          text=True).stdout.split("\0")[:-1]
    assert argv == ["bash", "-euc", 'nvidia-smi -pm 1 >/dev/null\necho "ready on $(hostname)"\necho node-type line']


def test_slurmtorch_mpirun_refuses_a_site_with_a_node_prologue(tmp_path):
    site = sites.load_site(write(tmp_path, MINIMAL + "node_prologue: [hostname]\n"))
    with pytest.raises(SpecError, match="node_prologue, which runs as a Slurm job step; slurmtorch mpirun"):
        build_spec(site, golden_options("s", kind="mpirun", ntasks=1))
    # under sbatch it runs whatever the launcher: the batch script is inside the allocation
    assert "bash -euc hostname" in render.render_sbatch(build_spec(site, golden_options("s", launcher="mpirun")))


# ------------------------------------------------------------------ gpu_vendor

def test_amd_nodes_run_apptainer_with_rocm_and_nvidia_ones_with_nv(tmp_path):
    text = MINIMAL.replace("gpus: 0, cpus: 4, fabric: ethernet", "gpus: 8, cpus: 64, fabric: ethernet, gpu_vendor: amd")
    site = sites.load_site(write(tmp_path, text))
    (amd,) = launchplan.plan(build_spec(site, golden_options("s", container_image="/img.sif",
                                                            container_runtime="apptainer"))).steps
    assert amd.argv[:3] == ("apptainer", "exec", "--rocm")
    site = sites.load_site(write(tmp_path, text.replace(", gpu_vendor: amd", "")))
    (nv,) = launchplan.plan(build_spec(site, golden_options("s", container_image="/img.sif",
                                                           container_runtime="apptainer"))).steps
    assert nv.argv[:3] == ("apptainer", "exec", "--nv") and site.node_types[0].gpu_vendor == "nvidia"


def test_schema_lists_every_new_key():
    from slurmtorch.submit.sites import schema
    top = schema.json_schema()["properties"]
    for key in ("srun_args", "node_prologue", "prepend_path", "append_path", "module_purge", "module_use", "required"):
        assert key in top, key
    part = top["partitions"]["additionalProperties"]["properties"]
    assert {"account", "qos", "required", "directives", "srun_args"} <= set(part)
    nt = top["node_types"]["additionalProperties"]["properties"]
    assert nt["gpu_vendor"]["enum"] == ["nvidia", "amd"] and {"srun_args", "node_prologue", "prepend_path"} <= set(nt)
    assert top["directives"]["additionalProperties"]["type"][-1] == "null"
    assert re.fullmatch(top["srun_args"]["items"]["oneOf"][0]["pattern"], "--gpu-bind=closest")


def test_the_site_admins_guide_example_is_one_valid_site(tmp_path):
    """docs/site-admins.md builds one site step by step over its YAML blocks; together they must load."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "site-admins.md").read_text()
    section = guide.split("## One site, step by step", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    site = sites.load_site(write(tmp_path, "".join(blocks)))
    assert {nt.name for nt in site.node_types} == {"h100", "l40s"} and site.required == ("account",)
    spec = build_spec(site, golden_options("s", account="a1"))
    assert ("LD_LIBRARY_PATH", ("/opt/hpcx/nccl_rdma_sharp_plugin/lib",), ()) in spec.env_paths
    bash_syntax_ok(render.render_sbatch(spec))
    assert build_spec(site, golden_options("s", preset="debug")).account == "training"


def test_slurmtorch_mpirun_forwards_composed_paths_to_remote_ranks_too(tmp_path):
    site = sites.load_site(write(tmp_path, MINIMAL + "env: {A: '1'}\nprepend_path: {LD_LIBRARY_PATH: /opt/p}\n"))
    spec = build_spec(site, golden_options("s", kind="mpirun", ntasks=2))
    args = list(launchplan.plan(spec).steps[0].options)
    assert args[args.index("A") + 1:] == ["-x", "LD_LIBRARY_PATH"] and args[args.index("A") - 1] == "-x"
    assert 'export LD_LIBRARY_PATH=/opt/p"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"' in render.render_mpirun(spec)
