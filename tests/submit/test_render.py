"""Rendering: golden scripts for every bundled site and launcher, quoting read back by bash.

Regenerate the golden files with `SLURMTORCH_UPDATE_GOLDEN=1 pytest tests/submit/test_render.py`
and review the diff.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtorch import __version__
from slurmtorch.submit.launch import launchplan, render, scripttext
from slurmtorch import protocol, resources
from slurmtorch import shell
from slurmtorch.submit import sites
from slurmtorch.errors import ShellSafetyError, TemplateError
from slurmtorch.options import Options
from slurmtorch.submit.launch.spec import build_spec

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("SLURMTORCH_UPDATE_GOLDEN") == "1"
BUNDLED = sorted(p.stem for p in resources.site_configs_dir().glob("*.yaml"))
LAUNCHERS = ("srun", "mpirun", "torchrun")
ADVERSARIAL = ["a 0", "a'; echo foo", "a\n0", "$(touch pwned)", "`id`", "*", "--x=$HOME", "", "é ü"]


def golden_options(site: str, **kw) -> Options:
    base = dict(
        script="/home/user/train.py", script_args=("--epochs", "3"), python="/opt/venv/bin/python",
        job_root="/home/user/.slurmtorch/jobs",
        command=("slurmtorch", "sbatch", "--site", site, "train.py", "--", "--epochs", "3"),
    )
    base.update(kw)
    return Options(**base)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    # The version is part of the provenance line; goldens pin it as a placeholder.
    text = text.replace(f"slurmtorch {__version__} /", "slurmtorch VERSION /")
    if UPDATE:  # only the explicit flag writes goldens; a missing one fails, in CI or not
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"golden file golden/{name} is missing (SLURMTORCH_UPDATE_GOLDEN=1 writes it)", pytrace=False)
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"golden/{name}", "rendered"))
        pytest.fail(f"rendered script differs from golden/{name} "
                    f"(SLURMTORCH_UPDATE_GOLDEN=1 to accept):\n{diff}", pytrace=False)


def bash_syntax_ok(text: str) -> None:
    proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# Launchers a bundled site's jobs cannot sensibly use: HPE Cray EX systems have no mpirun
# (Cray MPICH starts under srun), and on the MI250X sites each rank's --gpus-per-task=1 (OLCF)
# or CPU mask (LUMI) cannot reach torchrun's one agent per node (refused: test_site_keys,
# test_centre_presets).
NOT_ON = {("slingshot-nvidia", "mpirun"), ("mi250x", "mpirun"), ("mi250x", "torchrun"), ("lumi-g", "mpirun"),
          ("lumi-g", "torchrun"), ("nersc-perlmutter", "mpirun")}
# Sites without Slurm (PBS): `slurmtorch mpirun` only, no batch script (their mpirun goldens below).
NO_SLURM = {"alcf-polaris"}


@pytest.mark.parametrize("site_name, launcher", [(s, launcher) for s in BUNDLED for launcher in LAUNCHERS
                                                  if (s, launcher) not in NOT_ON and s not in NO_SLURM])
def test_sbatch_script_matches_golden(site_name, launcher):
    site = sites.load_site(site_name)
    spec = build_spec(site, golden_options(site_name, launcher=launcher, **required_options(site)))
    text = render.render_sbatch(spec)
    bash_syntax_ok(text)
    check_golden(f"sbatch-{site_name}-{launcher}.sh", text)


def required_options(site) -> dict:
    """What a site's `required:` asks every job for (it refuses jobs without): an account in
    the default partition's form (IDRIS: NAME@v100), a time limit (TACC Vista)."""
    part = site.partition(None)
    account = "proj0001" + (part.account_suffix or "")
    if part.account_pattern and not re.fullmatch(part.account_pattern, account):
        account = "project_465000123"  # LUMI's form
    out: dict = {"account": account} if "account" in site.required else {}
    if "time" in site.required:
        out["time"] = "01:00:00"
    return out


# Bundled sites' named presets that change how ranks start (a container, another srun --mpi).
PRESET_GOLDENS = [("cscs-alps", "ce", "srun"), ("cscs-alps", "ce", "torchrun"), ("nersc-perlmutter", "shifter", "srun"),
                  ("lumi-g", "torchrun", "torchrun")]


@pytest.mark.parametrize("site_name, preset, launcher", PRESET_GOLDENS)
def test_preset_script_matches_golden(site_name, preset, launcher):
    site = sites.load_site(site_name)
    spec = build_spec(site, golden_options(site_name, launcher=launcher, preset=preset, nodes=2, **required_options(site)))
    text = render.render_sbatch(spec)
    bash_syntax_ok(text)
    check_golden(f"sbatch-{site_name}-{preset}-{launcher}.sh", text)


@pytest.mark.parametrize("launcher,image,checked", [
    ("srun", None, True), ("torchrun", None, True), ("mpirun", None, False),
    ("srun", "nvcr.io/nvidia/pytorch:24.01-py3", True)])
def test_srun_launches_fail_when_no_rank_started(launcher, image, checked):
    """srun exits 0 when its step never launched; mpirun does not. A rank in a container
    says it started too: the jobs folder is mounted in every container at its own path."""
    spec = build_spec(sites.load_site("testbed"), golden_options("testbed", launcher=launcher, container_image=image))
    text = render.render_sbatch(spec)
    assert ('[ -e "$SLURMTORCH_STARTED" ]' in text) is checked
    assert ("export SLURMTORCH_STARTED" in text) is checked


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_submitting_shells_launcher_variables_are_unset_before_the_sites_exports(launcher):
    spec = build_spec(sites.load_site("testbed"), golden_options("testbed", launcher=launcher))
    text = render.render_sbatch(spec)
    unset = next(ln for ln in text.splitlines() if ln.startswith("unset "))
    assert {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TF_CONFIG"} <= set(unset.split())
    assert text.index(unset) < text.index("export GLOO_SOCKET_IFNAME=ib0")
    # Ranks started without MPI meet on the site's interface, found on the first node.
    assert ("MASTER_PORT=$(free_port)" in text) is (launcher != "mpirun")


# Option shapes beyond the layout: sbatch's own options passed on, the escape hatch, and
# uneven layouts (-N 2 -n 3) under each launcher that can run them.
OPTION_SHAPES = {
    "options": dict(nodes=2, constraint="testbed&cpu", mem="1G", exclusive=True, dependency="afterok:12:13",
                    begin="now+1hour", gres="none", reservation="maint", nodelist="node[1-2]", exclude="node4",
                    mail_type="END,FAIL", mail_user="me@example.org", comment="it's mine", qos="normal",
                    sbatch_args=("--nice=5", "--licenses=fs:1", "--chdir=/home/user/a b"),
                    srun_args=("--label", "--cpu-bind=verbose,cores")),
    "uneven-srun": dict(nodes=2, ntasks=3),
    "uneven-mpirun": dict(nodes=2, ntasks=3, launcher="mpirun"),
    "torchrun-srun-args": dict(nodes=2, launcher="torchrun", srun_args=("--label",)),
    # --max-restarts: the step under the restart supervisor, on 2 of 3 nodes; uneven too.
    "restarts": dict(nodes=2, max_restarts=3, spare_nodes=1, hang_timeout=20, replace_straggler=0.2, timeout=300),
    "restarts-uneven": dict(nodes=2, ntasks=3, max_restarts=2),
}


@pytest.mark.parametrize("shape", OPTION_SHAPES)
def test_option_shapes_match_golden(shape):
    spec = build_spec(sites.load_site("testbed"), golden_options("testbed", **OPTION_SHAPES[shape]))
    text = render.render_sbatch(spec)
    bash_syntax_ok(text)
    check_golden(f"sbatch-testbed-{shape}.sh", text)


# Each MPI's launcher (a site's `mpirun: flavour:`): Open MPI (local, testbed), Cray PALS (ALCF
# Polaris), TACC's ibrun (Vista), MPICH's Hydra and Intel MPI (test sites).
FLAVOUR_SITES = {"hydra-local": Path(__file__).resolve().parents[1] / "sites" / "hydra-local.yaml",
                 "intel-mpi": Path(__file__).resolve().parents[1] / "sites" / "intel-mpi.yaml"}


@pytest.mark.parametrize("site_name", ["local", "testbed", "alcf-polaris", "tacc-vista", *FLAVOUR_SITES])
def test_mpirun_script_matches_golden(site_name):
    site = sites.load_site(str(FLAVOUR_SITES.get(site_name, site_name)))
    # TACC's ibrun takes its hosts from the Slurm job (an idev session) it runs in.
    hosts = () if site.mpirun.flavour == "ibrun" else ("--hostfile", "hosts")
    spec = build_spec(site, golden_options(
        site_name, kind="mpirun", ntasks=4, hostfile="/home/user/hosts" if hosts else None,
        command=("slurmtorch", "mpirun", "train.py", "-n", "4", *hosts)))
    text = render.render_mpirun(spec)
    bash_syntax_ok(text)
    check_golden(f"mpirun-{site_name}.sh", text)


def test_rendering_is_deterministic():
    site = sites.load_site("hdr-ib")
    o = golden_options("hdr-ib", nodes=3, env=("B=2", "A=1"))
    assert render.render_sbatch(build_spec(site, o)) == render.render_sbatch(build_spec(site, o))


def test_script_skeleton_order():
    site = sites.load_site("hdr-ib")
    text = render.render_sbatch(build_spec(site, golden_options("hdr-ib")))
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash -l"  # modules need a login shell
    assert lines[1].startswith(f"# Generated by slurmtorch {__version__} / site hdr-ib / preset none")
    assert lines[2] == "# Run with: slurmtorch sbatch --site hdr-ib train.py -- --epochs 3"
    order = [next(i for i, ln in enumerate(lines) if ln.startswith(p)) for p in
             ("#SBATCH", "export SLURM_UMASK SLURM_EXPORT_ENV=ALL", "module load", "export NCCL_IB_HCA", "srun --nodes=",
              'finish "$rc"')]
    assert order == sorted(order)
    directives = [ln for ln in lines if ln.startswith("#SBATCH")]
    assert directives == sorted(directives)


def _read_back(fragment: str, names: list[str]) -> list[str]:
    """Evaluate script text in a real bash and print the named variables NUL-separated."""
    code = fragment + "\n" + "printf '%s\\0' " + " ".join(f'"${n}"' for n in names) + "\n"
    out = subprocess.run(["bash", "-c", code], capture_output=True, check=True, cwd="/tmp")
    return out.stdout.decode().split("\0")[:-1]


def test_adversarial_env_values_survive_a_real_shell(tmp_path):
    site = sites.load_site("testbed")
    env = tuple(f"V{i}={v}" for i, v in enumerate(ADVERSARIAL))
    text = render.render_sbatch(build_spec(site, golden_options("testbed", env=env)))
    exports = "\n".join(ln for ln in text.splitlines() if ln.startswith("export V"))
    # Multi-line values span several lines; take the export block as a whole instead.
    start = text.index("export V0=")
    block = text[start:text.index("\n\n", start)]  # the exports, not the port pick
    assert exports
    assert _read_back(block, [f"V{i}" for i in range(len(ADVERSARIAL))]) == ADVERSARIAL
    assert not (tmp_path / "pwned").exists() and not Path("/tmp/pwned").exists()


def test_adversarial_script_args_survive_a_real_shell():
    site = sites.load_site("testbed")
    spec = build_spec(site, golden_options("testbed", script="/tmp/a b/it's.py", script_args=tuple(ADVERSARIAL)))
    (step,) = launchplan.plan(spec).steps
    argv = step.argv
    proc = subprocess.run(["bash", "-c", "python=/opt/venv/bin/python\nprintf '%s\\0' " + scripttext.script_join(argv)],
                          capture_output=True, check=True)
    assert proc.stdout.decode().split("\0")[:-1] == list(argv)  # "$python" is the job's python, named once
    assert list(argv[-len(ADVERSARIAL):]) == ADVERSARIAL
    # and the whole script still parses
    bash_syntax_ok(render.render_sbatch(spec))


def test_provenance_line_never_spills_into_the_script():
    site = sites.load_site("testbed")
    command = ("slurmtorch", "sbatch", "train.py", "--", "x\ntouch /tmp/pwned", "it's")
    text = render.render_sbatch(build_spec(site, golden_options("testbed", command=command)))
    line = text.splitlines()[2]
    assert line == "# Run with: slurmtorch sbatch train.py -- $'x\\ntouch /tmp/pwned' 'it'\"'\"'s'"
    assert "touch" not in "".join(text.splitlines()[3:])
    # copy-pasting the comment gives back the same argv in bash
    proc = subprocess.run(["bash", "-c", "printf '%s\\0' " + line[len("# Run with: "):]],
                          capture_output=True, check=True)
    assert proc.stdout.decode().split("\0")[:-1] == list(command)


def test_site_and_preset_names_stay_inside_the_provenance_comment(tmp_path):
    """Names are validated on load; a Site built in Python still cannot add a script line."""
    import dataclasses

    site = dataclasses.replace(sites.load_site("testbed"), name="x\n#SBATCH --uid=0",
                               presets=(("p\ntouch /tmp/pwned", ()),))
    text = render.render_sbatch(build_spec(site, golden_options("testbed", preset="p\ntouch /tmp/pwned")))
    assert text.splitlines()[1] == (f"# Generated by slurmtorch {__version__} / site $'x\\n#SBATCH --uid=0' "
                                    "/ preset $'p\\ntouch /tmp/pwned'")
    assert "#SBATCH --uid" not in text.replace("$'x\\n#SBATCH --uid=0'", "")
    bash_syntax_ok(text)


def test_every_quoting_path_refuses_a_lone_surrogate():
    for quote in (shell.quote, shell.directive_value, scripttext.script_quote, scripttext.comment_quote):
        with pytest.raises(ShellSafetyError, match="is not UTF-8 text"):
            quote("a\udcffb")
    with pytest.raises(ShellSafetyError, match="^job name 'x\\\\udcff' is not UTF-8 text"):
        shell.quote("x\udcff", what="job name")
    assert scripttext.comment_quote(["a\nb", "c d"]) == "$'a\\nb' 'c d'"  # unchanged for UTF-8 text


@pytest.mark.parametrize("kind", ["sbatch", "mpirun"])
@pytest.mark.parametrize("before, after", [("0000", "0002"), ("0002", "0002"), ("0027", "0027"), ("0020", "0022")])
def test_script_drops_world_write_from_the_umask_and_keeps_group_write(kind, before, after):
    site = sites.load_site("testbed")
    spec = build_spec(site, golden_options("testbed", kind=kind, ntasks=2))
    text = render.render(spec)
    head = text[:text.index("umask o-w")]
    assert "mkdir" not in head and ">" not in head.replace("#SBATCH", "")  # nothing written before it
    end = "export SLURM_UMASK" if kind == "sbatch" else "umask o-w"  # its umask, exported for srun's tasks
    block = text[:text.index("\n", text.index(end))]
    out = _read_back(f"umask {before}\n{block}\nmask=$(umask)", ["mask", "SLURM_UMASK"])
    assert out[0] == after and (kind == "mpirun" or out[1] == after)


def test_master_port_is_a_free_random_port_below_the_ephemeral_range(tmp_path):
    """A port 0 pick comes from the ephemeral range, which outgoing connections share."""
    import socket

    spec = build_spec(sites.load_site("testbed"), golden_options("testbed", python=sys.executable))
    text = render.render_sbatch(spec)
    for name, body in render.shell_files(spec):  # as the submission writes them into the job folder
        (tmp_path / name).write_text(body)
    block = f"SLURMTORCH_SH={tmp_path}\n" + "\n".join(line for line in text.splitlines() if line.startswith(
        ("finish()", "die()", "python=", '. "$SLURMTORCH_SH"/rendezvous.sh', "MASTER_PORT=$(free_port)")))
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except OSError:
        low = 32768
    ports = [int(_read_back(block, ["MASTER_PORT"])[0]) for _ in range(4)]
    assert all(20000 <= p < (low if low > 21000 else 32768) for p in ports), (ports, low)
    assert len(set(ports)) > 1
    with socket.socket() as s:
        s.bind(("", ports[-1]))  # it was free, and nothing kept it


def test_percent_and_spaces_in_job_root():
    site = sites.load_site("testbed")
    text = render.render_sbatch(build_spec(site, golden_options("testbed", job_root="/h/my 100%/jobs")))
    assert "#SBATCH --output='/h/my 100%%/jobs/%j/batch.out'" in text
    assert "'--output=/h/my 100%%/jobs/%j/rank-%t.out'" in text
    assert "SLURMTORCH_JOB_DIR='/h/my 100%/jobs'/\"$SLURM_JOB_ID\"" in text
    assert _read_back("SLURM_JOB_ID=7\nSLURMTORCH_JOB_DIR='/h/my 100%/jobs'/\"$SLURM_JOB_ID\"",
                      ["SLURMTORCH_JOB_DIR"]) == ["/h/my 100%/jobs/7"]


def test_mpirun_launcher_inside_sbatch_writes_rank_logs_via_a_constant_wrapper(tmp_path):
    """The wrapper gets the folder and argv as positional parameters, never spliced in."""
    wrapper = launchplan.RANK_LOG_WRAPPER
    env = dict(os.environ, OMPI_COMM_WORLD_RANK="3")
    subprocess.run(["bash", "-c", wrapper, "x", str(tmp_path), "bash", "-c", "echo out; echo err >&2"],
                   env=env, check=True)
    assert (tmp_path / "rank-3.out").read_text() == "out\n"
    assert (tmp_path / "rank-3.err").read_text() == "err\n"


@pytest.mark.parametrize("kind", ["sbatch", "mpirun"])
def test_mpirun_is_the_one_beside_the_jobs_python_else_the_one_on_path(tmp_path, kind):
    venv = tmp_path / "my venv's" / "bin"
    venv.mkdir(parents=True)
    site = sites.load_site("testbed")
    spec = build_spec(site, golden_options("testbed", kind=kind, launcher="mpirun", ntasks=2,
                                           python=str(venv / "python")))
    text = render.render(spec)
    start = text.index("mpirun=")
    block = next(line for line in text.splitlines() if line.startswith("python=")) + "\n" + \
        text[start:text.index('\n"$mpirun" ', start)]
    assert _read_back(block, ["mpirun"]) == ["mpirun"]  # none there: PATH's
    (venv / "mpirun").write_text("#!/bin/sh\n")
    (venv / "mpirun").chmod(0o755)
    assert _read_back(block, ["mpirun"]) == [str(venv / "mpirun")]
    assert "\nmpirun " not in text  # never a bare mpirun from PATH without the check


@pytest.mark.parametrize("roles", [(), ("master=1", "worker=1")])
def test_rank_logs_of_a_requeueable_job_are_appended_not_overwritten(tmp_path, roles):
    """Under mpirun (and in role steps) our wrapper opens the logs; srun's --open-mode=append
    cannot help there. A requeued run must not erase the first run's logs."""
    site = sites.load_site("testbed")
    kw = dict(launcher="srun", roles=roles) if roles else dict(launcher="mpirun")
    plain = launchplan.plan(build_spec(site, golden_options("testbed", **kw))).steps[0]
    again = launchplan.plan(build_spec(site, golden_options("testbed", requeue=True, **kw))).steps[0]
    wrapper = again.argv[2]  # bash -c WRAPPER ...
    assert plain.argv[2] == (launchplan.ROLE_LOG_WRAPPER if roles else launchplan.RANK_LOG_WRAPPER) != wrapper
    env = dict(os.environ, OMPI_COMM_WORLD_RANK="1", SLURM_PROCID="1")
    lead = ["0"] if roles else []
    for run in ("first", "second"):
        subprocess.run(["bash", "-c", wrapper, "x", *lead, str(tmp_path), "bash", "-c", f"echo {run}; echo {run} >&2"],
                       env=env, check=True)
    assert (tmp_path / "rank-1.out").read_text() == (tmp_path / "rank-1.err").read_text() == "first\nsecond\n"


def test_containers_pyxis_and_apptainer(tmp_path):
    base = (resources.site_configs_dir() / "testbed.yaml").read_text()
    p = tmp_path / "pyx.yaml"
    p.write_text(base + "container: {runtime: pyxis, image: 'nvcr.io#nvidia/pytorch:24.05-py3', mounts: [/data:/data]}\n")
    text = render.render_sbatch(build_spec(sites.load_site(p), golden_options("pyx")))
    assert "--container-image=nvcr.io#nvidia/pytorch:24.05-py3" in text
    # The jobs folder and the script's folder (/home/user, holding it) at their own paths, then the site's.
    assert "--container-mounts=/home/user:/home/user,/data:/data" in text
    p = tmp_path / "app.yaml"
    p.write_text(base + "container: {runtime: apptainer, image: /img/pt.sif}\n")
    text = render.render_sbatch(build_spec(sites.load_site(p), golden_options("app", launcher="mpirun")))
    assert "apptainer exec --bind /home/user:/home/user /img/pt.sif python3 -m slurmtorch.bootstrap" in text


@pytest.mark.parametrize("runtime, launcher", [("pyxis", "srun"), ("apptainer", "srun"), ("apptainer", "mpirun"),
                                               ("apptainer", "torchrun")])
def test_ranks_in_a_container_use_its_python_not_the_submitting_one(tmp_path, runtime, launcher):
    base = (resources.site_configs_dir() / "testbed.yaml").read_text()
    p = tmp_path / "c.yaml"

    def python_of_ranks(container: str, **kw) -> set[str]:
        p.write_text(base + f"container: {{runtime: {runtime}, image: /img/pt.sif{container}}}\n")
        spec = build_spec(sites.load_site(p), golden_options("c", launcher=launcher, **kw))
        argvs = [s.argv for s in launchplan.plan(spec).steps]
        # Nothing of the submitting host's venv runs in the job: the port is picked in bash.
        assert "/opt/venv" not in render.render_sbatch(spec)
        return {str(a) for argv in argvs for a in argv if "python" in str(a)}

    assert python_of_ranks("") == {"python3"}
    assert python_of_ranks(", python: /opt/conda/bin/python") == {"/opt/conda/bin/python"}
    assert python_of_ranks(", python: /opt/conda/bin/python", container_image="/img/x.sif") == {"/opt/conda/bin/python"}
    if launcher == "srun":
        assert python_of_ranks(", python: /opt/conda/bin/python", roles=("master=1", "worker=1")) == {
            "/opt/conda/bin/python"}
    assert sites.site_as_dict(sites.load_site(p))["container"]["python"] == "/opt/conda/bin/python"


def test_a_site_can_override_templates(tmp_path):
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "sbatch.sh.j2").write_text(
        '{% import "_macros.sh.j2" as m with context %}#!/bin/sh\n# custom {{ spec.site }}\n'
        "{{ launch.steps[0].argv | join_q }}\n")
    p = tmp_path / "custom.yaml"
    p.write_text((resources.site_configs_dir() / "testbed.yaml").read_text() + "templates: tpl\n")
    text = render.render_sbatch(build_spec(sites.load_site(p), golden_options("custom")))
    assert text.startswith('#!/bin/sh\n# custom custom\n"$python" -m slurmtorch.bootstrap')


def test_an_undefined_name_in_a_template_is_an_error(tmp_path):
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "sbatch.sh.j2").write_text("{{ spec.nodez }}\n")
    p = tmp_path / "broken.yaml"
    p.write_text((resources.site_configs_dir() / "testbed.yaml").read_text() + "templates: tpl\n")
    with pytest.raises(TemplateError, match="nodez"):
        render.render_sbatch(build_spec(sites.load_site(p), golden_options("broken")))


@pytest.mark.parametrize("body, message", [
    ("{{ spec.nodes // 0 }}", "ZeroDivisionError: integer division or modulo by zero"),
    ("{{ spec.nodes | first }}", "TypeError: 'int' object is not iterable"),
    ("{{ [1] | map(\"nofilter\") | list }}", "TemplateRuntimeError: No filter named 'nofilter'"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "RecursionError: maximum recursion depth exceeded"),
])
def test_a_site_templates_runtime_error_is_one_line_naming_file_and_line(tmp_path, body, message):
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "sbatch.sh.j2").write_text("#!/bin/bash\n\n" + body + "\n")
    p = tmp_path / "broken.yaml"
    p.write_text((resources.site_configs_dir() / "testbed.yaml").read_text() + "templates: tpl\n")
    with pytest.raises(TemplateError) as e:
        render.render_sbatch(build_spec(sites.load_site(p), golden_options("broken")))
    assert e.value.message.startswith(f"{tmp_path / 'tpl' / 'sbatch.sh.j2'}:3: error while rendering: ")
    assert message in e.value.message and "\n" not in e.value.message


@pytest.mark.parametrize("verb, args, shown", [
    ("sbatch", ["--site", "hdr-ib", "--dry-run", "-N", "2", "SCRIPT"], "#SBATCH --nodes=2"),
    ("alloc", ["--site", "hdr-ib", "--dry-run", "-N", "2"], "salloc --cpus-per-task="),
    ("run", ["--dry-run", "SCRIPT"], "--quit-on-interrupt"),
])
def test_rendering_imports_neither_torch_nor_mpi4py(tmp_path, verb, args, shown):
    """Run the CLI's dry run in a fresh interpreter and look at what got imported."""
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    argv = [verb, *(str(script) if a == "SCRIPT" else a for a in args)]
    code = (
        "import sys\n"
        "from slurmtorch.cli.main import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'mpi4py', 'numpy')"
        " or m.startswith('slurmtorch.bootstrap') or m == 'slurmtorch.bootstrap.mpi'\n"
        # nor the in-rank world, the submit edge, or the other verbs' modules
        " or m.startswith('slurmtorch.submit.edge')\n"
        " or m in ('slurmtorch.bootstrap.rankinfo', 'slurmtorch.cli.jobs', 'slurmtorch.cli.doctor'))\n"
        "print('BAD', bad, file=sys.stderr)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    # `run` renders in an allocation's shell: the options `alloc` stored there.
    shell = {"SLURMTORCH_ALLOC": '{"site":"hdr-ib","options":{"nodes":2}}', "SLURM_JOB_ID": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, SLURMTORCH_HOME=str(tmp_path), **shell))
    assert proc.returncode == 0, proc.stderr
    assert shown in proc.stdout
    assert "BAD []" in proc.stderr


def test_torchrun_gives_its_worker_arguments_back_as_typed():
    """torchrun's `${local_rank}` macro runs string.Template over every worker argument."""
    from torch.distributed.elastic.utils.api import macros

    odd = ["$$", "${local_rank}", "$local_rank", "$", "a$b$$c", "$(hostname)", "plain"]
    assert macros.substitute(launchplan.torchrun_literal(odd), "3") == odd
    assert launchplan.torchrun_literal(odd, "srun") == odd



# --------------------------------------------------------------------------- containers, every runtime


def container_site(tmp_path, runtime: str, extra: str = "") -> Path:
    base = (resources.site_configs_dir() / "testbed.yaml").read_text()
    p = tmp_path / f"{runtime}.yaml"
    p.write_text(base + f"container: {{runtime: {runtime}, image: 'registry.example/pt:1', mounts: [/data:/data]{extra}}}\n")
    return p


@pytest.mark.parametrize("runtime", ["podman-hpc", "shifter", "charliecloud"])
def test_podman_hpc_shifter_and_charliecloud_scripts_match_golden(tmp_path, runtime):
    spec = build_spec(sites.load_site(container_site(tmp_path, runtime)), golden_options("testbed"))
    text = render.render_sbatch(spec)
    bash_syntax_ok(text)
    check_golden(f"sbatch-testbed-{runtime}.sh", text)


@pytest.mark.parametrize("runtime", ["pyxis", "apptainer", "podman-hpc", "shifter", "charliecloud"])
@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_a_container_job_runs_nothing_of_the_submitting_venv_and_mounts_the_job_and_script_folders(
        tmp_path, runtime, launcher):
    """The batch script picks the port in bash, and every runtime mounts the jobs folder and
    the script's folder at their own paths (here /srv/jobs and /proj/code), then the site's."""
    opts = golden_options("testbed", launcher=launcher, script="/proj/code/train.py", job_root="/srv/jobs")
    spec = build_spec(sites.load_site(container_site(tmp_path, runtime)), opts)
    text = render.render_sbatch(spec)
    assert "/opt/venv" not in text and "slurmtorch.bootstrap.rendezvous" not in text and "$lib" not in text
    (step,) = launchplan.plan(spec).steps
    words = " ".join(map(str, [*step.options, *step.argv]))
    expected = {"pyxis": "--container-mounts=/proj/code:/proj/code,/srv/jobs:/srv/jobs,/data:/data",
                "apptainer": "--bind /proj/code:/proj/code --bind /srv/jobs:/srv/jobs --bind /data:/data",
                "podman-hpc": "-v /proj/code:/proj/code -v /srv/jobs:/srv/jobs -v /data:/data",
                "shifter": "--volume=/proj/code:/proj/code --volume=/srv/jobs:/srv/jobs --volume=/data:/data",
                "charliecloud": "--bind=/proj/code:/proj/code --bind=/srv/jobs:/srv/jobs --bind=/data:/data"}
    assert expected[runtime] in words, words


def test_podman_hpc_is_given_every_variable_the_batch_script_exports_for_the_ranks(tmp_path):
    """podman passes none of the host's environment unless named: the job's env (fabric, site,
    --env), path compositions, Slurm's and slurmtorch's own, MASTER_ADDR/PORT."""
    site = container_site(tmp_path, "podman-hpc", ", args: [--nccl]")
    site.write_text(site.read_text() + "prepend_path: {LD_LIBRARY_PATH: /opt/plugin/lib}\n")
    spec = build_spec(sites.load_site(site), golden_options("testbed", env=("WANDB_MODE=offline",)))
    argv = list(launchplan.plan(spec).steps[0].argv)
    named = {argv[i + 1] for i, a in enumerate(argv) if a == "-e"}
    assert {n for n, _ in spec.env} | {"LD_LIBRARY_PATH", "WANDB_MODE", "SLURM_*", "SLURMTORCH_*", "MASTER_ADDR",
                                      "MASTER_PORT"} <= named
    assert argv[:6] == ["podman-hpc", "run", "--rm", "--network=host", "--ipc=host", "--pid=host"]
    assert argv[argv.index("registry.example/pt:1") - 1] == "--nccl"  # the site's args, before the image


def test_every_job_sources_the_picker_the_supervisor_runs_from_its_own_folder(tmp_path):
    """No python of ours on a container job's nodes, and a queued job keeps the bash it was
    submitted with: every script sources the job folder's copy of the templates' shell files
    (render.shell_files, written there at submission), the supervisor's picker included."""
    picker = (resources.templates_dir() / "rendezvous.sh").read_text().removeprefix("# shellcheck shell=bash\n")
    for site in (container_site(tmp_path, "apptainer"), "testbed"):
        spec = build_spec(sites.load_site(site), golden_options("testbed"))
        text = render.render_sbatch(spec)
        assert dict(render.shell_files(spec))["rendezvous.sh"] == picker
        assert picker not in text and '\n. "$SLURMTORCH_SH"/rendezvous.sh\n' in text
        assert "MASTER_PORT=$(free_port) || finish 1; export MASTER_PORT\n" in text
    restarts = build_spec(sites.load_site("testbed"), golden_options("testbed", max_restarts=2))
    assert "rendezvous.sh" in dict(render.shell_files(restarts))  # the supervisor picks each start's with it


def test_an_interpreter_without_slurmtorch_is_named_as_such():
    from slurmtorch.submit.jobfolder.batchlines import batch_failures
    from slurmtorch.submit.jobfolder.failures import NO_SLURMTORCH, parse_failures

    err = ("/usr/bin/python3: Error while finding module specification for 'slurmtorch.bootstrap' "
           "(ModuleNotFoundError: No module named 'slurmtorch')\n")
    got = parse_failures("srun: error: node1: task 0: Exited with exit code 1\n", {0: err})
    assert [(f.rank, f.host, f.cause, f.code) for f in got] == [(0, "node1", NO_SLURMTORCH, 1)]
    assert "has no slurmtorch" in batch_failures("/usr/bin/python3: No module named slurmtorch.bootstrap\n", "")[0]


@pytest.mark.parametrize("kw, picks", [
    (dict(launcher="srun"), (True, True)),
    (dict(launcher="torchrun"), (True, True)),
    (dict(launcher="mpirun"), (False, False)),  # MPI's rank 0 finds both itself
    (dict(max_restarts=2), (False, False)),  # the restart supervisor, anew for each start
    (dict(roles=("master=1", "worker=1")), (True, True)),  # on the site's interface too, not the host name's
    (dict(container_image="/img/x.sif"), (True, True)),  # in bash: no python of ours on the node
])
def test_who_picks_master_addr_and_port_is_decided_once_in_the_launch_plan(kw, picks):
    import dataclasses

    spec = build_spec(sites.load_site("testbed"), golden_options("testbed", **kw))
    launch = launchplan.plan(spec)
    assert (launch.pick_port, launch.pick_addr) == picks
    text = render.render_sbatch(spec)
    assert ("MASTER_PORT=$(free_port)" in text) == picks[0]
    assert ("export MASTER_ADDR" in text) == picks[1]
    fixed = dataclasses.replace(spec, env=(*spec.env, ("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29500")))
    assert launchplan.rendezvous_flags(fixed) == (False, False)  # the site's values stand


@pytest.mark.parametrize("shape", [dict(nodes=2), dict(nodes=2, ntasks=3), dict(nodes=2, launcher="torchrun"),
                                   dict(nodes=2, array="0-1")])
def test_every_rank_step_asks_srun_for_its_layout_whatever_the_environment_says(shape):
    """srun takes -n/-N from SLURM_NTASKS/SLURM_NNODES when not given: a value exported in the
    script (a site's env:, say) would otherwise launch another layout (issue 24, item 6)."""
    spec = build_spec(sites.load_site("testbed"), golden_options("testbed", **shape))
    (step,) = launchplan.plan(spec).steps
    per_node = spec.launcher == "torchrun"
    assert f"--nodes={spec.nodes}" in step.options, step.options
    assert f"--ntasks={spec.nodes if per_node else spec.ntasks}" in step.options, step.options


@pytest.mark.parametrize("shape, expected", [
    (dict(nodes=2, ntasks_per_node=1), "slot:PE=2:HWTCPUS"),           # the node's 2 CPUs, as srun -c 2
    (dict(nodes=1, ntasks_per_node=2), "slot:PE=1:HWTCPUS"),
    (dict(nodes=2, ntasks_per_node=1, cpus_per_task=1), "slot:PE=1:HWTCPUS"),
    (dict(nodes=2, ntasks=3), "slot:PE=1:HWTCPUS"),                    # uneven 2+1: Slurm's slots place them
])
def test_mpirun_in_an_allocation_gives_each_rank_its_cpus_per_task(shape, expected):
    spec = build_spec(sites.load_site("testbed"), golden_options("testbed", launcher="mpirun", **shape))
    args = launchplan.plan(spec).steps[0].options
    assert args[args.index("--map-by") + 1] == expected and args[args.index("--bind-to") + 1] == "hwthread"


def test_mpirun_outside_slurm_leaves_ranks_unbound_on_their_hosts_cpus():
    spec = build_spec(sites.load_site("local"), golden_options("local", kind="mpirun", ntasks=2))
    args = launchplan.plan(spec).steps[0].options
    assert args[args.index("--bind-to") + 1] == "none" and "--map-by" not in args


# --------------------------------------------------------------------------- issue 45: the launch as data

# `slurmtorch sbatch --site testbed ... examples/train_ddp.py`, each a shape the issue names.
ISSUE_45_SHAPES = {
    "readme": ["--nodes", "4"],
    "roles on two node types": ["--role", "master=1", "--role", "worker=2:partition=fat"],
    "ray": ["--nodes", "3", "--ray"],
    "restarts": ["--nodes", "2", "--max-restarts", "3", "--spare-nodes", "1"],
}
REPO = Path(__file__).resolve().parents[2]


def dry_run(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.cli.main", "sbatch", "--site", "testbed", "--dry-run",
                           *args, "examples/train_ddp.py"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def shellcheck(text: str) -> str:
    """shellcheck's warnings and errors (scripts/setup --tests installs it), "" when clean."""
    proc = subprocess.run(["shellcheck", "--shell=bash", "--severity=warning", "-"], input=text,
                          capture_output=True, text=True, timeout=120)
    return proc.stdout


@pytest.mark.parametrize("shape", ISSUE_45_SHAPES)
def test_the_issues_shapes_render_shellcheck_clean_and_the_readme_job_in_60_lines(shape):
    text = dry_run(*ISSUE_45_SHAPES[shape])
    assert shellcheck(text) == ""
    if shape == "readme":
        assert len(text.splitlines()) <= 60, text


def test_the_lumi_g_presets_script_is_shellcheck_clean():
    site = sites.load_site("lumi-g")
    assert shellcheck(render.render_sbatch(build_spec(site, golden_options("lumi-g", **required_options(site))))) == ""


def test_the_launch_template_is_one_loop_within_200_lines_and_two_srun_lines():
    """sbatch.sh.j2 and the partials it imports; the shell files (templates/*.sh) are checked apart."""
    text = "".join((resources.templates_dir() / name).read_text() for name in ("sbatch.sh.j2", "_macros.sh.j2"))
    assert len(text.splitlines()) <= 200
    launches = re.findall(r"(?:^\s*|[;{]\s+)srun\s+--|\{\{ step\.launcher \}\} \{\{ step\.options", text, re.M)
    assert len(launches) <= 2, launches  # the steps' one line (the run macro), the first node's from `alloc`


def test_a_role_job_with_one_roles_image_names_the_python_its_other_roles_run():
    """Red before the fix: the master ran "$python", which the script never set (a role's image
    made the job a container job, which names no python of the host)."""
    spec = build_spec(sites.load_site("testbed"), golden_options(
        "testbed", roles=("master=1", "worker=1"), role_images=("worker=/img/w.sif",), container_runtime="apptainer"))
    text = render.render_sbatch(spec)
    assert '"$python" -m slurmtorch.bootstrap' in text and "\npython=/opt/venv/bin/python\n" in text
    assert "/img/w.sif python3 -m slurmtorch.bootstrap" in text


def test_a_submission_writes_the_shell_files_its_script_sources_into_the_job_folder(tmp_path):
    from slurmtorch.submit.batchnode.supervisor import rendezvous_file
    from slurmtorch.submit.jobfolder import jobdir

    spec = build_spec(sites.load_site("testbed"), golden_options("testbed"))
    files = render.shell_files(spec)
    folder = jobdir.make_temp(tmp_path / "jobs", render.render_sbatch(spec), job={}, files=files)
    shell = folder / protocol.SHELL_DIR
    assert {p.name: p.read_text() for p in shell.iterdir()} == dict(files)
    assert oct(shell.stat().st_mode & 0o777) == "0o700"
    assert rendezvous_file({protocol.SHELL: str(shell)}) == str(shell / "rendezvous.sh")
    assert rendezvous_file({}) == str(resources.templates_dir() / "rendezvous.sh")  # a job queued before the copy
