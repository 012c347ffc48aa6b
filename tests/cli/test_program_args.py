"""`slurmtorch sbatch|mpirun [OPTIONS] SCRIPT [ARGS]...`: options end at SCRIPT (or with
`-m MODULE`), and everything after reaches the program as typed, as with sbatch and torchrun.

In-process through the real CLI boundary with --dry-run; the rendered launch line is read
back by bash, so "as typed" means the argv the ranks get, byte for byte.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from slurmtorch.cli.main import main

HOSTILE = ["--lr", "1e-3", "-n", "2", "a b", "$HOME", ";rm -rf /tmp/x", "line\nbreak", "--site", "hdr-ib",
           "-m", "x", "--dry-run", "--help", "'", "", "-N", "3", "é", "--env=A=1"]


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """`slurmtorch ARGV` in-process; returns (exit code, stdout, stderr)."""
    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SLURMTORCH_SITE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main(list(argv))
        out, err = capsys.readouterr()
        return exc.value.code, out, err

    run.script = str(tmp_path / "train.py")
    run.home = tmp_path / "home"
    return run


def program_argv(text: str, marker: str) -> list[str]:
    """The argv after `marker` on the launch line, as bash reads it (continuation lines joined)."""
    line = text.replace("\\\n", " ")
    line = next(ln for ln in line.splitlines() if "-m slurmtorch.bootstrap " in ln and not ln.startswith("#"))
    # sbatch's script is the snapshot's copy, "$SLURMTORCH_CODE"/train.py: here the folder it was copied from.
    words = subprocess.run(["bash", "-c", 'printf "%s\\0" ' + line.split(" \\n")[0].split("bootstrap ", 1)[1]],
                           capture_output=True, check=True, env={"SLURMTORCH_CODE": os.path.dirname(marker)},
                           ).stdout.split(b"\0")[:-1]
    words = [w.decode() for w in words]
    return words[words.index(marker) + 1:]


@pytest.mark.parametrize("verb", [["sbatch", "--site", "testbed"], ["mpirun", "-n", "2"]])
def test_everything_after_script_reaches_it_byte_for_byte(cli, verb):
    code, out, err = cli(*verb, "--dry-run", "train.py", *HOSTILE)
    assert code == 0, err
    assert program_argv(out, cli.script) == HOSTILE
    assert "--site hdr-ib" not in out.split("# Run with:")[0]  # nothing went to slurmtorch
    assert "site testbed" in out or verb[0] == "mpirun"


def test_after_a_leading_double_dash_even_slurmtorchs_options_and_more_double_dashes_are_the_scripts(cli):
    args = [*HOSTILE, "--", "--nodes", "2", "--"]
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", "train.py", "--", *args)
    assert code == 0, err
    assert program_argv(out, cli.script) == args


def test_a_double_dash_right_after_script_only_separates(cli):
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", "train.py", "--", "--lr", "--", "x")
    assert code == 0, err
    assert program_argv(out, cli.script) == ["--lr", "--", "x"]
    # ... and one before SCRIPT ends slurmtorch's options, as click's '--' always did.
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", "--", "train.py", "--lr")
    assert code == 0, err
    assert program_argv(out, cli.script) == ["--lr"]


@pytest.mark.parametrize("spelling", [["-m", "pkg.train"], ["-mpkg.train"], ["--module", "pkg.train"],
                                      ["--module=pkg.train"]])
def test_module_ends_the_options_and_the_rest_is_the_modules(cli, spelling):
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", *spelling, "-N", "3", "--lr", "1", "train.py")
    assert code == 0, err
    assert program_argv(out, "pkg.train") == ["-N", "3", "--lr", "1", "train.py"]
    assert "#SBATCH --nodes=1\n" in out


def test_the_module_option_as_another_options_value_is_just_that_value(cli):
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", "-J", "-m", "train.py", "x")
    assert code == 0, err
    assert "#SBATCH --job-name=-m\n" in out and program_argv(out, cli.script) == ["x"]


def test_the_issues_command_line_works(cli, monkeypatch):
    """`slurmtorch sbatch train.py --site hdr-ib --lr 1e-3` failed with "No such option '--lr'"."""
    monkeypatch.setenv("SLURMTORCH_SITE", "testbed")
    code, out, err = cli("sbatch", "--dry-run", "train.py", "--site", "hdr-ib", "--lr", "1e-3")
    assert code == 0, err
    assert program_argv(out, cli.script) == ["--site", "hdr-ib", "--lr", "1e-3"] and "/ site testbed /" in out


@pytest.mark.parametrize("argv, flag", [
    (["train.py", "--nodes", "2", "--", "--lr", "1"], "--nodes"),
    (["train.py", "--dry-run", "--", "x"], "--dry-run"),
    (["train.py", "x", "--env=A=1", "--", "y"], "--env=A=1"),
    (["-m", "pkg", "-N", "2", "--", "y"], "-N"),
])
def test_slurmtorch_options_between_script_and_a_later_double_dash_are_refused(cli, argv, flag):
    """The old form gave them to slurmtorch; now they would go to the script: say so, submit nothing."""
    code, out, err = cli("sbatch", "--site", "testbed", *argv)
    assert code != 0 and out == ""
    lines = err.splitlines()
    assert lines[0].startswith(f"error: slurmtorch option {flag} after ") and lines[1].startswith("tip: put slurmtorch")
    assert not (cli.home / "jobs").exists() or not list((cli.home / "jobs").iterdir())


def test_the_scripts_own_options_before_a_later_double_dash_are_the_scripts(cli):
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", "train.py", "--lr", "1", "--", "--nodes", "2")
    assert code == 0, err
    assert program_argv(out, cli.script) == ["--lr", "1", "--", "--nodes", "2"]


def test_provenance_keeps_the_scripts_arguments_and_redacts_only_slurmtorchs_env(cli):
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", "--env", "TOKEN=s3cret", "train.py",
                         "--env", "B=kept", "--wait", "--dry-run")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("# Run with: "))
    assert line == "# Run with: slurmtorch sbatch --site testbed --env TOKEN=... train.py --env B=kept --wait --dry-run"
    assert out.count("s3cret") == 1
