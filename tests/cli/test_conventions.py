"""CLI conventions people expect (issue 13): --version, `python -m slurmtorch`, shell
completion, help on every option and no markup escapes in help, the LICENSE the metadata
names. These run the real `slurmtorch` in a subprocess; no scheduler is involved."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtorch import __version__

REPO = Path(__file__).resolve().parents[2]
VERBS = ["sbatch", "mpirun", "status", "logs", "cancel", "doctor", "site", "site list", "site show",
         "site validate", "site schema", "site init"]


def slurmtorch(*argv: str, module: str = "slurmtorch.cli.main") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, timeout=60)


def test_version_is_printed_by_the_command_and_by_python_dash_m():
    for module in ("slurmtorch.cli.main", "slurmtorch"):
        proc = slurmtorch("--version", module=module)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"slurmtorch {__version__}\n", ""), module


def test_python_dash_m_slurmtorch_is_the_cli():
    proc = slurmtorch("sbatch", "--site", "testbed", "--dry-run", "train.py", module="slurmtorch")
    assert proc.returncode != 0 and proc.stderr.startswith("error: SCRIPT train.py does not exist")  # the CLI's own one-line error
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("verb", VERBS)
def test_every_option_has_help_and_help_shows_no_markup_escapes(verb):
    proc = slurmtorch(*verb.split(), "--help")
    assert proc.returncode == 0, proc.stderr
    assert "\\[" not in proc.stdout, proc.stdout
    options = proc.stdout.split("Options:", 1)[1].split("Commands:", 1)[0] if "Options:" in proc.stdout else ""
    # An option's line (two-space indent, a dash) is followed on that line or the next by help text.
    lines = options.splitlines()
    bare = [ln.strip() for i, ln in enumerate(lines) if re.match(r"^  -", ln) and len(re.split(r"\s{2,}", ln.strip())) < 2
            and not (i + 1 < len(lines) and re.match(r"^\s{10,}\S", lines[i + 1]))]
    assert bare == [], f"options without help in `slurmtorch {verb} --help`: {bare}"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_shell_completion_scripts_are_offered(shell):
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.cli.main", "--show-completion", shell],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "slurmtorch" in proc.stdout, proc.stderr


def test_the_license_the_metadata_names_is_shipped():
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("\n                                 Apache License") or "Apache License" in text[:200]
    assert "Version 2.0, January 2004" in text
    meta = (REPO / "pyproject.toml").read_text()
    assert 'license = { text = "Apache-2.0" }' in meta and "License :: OSI Approved :: Apache Software License" in meta
