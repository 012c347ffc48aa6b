"""A container runtime that really runs: charliecloud's ch-run under srun on the testbed.

scripts/image builds a Debian 12 image offline (debootstrap, then torch and this checkout's
wheel; cached in .images/). A job through `slurmtorch sbatch` trains the README example in it
on two nodes, and each rank shows (tests/scripts/container_probe.py) that it runs the image's
python and torch, sees the site's environment over the image's own, and meets on the fabric.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, need
from helpers import st

# The first test may build the image (scripts/image: minutes on a fresh machine, where
# scripts/setup has not built it already); each job itself takes seconds.
pytestmark = pytest.mark.timeout(1200)

PROBE = REPO / "tests" / "scripts" / "container_probe.py"
EXAMPLES = REPO / "examples"


@pytest.fixture(scope="session")
def charliecloud_image(testbed) -> Path:
    """The image's folder, built (or brought up to date) by scripts/image."""
    if testbed.slurm >= (24, 11):
        # Not a missing piece but a wall: that testbed runs chrooted (scripts/slurm-root), and
        # the kernel refuses a new user namespace to a chrooted process, which ch-run needs
        # ("can't init user+mount namespaces: Operation not permitted"). What these tests pin
        # does not depend on Slurm's version; they run on the 22.05 testbed.
        pytest.skip("ch-run cannot make its user namespace inside the chrooted Slurm 24.11 testbed")
    need(shutil.which("ch-run") is not None, "charliecloud's ch-run is not installed (scripts/setup installs it)")
    need(shutil.which("debootstrap") is not None, "debootstrap is not installed (scripts/setup installs it)")
    # The probe's folder and the example's: ch-run 0.31 binds only onto folders the image has.
    made = subprocess.run([str(REPO / "scripts" / "image"), str(PROBE.parent), str(EXAMPLES)],
                          capture_output=True, text=True, timeout=1800)
    if made.returncode != 0:
        pytest.fail(f"scripts/image failed:\n{made.stderr}", pytrace=False)
    return Path(made.stdout.strip())


def charliecloud_site(tmp_path: Path, image: Path) -> tuple[Path, Path]:
    """A site like the testbed whose ranks run in `image` under ch-run, with the image's own
    environment applied (--set-env) and a network plugin folder the site puts first on
    LD_LIBRARY_PATH, which the image sets too (as NGC images do)."""
    plugin = tmp_path / "nccl-net-plugin"  # under /tmp, which ch-run shares with the host
    plugin.mkdir()
    (plugin / "libnccl-net.so").write_text("")
    site = tmp_path / "charliecloud.yaml"
    site.write_text(json.dumps({
        "extends": "testbed",
        "container": {"runtime": "charliecloud", "image": str(image), "python": "/usr/bin/python3",
                      "mounts": [f"{EXAMPLES}:{EXAMPLES}"], "args": ["--set-env"]},
        "prepend_path": {"LD_LIBRARY_PATH": [str(plugin)]},
        "env": {"SITE_GREETING": "'site' value, it's kept"},
    }))
    return site, plugin


def outputs(folder: Path) -> str:
    """The ranks' output: rank-R.out under srun, node-N.out (each node's agent and ranks) under torchrun."""
    return "".join(p.read_text() for p in sorted(folder.glob("*.out")) if p.name.startswith(("rank-", "node-")))


def records_in(folder: Path) -> list[dict]:
    lines = outputs(folder).splitlines()
    return sorted((json.loads(ln[len("CONTAINER "):]) for ln in lines if ln.startswith("CONTAINER ")),
                  key=lambda r: r["rank"])


@pytest.mark.parametrize("launch", [["--launcher", "srun"], ["--launcher", "torchrun"],
                                    ["--role", "master=1", "--role", "worker=1"]], ids=["srun", "torchrun", "roles"])
def test_a_charliecloud_job_trains_the_example_in_the_image_with_the_sites_environment_on_the_fabric(
        testbed, has_torch, charliecloud_image, tmp_path, launch):
    """Red before the fix: the image's LD_LIBRARY_PATH (its /ch/environment, applied by
    --set-env) replaced the site's, whose plugin folder then never reached the ranks. Under
    torchrun the agent runs in the container too, and starts the ranks there; a role job runs
    one step per role, each in the container."""
    site, plugin = charliecloud_site(tmp_path, charliecloud_image)
    home = tmp_path / "home"
    layout = [] if "--role" in launch else ["-N", "2", "--ntasks-per-node", "1"]
    proc = st(testbed, home, ["sbatch", "--site", str(site), *layout, *launch, "--time", "5",
                              "--wait", str(PROBE), "--epochs", "2"], timeout=400)
    folder = home / "jobs" / proc.stdout.split()[0]
    assert proc.returncode == 0, proc.stdout + proc.stderr + outputs(folder)
    records = records_in(folder)
    assert [r["rank"] for r in records] == [0, 1], records
    assert {r["host"] for r in records} == {"node1", "node2"}, records
    head = records[0]
    for r in records:
        # In the image: its marker, its python and torch, ch-run's own variable, its environment.
        assert r["image"] and r["image"].startswith("slurmtorch test image"), r
        assert r["python"] == "/usr/bin/python3", r
        assert r["torch"] == "/usr/local/lib/python3.11/dist-packages/torch", r
        assert r["CH_RUNNING"] == "Weird Al Yankovic", r
        assert r["SLURMTORCH_IMAGE"] == "bookworm", r
        # The site's environment over the image's: its plugin folder first, and seen inside.
        assert r["LD_LIBRARY_PATH"].split(":")[0] == str(plugin), r
        assert r["plugin_files"] == ["libnccl-net.so"], r
        assert r["SITE_GREETING"] == "'site' value, it's kept", r
        # On the fabric: MASTER_ADDR is rank 0's ib0 address, which its host name does not resolve to.
        i = int(r["host"][len("node"):])
        assert (r["eth0"], r["ib0"]) == (f"198.18.0.{10 + i}", f"198.18.0.{138 + i}"), r
        assert r["MASTER_ADDR"] == head["ib0"], r
    out = outputs(folder)
    assert "trained on 2 ranks across nodes node1,node2" in out, out


def test_a_script_folder_the_image_lacks_is_named_with_ch_runs_error_and_the_fix(
        testbed, charliecloud_image, tmp_path):
    """ch-run 0.31 binds only onto folders the image has. Red before: `rank 0 on node1: exited
    with exit code 1 without reporting a cause`, while ch-run's line named the folder."""
    site, _ = charliecloud_site(tmp_path, charliecloud_image)
    # A folder the image lacks wherever the checkout is: not under /tmp, which ch-run shares
    # with the host (a checkout there is seen inside), nor one scripts/image made.
    folder = Path(tempfile.mkdtemp(prefix="slurmtorch-not-in-image-", dir="/var/tmp"))
    elsewhere = folder / "train.py"  # never runs: its folder is not in the image
    elsewhere.write_text("print('ran')\n")
    home = tmp_path / "home"
    # In place (--no-snapshot): a snapshot would run the copy in the job folder, which is bound.
    try:
        proc = st(testbed, home, ["sbatch", "--site", str(site), "-N", "1", "--time", "2", "--no-snapshot",
                                  "--wait", str(elsewhere)], timeout=200)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (f"slurmtorch: failed: rank 0 on node1: ch-run could not start the container: can't mkdir: "
            f"{charliecloud_image}{elsewhere.parent}: Read-only file system (ch-run binds only onto folders the "
            "image has") in proc.stderr, proc.stderr
