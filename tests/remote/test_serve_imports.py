"""The cluster side of a forwarded verb imports only what that verb needs."""

import subprocess
import sys


def test_cluster_side_of_status_imports_no_yaml(tmp_path):
    # The cluster side runs request.BOOT: `import slurmtorch`, then serve, then the verb
    # (built here by --help, which imports its module as a run does).
    # `status` reads no YAML; importing the clusters file's reader (and PyYAML) there cost
    # ~28 ms of every forwarded status, logs and cancel (benchmarks/remote.py measures it;
    # nothing here asserts a time).
    code = ("import sys\n"
            "from slurmtorch.remote import serve\n"
            "from slurmtorch.cli.main import main\n"
            "try:\n    main(['status', '--help'])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('LOADED', [m for m in ('yaml', 'slurmtorch.remote.clusters') if m in sys.modules], file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "SLURMTORCH_HOME": str(tmp_path / "home")})
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stderr
