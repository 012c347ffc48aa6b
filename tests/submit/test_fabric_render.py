"""Where a rendered job's ranks meet when the host name resolves to another network than the
site's interface (the management network vs the fabric, as on real clusters): the parts of
the batch script no testbed can run here (containers, pyxis), read back through a real bash.
The testbed runs the others (tests/test_fabric_network.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slurmtorch import resources
from slurmtorch.submit.launch import render
from slurmtorch.submit import sites
from slurmtorch.submit.launch.spec import build_spec

from helpers import as_run
from test_render import golden_options

RUNTIMES = ("pyxis", "apptainer", "podman-hpc", "shifter", "charliecloud")


def container_site(tmp_path: Path, runtime: str, base: str = "testbed") -> Path:
    text = (resources.site_configs_dir() / f"{base}.yaml").read_text()
    p = tmp_path / f"{base}-{runtime}.yaml"
    p.write_text(text + f"container: {{runtime: {runtime}, image: 'registry.example/pt:1'}}\n")
    return p


def block(script: str, first: str, last: str) -> str:
    """The script's finish/die, then its text from the line starting `first` through the one ending `last`."""
    start = script.index("\n" + first) + 1
    end = script.index(last + "\n", start) + len(last) + 1
    return script[script.index("finish() {"):script.index("\n", script.index("die() {")) + 1] + script[start:end]


def chenv_block(script: str) -> str:
    """The batch script's ch-run env file, written as rendered: the function and its call."""
    call = script.index("\ncharliecloud_env container.env ")
    return block(script, "charliecloud_env() {", script[call + 1:script.index("\n", call + 1)])


def address_block(script: str) -> str:
    """The batch script's MASTER_PORT and MASTER_ADDR pickers for a container job, as rendered."""
    return block(script, "free_port() {", '[ -z "$MASTER_ADDR" ] || export MASTER_ADDR')


def run_block(block: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", block + '\n' + 'printf "%s\\n" "$(printenv MASTER_ADDR)"'], capture_output=True,
                          text=True, timeout=30, env={"PATH": os.environ["PATH"], "SLURMTORCH_JOB_DIR": str(tmp_path),
                                                      **env})


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("kind", ["srun", "torchrun", "roles"])
def test_a_container_jobs_script_takes_master_addr_from_the_sites_interface(tmp_path, runtime, kind):
    """Red before the fix: a container job (and any role job) left MASTER_ADDR unset, and the
    ranks met at the first node's host name, whatever `interfaces:` said."""
    kw = dict(roles=("master=1", "worker=1")) if kind == "roles" else dict(launcher=kind)
    spec = build_spec(sites.load_site(container_site(tmp_path, runtime)), golden_options("testbed", **kw))
    script = as_run(spec)
    block = address_block(script)
    assert "slurmtorch.bootstrap.rendezvous" not in script  # no python of the submitting host on the nodes
    assert "$python" not in script and '"$lib"' not in script  # nor its slurmtorch: the shell files are here
    assert script.index("MASTER_ADDR=$(fabric_address") < script.index("\nsrun ")  # exported before any rank starts
    # Read back through bash, on this machine's own loopback interface.
    for ifname in ("lo", "nosuch0,lo", "=lo"):
        proc = run_block(block, tmp_path, GLOO_SOCKET_IFNAME=ifname)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "127.0.0.1\n", ""), ifname
    proc = run_block(block, tmp_path)  # no interface named: the ranks use the host name
    assert (proc.returncode, proc.stdout) == (0, "\n")


def test_a_container_jobs_address_picker_ends_the_job_in_one_line_without_an_address(tmp_path):
    script = as_run(build_spec(sites.load_site(container_site(tmp_path, "apptainer")), golden_options("testbed")))
    proc = run_block(address_block(script), tmp_path, GLOO_SOCKET_IFNAME="nosuch0")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("slurmtorch: error: no IPv4 address on the interface nosuch0 on ")
    assert (tmp_path / "exit-code").read_text() == "1\n"


def srun_words(script: str, job_dir: str = "") -> list[str]:
    """The first srun line's words, as bash splits them (in the job folder `job_dir`)."""
    start = script.index("\nsrun ") + 1
    end = script.index("\n", start)
    while script[end - 1] == "\\":
        end = script.index("\n", end + 1)
    line = script[start:end].replace("srun ", "printf '%s\\n' ", 1)
    out = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=30, check=True,
                         env={"PATH": os.environ["PATH"], "SLURMTORCH_JOB_DIR": job_dir}).stdout
    return out.splitlines()


@pytest.mark.parametrize("base", ["aws-p5", "gcp-a3u-a4", "slingshot-nvidia"])
def test_pyxis_keeps_the_sites_environment_over_the_images(tmp_path, base):
    """pyxis sets the host's environment after the image's, whose values win: an NGC image's
    LD_LIBRARY_PATH hid the site's NCCL network plugin, and NCCL fell back to TCP. Red before
    the fix: no --container-env on the srun line."""
    spec = build_spec(sites.load_site(container_site(tmp_path, "pyxis", base)), golden_options(base, account="m1234"))
    words = srun_words(render.render_sbatch(spec))
    kept = [w.split("=", 1)[1].split(",") for w in words if w.startswith("--container-env=")]
    assert len(kept) == 1, words
    assert set(kept[0]) == {n for n, _ in spec.env} | {n for n, _, _ in spec.env_paths}
    assert "LD_LIBRARY_PATH" in kept[0] and any(n.startswith(("NCCL_", "FI_")) for n in kept[0])


@pytest.mark.parametrize("base", ["aws-p5", "slingshot-nvidia", "testbed"])
def test_charliecloud_sets_the_jobs_variables_after_the_images_own(tmp_path, base):
    """ch-run applies the image's /ch/environment (--set-env, from the site's args) over the
    host's: the job's variables are set again after it from a file the batch script writes,
    each value exactly as exported (ch-run strips one pair of single quotes, expands nothing)."""
    site = container_site(tmp_path, "charliecloud", base)
    site.write_text(site.read_text().replace("image: 'registry.example/pt:1'", "image: /img, args: [--set-env]"))
    spec = build_spec(sites.load_site(site), golden_options(base, account="m1234"))
    script = as_run(spec)
    words = srun_words(script, str(tmp_path))
    ch = words[words.index("ch-run"):]
    env_file = f"{tmp_path}/container.env"
    # After the site's --set-env (the image's), before the image; literal values.
    assert ch[ch.index("--set-env") + 1:ch.index("/img")] == ["--env-no-expand", f"--set-env={env_file}"], ch
    assert ch[ch.index("/img") + 1] == "--"
    chenv = chenv_block(script)
    names = {n for n, _ in spec.env} | {n for n, _, _ in spec.env_paths}
    assert chenv.split("\ncharliecloud_env container.env ", 1)[1].split() == list(dict.fromkeys(
        [*(n for n, _ in spec.env), *(n for n, _, _ in spec.env_paths)]))
    values = {n: f"'{n}' $HOME:\\x \"q\"" for n in sorted(names)[1:]}  # the first: unset, left to the image
    proc = subprocess.run(["bash", "-c", chenv], capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"], "SLURMTORCH_JOB_DIR": str(tmp_path), **values})
    assert proc.returncode == 0, proc.stderr
    written = (tmp_path / "container.env").read_text().splitlines()
    assert sorted(written) == sorted(f"{n}='{v}'" for n, v in values.items())


def test_charliecloud_refuses_a_value_its_env_file_cannot_carry(tmp_path):
    site = container_site(tmp_path, "charliecloud")
    spec = build_spec(sites.load_site(site), golden_options("testbed"))
    script = as_run(spec)
    chenv = chenv_block(script)
    proc = subprocess.run(["bash", "-c", chenv], capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"], "SLURMTORCH_JOB_DIR": str(tmp_path),
                               "GLOO_SOCKET_IFNAME": "ib0\nlo"})
    assert proc.returncode == 1
    assert proc.stderr == "slurmtorch: error: GLOO_SOCKET_IFNAME holds a newline, which ch-run --set-env cannot carry\n"
    assert (tmp_path / "exit-code").read_text() == "1\n"
