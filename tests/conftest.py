"""Shared fixtures: the real Slurm testbed, real Open MPI, real torch.

In CI (CI=true) a missing piece is a failure, never a skip: the fixtures call
`pytest.fail` instead of `pytest.skip` there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import shards

REPO = Path(__file__).resolve().parent.parent
TESTBED = REPO / "scripts" / "testbed"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(condition: bool, why: str) -> None:
    """Skip locally, fail in CI: CI must never pass by skipping the real thing."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {why}", pytrace=False)
    pytest.skip(why)


def pytest_addoption(parser):
    parser.addoption("--shard", metavar="K/N", default=None,
                     help="run only shard K of N, whole files balanced by time (tests/shards.py); "
                          ".ci/run runs the shards at once, each on a testbed of its own")


def pytest_collection_modifyitems(config, items):
    """Mark every test by the real parts its fixtures need, so `-m "not testbed and not mpi"`
    selects exactly the tests that run without a cluster or mpirun (quick loops, and while
    another run holds the one testbed this machine can host). Then keep `--shard`'s files."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if _uses_conftest_fixture(item, "testbed"):
            item.add_marker(pytest.mark.testbed)
        if names & {"mpi_env", "mpich_env"}:  # Open MPI's mpirun, or MPICH's mpiexec (.venv-mpich)
            item.add_marker(pytest.mark.mpi)
        if "has_torch" in names:
            item.add_marker(pytest.mark.torch)
    if config.getoption("--shard"):
        _keep_shard(config, items)


def _keep_shard(config, items) -> None:
    try:
        k, n = shards.parse(config.getoption("--shard"))
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    file_of = {item: item.nodeid.split("::")[0] for item in items}
    seconds = {}
    for path in set(file_of.values()):
        mine = [item for item in items if file_of[item] == path]
        testbed = sum(1 for item in mine if item.get_closest_marker("testbed"))
        seconds[path] = shards.estimate(path, testbed, len(mine) - testbed)
    shard_of = shards.assign(seconds, n)
    config.hook.pytest_deselected(items=[item for item in items if shard_of[file_of[item]] != k])
    items[:] = [item for item in items if shard_of[file_of[item]] == k]


def _uses_conftest_fixture(item, name: str) -> bool:
    """The test needs this file's fixture `name`, not a test module's own fixture of that name
    (a site fixture once called `testbed` marked 59 pure tests as needing the cluster)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.get(name, ()) if info is not None else ()
    return bool(defs) and getattr(defs[-1].func, "__module__", None) == __name__


@dataclass
class Testbed:
    """A running local Slurm cluster and the client environment that reaches it."""

    env: dict[str, str]
    nodes: list[str]
    state_dir: Path
    python: str = field(default_factory=lambda: sys.executable)
    # Slurm's (major, minor), e.g. (22, 5) or (24, 11): where the versions differ, a test
    # checks the product's behaviour on each (SLURMTORCH_SLURM picks it: scripts/test).
    slurm: tuple[int, int] = (0, 0)

    def run(self, argv, *, timeout=120, check=False, env=None, **kw) -> subprocess.CompletedProcess:
        merged = dict(self.env)
        if env:
            merged.update(env)
        return subprocess.run(
            [str(a) for a in argv], env=merged, capture_output=True, text=True,
            timeout=timeout, check=check, **kw,
        )


def _parse_exports(text: str) -> dict[str, str]:
    import shlex

    env = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("export "):
            continue
        (assignment,) = shlex.split(line[len("export "):])
        key, _, value = assignment.partition("=")
        env[key] = value
    return env


@pytest.fixture(scope="session")
def testbed() -> Testbed:
    """Bring the 4-node testbed up (or reuse a healthy one) for the whole session."""
    need(os.geteuid() == 0, "the testbed needs root (network namespaces)")
    need(shutil.which("slurmctld") is not None, "Debian's slurmctld is not installed")
    up = subprocess.run([str(TESTBED), "up", "4"], capture_output=True, text=True, timeout=180)
    if up.returncode != 0:
        pytest.fail(f"scripts/testbed up failed:\n{up.stdout}\n{up.stderr}", pytrace=False)
    out = subprocess.run([str(TESTBED), "env"], capture_output=True, text=True, check=True)
    exports = _parse_exports(out.stdout)
    env = dict(os.environ)
    env.update(exports)
    # Clients and jobs use this interpreter's venv first.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    nodes = exports.get("SLURMTORCH_TESTBED_NODES", "").split(",")
    version = subprocess.run(["sinfo", "--version"], env=env, capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"(\d+)\.(\d+)", version)
    if m is None:
        pytest.fail(f"cannot read Slurm's version from `sinfo --version`: {version!r}", pytrace=False)
    return Testbed(env=env, nodes=[n for n in nodes if n], state_dir=Path(exports["SLURMTORCH_TESTBED_DIR"]),
                   slurm=(int(m.group(1)), int(m.group(2))))


@pytest.fixture(scope="session")
def mpi_env():
    """Environment for running Open MPI's mpirun as root on this 2-core host.

    Tests that end a job with MPI_Abort leave Open MPI's shared-memory segments in this
    host's /dev/shm (16 MB each); the ones that appeared during the session are removed
    at its end, when every mpirun the tests started has ended.
    """
    shm = Path("/dev/shm")
    before = set(shm.glob("sm_segment.*"))
    yield _mpi_env()
    for leftover in set(shm.glob("sm_segment.*")) - before:
        leftover.unlink(missing_ok=True)


def _mpi_env() -> dict[str, str]:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        need(False, "mpi4py is not installed")
    mpirun = shutil.which("mpirun", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    need(mpirun is not None, "mpirun is not on PATH")
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMPI_MCA_btl", "^ofi,uct")
    return env


# MPICH comes from PyPI's `mpich` wheel in `.venv-mpich` (scripts/setup): mpi4py's wheels load
# whichever MPI the environment provides, and that venv sees the main venv's torch and
# slurmtorch through a site dir added after its own, so its mpi4py talks to MPICH.
MPICH = REPO / ".venv-mpich" / "bin"


@pytest.fixture(scope="module")
def mpich_env(has_torch):
    """Environment for MPICH's Hydra mpiexec (.venv-mpich) on this host: no other launcher's
    variables, MPICH's bin first on PATH, gloo on loopback."""
    need((MPICH / "mpiexec").exists(), "no MPICH venv (.venv-mpich: run scripts/setup)")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_", "PRTE_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")}
    env["PATH"] = f"{MPICH}{os.pathsep}{env.get('PATH', '')}"
    env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


@pytest.fixture(scope="session")
def has_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        need(False, "torch is not installed")


@dataclass
class Laptop:
    """The testbed's "laptop": commands run through `scripts/testbed laptop`, in a mount namespace
    with no Slurm or munge command on PATH and no Slurm or munge configuration, HOME set to
    `home`, whose `~/.ssh/config` reaches the login host as `login` (key `key`, host key pinned
    in `known_hosts`) and as `login-refused` (`refused_key`, which the login host refuses).

    On the login host (`ssh login ...`) the Slurm clients reach the testbed and `python` (this
    checkout's venv) runs slurmtorch; `workdir` is the cluster side's folder for job folders,
    which the nodes see. A clusters.yaml entry for it:
    `testbed: {host: login, site: testbed, python: <python>, workdir: <workdir>}`.
    """

    testbed: Testbed
    home: Path
    ssh_config: Path
    known_hosts: Path
    key: Path
    refused_key: Path
    login_addr: str
    python: str
    workdir: Path
    login_host: str = "login"
    env: dict[str, str] = field(default_factory=dict)

    def run(self, argv, *, timeout=120, check=False, env=None, **kw) -> subprocess.CompletedProcess:
        """Run `argv` as the laptop; returns the CompletedProcess (text, output captured)."""
        merged = dict(self.env)
        if env:
            merged.update(env)
        return subprocess.run(
            [str(TESTBED), "laptop", *(str(a) for a in argv)], env=merged, capture_output=True, text=True,
            timeout=timeout, check=check, **kw,
        )

    def login(self, action: str) -> None:
        """`scripts/testbed login stop|start`: stop the login host's sshd (and its sessions), or start it."""
        done = subprocess.run([str(TESTBED), "login", action], env=self.env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr


@pytest.fixture
def laptop(testbed: Testbed):
    """The laptop of the testbed's login host (see `Laptop`); its sshd runs at the start and is
    started again at the end if the test stopped it."""
    out = subprocess.run([str(TESTBED), "laptop-env"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        pytest.fail(f"scripts/testbed laptop-env failed:\n{out.stderr}", pytrace=False)
    exports = _parse_exports(out.stdout)
    # The laptop's own environment: this interpreter's venv first (slurmtorch), none of the
    # testbed fixture's client settings (`laptop` drops any SLURM_* left, SLURM_CONF included).
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    lap = Laptop(
        testbed=testbed,
        home=Path(exports["SLURMTORCH_TESTBED_LAPTOP_HOME"]),
        ssh_config=Path(exports["SLURMTORCH_TESTBED_SSH_CONFIG"]),
        known_hosts=Path(exports["SLURMTORCH_TESTBED_KNOWN_HOSTS"]),
        key=Path(exports["SLURMTORCH_TESTBED_LOGIN_KEY"]),
        refused_key=Path(exports["SLURMTORCH_TESTBED_REFUSED_KEY"]),
        login_addr=exports["SLURMTORCH_TESTBED_LOGIN_ADDR"],
        python=exports["SLURMTORCH_TESTBED_LOGIN_PYTHON"],
        workdir=Path(exports["SLURMTORCH_TESTBED_LOGIN_WORKDIR"]),
        login_host=exports["SLURMTORCH_TESTBED_LOGIN_HOST"],
        env=env,
    )
    lap.login("start")
    yield lap
    lap.login("start")


@pytest.fixture
def world_readable_tmp():
    """A folder nobody can reach (pytest's tmp_path is below a 0700 folder of root's)."""
    import tempfile  # only the tests that run a probe as nobody need it

    folder = Path(tempfile.mkdtemp(prefix="slurmtorch-snapshot-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
