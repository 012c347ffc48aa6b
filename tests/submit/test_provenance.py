"""script.sh's `# Run with:` comment: the command as typed, less the --env values.

Through the real CLI (`--dry-run` renders what `sbatch` would write into script.sh).
An --env value is often a secret; the export line needs it, the comment does not.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from slurmtorch import Distributor
from slurmtorch.submit.launch.provenance import redact_env

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "probe.py"
SECRET = "hf_s3cr3t-token"


def dry_run(*argv: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.cli.main", *argv], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_env_values_are_written_once_in_the_export_line_and_not_in_the_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path))
    text = dry_run("sbatch", "--site", "local", "--dry-run", "--env", f"HF_TOKEN={SECRET}",
                   f"--env=WANDB_API_KEY={SECRET}2", str(SCRIPT), "--", "--env", "SCRIPT_ARG=kept", "--dry-run")
    provenance = next(ln for ln in text.splitlines() if ln.startswith("# Run with: "))
    # The script's own arguments (after SCRIPT) are kept as typed, its --dry-run included.
    assert provenance == (f"# Run with: slurmtorch sbatch --site local --env HF_TOKEN=... --env=WANDB_API_KEY=... "
                          f"{SCRIPT} -- --env SCRIPT_ARG=kept --dry-run")
    assert text.count(SECRET) == 2  # HF_TOKEN's and WANDB_API_KEY's export lines, nothing else
    assert f"export HF_TOKEN={SECRET}\n" in text and f"export WANDB_API_KEY={SECRET}2\n" in text


def test_mpirun_scripts_redact_too(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path))
    text = dry_run("mpirun", "-n", "2", "--dry-run", "--env", f"TOKEN={SECRET}", str(SCRIPT))
    assert text.count(SECRET) == 1 and "--env TOKEN=..." in text


def test_redaction_keeps_names_a_bare_name_and_everything_after_the_double_dash():
    assert redact_env(("slurmtorch", "sbatch", "--env", "A=1=2", "--env", "BARE", "--env=C=", "x.py", "--",
                       "--env=D=4")) == \
        ("slurmtorch", "sbatch", "--env", "A=...", "--env", "BARE", "--env=C=...", "x.py", "--", "--env=D=4")
    assert redact_env(("slurmtorch", "sbatch", "--env")) == ("slurmtorch", "sbatch", "--env")


def test_redaction_keeps_the_script_arguments_the_command_ends_with_and_only_those():
    command = ("slurmtorch", "sbatch", "--env", "A=1", "x.py", "--env", "B=2")
    assert redact_env(command, ("--env", "B=2")) == ("slurmtorch", "sbatch", "--env", "A=...", "x.py", "--env", "B=2")
    # Arguments that are not the command's tail protect nothing.
    assert redact_env(command, ("--env", "C=3")) == ("slurmtorch", "sbatch", "--env", "A=...", "x.py", "--env", "B=...")
    assert redact_env(("--env", "A=1"), ("x", "--env", "A=1")) == ("--env", "A=...")


def test_a_distributors_provenance_names_its_env_without_the_values():
    """A Distributor's repr is its script.sh's `# Run with:` line."""
    shown = repr(Distributor(num_processes=2, env={"HF_TOKEN": SECRET, "A": "1"}, time="5"))
    assert SECRET not in shown and "env=['HF_TOKEN=...', 'A=...']" in shown and "time='5'" in shown
