"""`slurmtorch site init [PATH]`: the site written from what the cluster says, validated first,
to stdout or a new file written whole; an existing file kept unless --force.

scontrol (show node, partition, config) and srun are stand-ins on PATH that print the testbed's captured outputs
(tests/sites/discover/); the testbed itself runs it in tests/cli/test_main_job.py."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtorch.submit import sites
from slurmtorch.submit.sites import discover

FIXTURES = Path(__file__).resolve().parents[1] / "sites" / "discover"

STAND_IN = """#!/bin/bash
# A stand-in for {program}: the captured output, less its header; anything else fails as scontrol would.
case "$*" in
{cases}
  *) echo "{program}: error: unexpected arguments: $*" >&2; exit 1 ;;
esac
"""


def stand_ins(tmp_path: Path, nodes: str = "testbed-nodes", scontrol_fails: bool = False,
              partitions: str = "testbed-partitions") -> dict[str, str]:
    """PATH with stand-in scontrol and srun first (`nodes`, `partitions`: a fixture's name, or a
    path less its .txt)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)

    def show(name: str) -> str:
        return f"grep -av '^#' {FIXTURES / (name + '.txt')}"  # -a: bytes that are not UTF-8 as they are

    scontrol = ('  "show node --oneliner") ' + ("echo 'slurm_load_node error: Unable to contact slurm controller' >&2;"
                                              " exit 1" if scontrol_fails else show(nodes)) + " ;;\n"
                f'  "show partition --oneliner") {show(partitions)} ;;\n'
                f'  "show config") {show("testbed-config")} ;;')
    for program, cases in (("scontrol", scontrol), ("srun", f'  "--mpi=list") {show("testbed-mpi")} ;;')):
        p = bin_dir / program
        p.write_text(STAND_IN.format(program=program, cases=cases))
        p.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def init(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, SLURMTORCH_HOME=str(tmp_path / "home"), **(env or stand_ins(tmp_path)))
    return subprocess.run([sys.executable, "-m", "slurmtorch.cli.main", "site", "init", *args], cwd=tmp_path,
                          capture_output=True, text=True, env=e, timeout=60)


def expected(title: str | None = None) -> str:
    def read(name: str) -> str:
        return "".join(ln for ln in (FIXTURES / f"{name}.txt").read_text().splitlines(keepends=True)
                       if not ln.startswith("#"))
    return discover.site_yaml(read("testbed-nodes"), read("testbed-partitions"), read("testbed-mpi"),
                              read("testbed-config"), title=title)


@pytest.mark.parametrize("args", [(), ("-",)])
def test_without_a_path_the_site_goes_to_stdout_and_what_to_check_to_stderr(tmp_path, args):
    r = init(tmp_path, *args)
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected()
    assert r.stderr == ("site file above: site 'site', 1 partitions, 1 node types; "
                        "3 lines marked CHECK: for a person to decide\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]


def test_a_path_gets_a_new_file_that_loads_as_the_site_named_for_it(tmp_path):
    r = init(tmp_path, "mycluster.yaml")
    assert r.returncode == 0, r.stderr
    written = tmp_path / "mycluster.yaml"
    assert written.read_text() == expected("mycluster")
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
    assert r.stdout == "" and r.stderr.startswith("wrote mycluster.yaml: site 'mycluster', 1 partitions")
    assert sites.load_site(written).name == "mycluster"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "mycluster.yaml"]  # no temporary left


def test_on_the_clusters_side_of_cluster_the_line_says_the_file_is_there_not_here(tmp_path):
    """Issue 44: `site init --cluster testbed mycluster.yaml` wrote the file on the login host (the
    verb runs there) and said only `wrote mycluster.yaml`, as if the laptop had it. Here as the
    cluster's side runs it (remote.serve sets SLURMTORCH_ON_CLUSTER to the laptop's name for it)."""
    r = init(tmp_path, "mycluster.yaml", env={**stand_ins(tmp_path), "SLURMTORCH_ON_CLUSTER": "testbed"})
    assert r.returncode == 0 and (tmp_path / "mycluster.yaml").exists(), r.stderr
    assert r.stderr.splitlines() == [
        f"wrote {tmp_path / 'mycluster.yaml'} on cluster testbed's login host, not here: site 'mycluster', "
        "1 partitions, 1 node types; 3 lines marked CHECK: for a person to decide",
        "tip: to have it here: slurmtorch site init --cluster testbed > mycluster.yaml"], r.stderr


def test_name_sets_the_sites_name(tmp_path):
    r = init(tmp_path, "x.yaml", "--name", "hpc1")
    assert r.returncode == 0, r.stderr
    assert sites.load_site(tmp_path / "x.yaml").name == "hpc1"
    bad = init(tmp_path, "y.yaml", "--name", "a b")
    assert bad.returncode != 0 and bad.stderr.startswith("error: invalid site name 'a b'\n")
    assert not (tmp_path / "y.yaml").exists()


def test_an_existing_file_is_kept_unless_force(tmp_path):
    mine = tmp_path / "site.yaml"
    mine.write_text("# the admin's own\n")
    r = init(tmp_path, "site.yaml")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr == "error: site.yaml exists: site init writes only a new file\ntip: pass --force to replace it\n"
    assert mine.read_text() == "# the admin's own\n"
    forced = init(tmp_path, "site.yaml", "--force")
    assert forced.returncode == 0, forced.stderr
    assert mine.read_text() == expected("site")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "site.yaml"]


def test_when_scontrol_fails_nothing_is_written_and_its_words_are_the_error(tmp_path):
    r = init(tmp_path, "new.yaml", env=stand_ins(tmp_path, scontrol_fails=True))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.splitlines()[0] == ("error: scontrol failed (exit 1): slurm_load_node error: Unable to contact "
                                        "slurm controller")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]


def test_a_folder_that_does_not_exist_is_one_error_line(tmp_path):
    r = init(tmp_path, "no/such/folder/site.yaml")
    assert r.returncode != 0 and r.stderr == "error: cannot write no/such/folder/site.yaml: no folder no/such/folder\n"


def recorded_with(tmp_path: Path, fixture: str, old: bytes, new: bytes) -> str:
    """The recorded `fixture` with `old` made `new`, as a stand-in's path (less .txt)."""
    data = (FIXTURES / f"{fixture}.txt").read_bytes()
    assert old in data
    (tmp_path / f"{fixture}.txt").write_bytes(data.replace(old, new))
    return str(tmp_path / fixture)


TOO_LONG = b"9" * 5000  # int() refuses more than 4300 digits


@pytest.mark.parametrize("fixture, old, new", [
    ("testbed-nodes", b"CPUEfctv=2", b"CPUEfctv="), ("testbed-nodes", b"RealMemory=4096", b"RealMemory="),
    ("testbed-nodes", b"Gres=(null)", b"Gres=gpu:a100:"), ("testbed-nodes", b"Sockets=1", b"Sockets="),
    ("testbed-partitions", b"MaxNodes=UNLIMITED", b"MaxNodes="),
])
def test_a_count_too_long_for_a_number_is_one_line_naming_it(tmp_path, fixture, old, new):
    """Was: ValueError from int() (exit 70)."""
    env = stand_ins(tmp_path, **{"nodes" if fixture.endswith("nodes") else "partitions":
                                 recorded_with(tmp_path, fixture, old, new + TOO_LONG)})
    r = init(tmp_path, env=env)
    assert r.returncode == 2 and r.stdout == "", r.stderr  # a SiteError
    lines = r.stderr.splitlines()
    assert lines[0].startswith("error: scontrol said ") and "5000 digits" in lines[0], r.stderr
    assert len(lines) == 2 and lines[1].startswith("tip: "), r.stderr


def test_scontrol_output_that_is_not_utf8_is_read_not_a_crash(tmp_path):
    """Was: UnicodeDecodeError in the runner (exit 70). A feature named in Latin-1 reads as U+FFFD."""
    env = stand_ins(tmp_path, nodes=recorded_with(tmp_path, "testbed-nodes", b"AvailableFeatures=cpu,testbed",
                                                  b"AvailableFeatures=cpu,caf\xe9"))
    r = init(tmp_path, env=env)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr and "unexpected" not in r.stderr, r.stderr
    assert r.returncode == 0 and "Features=caf\ufffd,cpu" in r.stdout, r.stdout
