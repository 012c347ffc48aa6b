"""The cluster side of a forwarded verb imports only what that verb needs."""

import subprocess
import sys


def test_cluster_side_of_status_imports_no_yaml(tmp_path):
    # The cluster side runs request.BOOT: `import slurmtorch`, then serve, then the verb as
    # typed, `--cluster NAME` among its words, so the verb imports forward to ask `elsewhere`
    # (built here by --help, which imports the verb's module as a run does). `status` reads
    # no YAML; the clusters file's reader (PyYAML, the site model) and ssh's edge cost ~40 ms
    # of every forwarded status, logs and cancel there (benchmarks/remote.py measures the
    # verbs; nothing here asserts a time).
    code = ("import os, sys\n"
            "from slurmtorch import protocol\n"
            "from slurmtorch.cli import serve\n"
            "os.environ[protocol.ON_CLUSTER] = '1'\n"
            "from slurmtorch.remote import forward\n"
            "assert not forward.elsewhere('dev')\n"
            "from slurmtorch.cli.main import main\n"
            "try:\n    main(['status', '--help'])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('LOADED', [m for m in ('yaml', 'slurmtorch.remote.clusters', 'slurmtorch.remote.ssh') if m in sys.modules], file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "SLURMTORCH_HOME": str(tmp_path / "home")})
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stderr
