"""`slurmtorch sbatch|mpirun [OPTIONS] SCRIPT [ARGS]...`: options end at SCRIPT (or with
`-m MODULE`), and everything after reaches the program as typed, as with sbatch and torchrun.

In-process through the real CLI boundary with --dry-run; the rendered launch line is read
back by bash, so "as typed" means the argv the ranks get, byte for byte.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from slurmtorch.cli._common import stray_options
from slurmtorch.cli.main import main

HOSTILE = ["--lr", "1e-3", "-n", "2", "a b", "$HOME", ";rm -rf /tmp/x", "line\nbreak", "--site", "hdr-ib",
           "-m", "x", "--help", "'", "", "-N", "3", "é", "--env=A=1"]


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
    args = [*HOSTILE, "--dry-run", "--wait", "--", "--nodes", "2", "--"]
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
    (["train.py", "x", "--env=A=1", "--", "y"], "--env"),  # named, not its value: it may be a secret
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
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", "--env", "TOKEN=s3cret", "train.py", "--",
                         "--env", "B=kept", "--wait", "--dry-run")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("# Run with: "))
    assert line == ("# Run with: slurmtorch sbatch --site testbed --env TOKEN=... train.py -- --env B=kept --wait "
                    "--dry-run")
    assert out.count("s3cret") == 1


def test_stray_options_names_each_of_ours_once_in_its_long_short_and_equals_forms():
    ours = {"--nodes", "-N", "--wait", "--env", "-n", "--ntasks"}
    words = ["--lr", "1", "--nodes", "2", "-N", "3", "--env=TOKEN=s3cret", "--wait", "--nodes=4", "-n", "x",
             "--nodesx", "-N2", "--", "--ntasks"]
    assert stray_options(words, ours) == ["--nodes", "-N", "--env", "--wait", "-n", "--ntasks"]
    assert stray_options(["--lr", "1", "a b", "-", "--"], ours) == []


@pytest.mark.parametrize("verb, flags", [(["sbatch", "--site", "testbed"], ["--nodes", "--time"]),
                                         (["mpirun", "-n", "2"], ["--np", "--timeout"])])
def test_slurmtorch_options_after_script_are_named_in_one_warning_and_still_reach_the_script(cli, verb, flags):
    """`sbatch train.py --nodes 2 --time 10` ran on 1 node for the default time, without a word.
    Only the verb's own are named (mpirun has no --nodes), each once."""
    code, out, err = cli(*verb, "--dry-run", "train.py", flags[0], "3", "--lr", "1", flags[1], "--nodes", flags[0])
    assert code == 0
    assert err == (f"warning: {flags[0]}, {flags[1]} after train.py go to the script, not to slurmtorch (put "
                   "slurmtorch's options before the script; use -- before the script's own to silence this)\n")
    assert program_argv(out, cli.script) == [flags[0], "3", "--lr", "1", flags[1], "--nodes", flags[0]]
    assert "#SBATCH --nodes=1\n" in out or verb[0] == "mpirun"


def test_one_of_ours_in_its_short_or_equals_form_is_named_as_typed_without_its_value(cli):
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", "train.py", "-N", "2", "--env=TOKEN=s3cret")
    assert code == 0 and err.startswith("warning: -N, --env after train.py go to the script") and "s3cret" not in err


def test_after_a_module_the_warning_names_the_module(cli):
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", "-m", "pkg.train", "--time", "1:00")
    assert code == 0 and err.startswith("warning: --time after -m pkg.train goes to the module, not to slurmtorch")
    assert "use -- before the module's own to silence this" in err


@pytest.mark.parametrize("argv", [["train.py", "--", "--nodes", "2", "--wait"], ["-m", "pkg", "--", "-N", "2"],
                                  ["train.py", "--lr", "1", "--help"]])
def test_a_double_dash_right_after_the_program_or_none_of_ours_is_silent(cli, argv):
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", *argv)
    assert code == 0 and err == ""


def test_run_warns_of_its_own_options_only(cli):
    """`run`'s options are -m and --dry-run: sbatch's --nodes after SCRIPT is the script's business."""
    from slurmtorch.cli._common import ProgramCommand
    from slurmtorch.cli.main import build_app
    import typer

    command = typer.main.get_command(build_app(["run"])).commands["run"]
    assert isinstance(command, ProgramCommand)
    flags = {f for p in command.params for f in p.opts}
    assert stray_options(["--nodes", "2", "--dry-run"], flags) == ["--dry-run"]


def test_the_clusters_side_of_a_forwarded_verb_does_not_warn_again(cli, monkeypatch):
    monkeypatch.setenv("SLURMTORCH_ON_CLUSTER", "1")
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", "train.py", "--nodes", "2")
    assert code == 0 and err == ""


@pytest.mark.parametrize("verb, done", [(["sbatch", "--site", "testbed"], "submitted"), (["mpirun", "-n", "2"], "run"),
                                        (["run"], "run")])
@pytest.mark.parametrize("program", [["train.py", "--lr", "1"], ["-m", "pkg.train", "--lr", "1"]])
def test_an_option_that_changes_what_slurmtorch_does_is_refused_after_the_program(cli, verb, done, program):
    """Issue 44: `sbatch train.py --dry-run` submitted a real job (with a warning). After SCRIPT
    without a '--', an option of ours that says what slurmtorch does (--dry-run, --wait, ...)
    is refused: nothing runs, and one line shows where each reading of it goes."""
    flag = "--dry-run"
    code, out, err = cli(*verb, *program, flag)
    where = "train.py" if program[0] == "train.py" else "-m pkg.train"
    assert code == 2 and out == "", err
    assert err.splitlines() == [
        f"error: {flag} after {where} would go to the {'script' if where == 'train.py' else 'module'}, and "
        f"slurmtorch would go on without it: refused, nothing {done}",
        f"tip: for slurmtorch, before it: slurmtorch {verb[0]} {flag} {where} ...; for the "
        f"{'script' if where == 'train.py' else 'module'}, after a '--': {where} -- {flag}"], err
    assert not (cli.home / "jobs").exists() or not list((cli.home / "jobs").iterdir())


@pytest.mark.parametrize("flags", [["--wait"], ["--parsable"], ["--cancel-on-interrupt"], ["--cluster=x"],
                                   ["--wait", "--nodes", "2", "--dry-run"]])
def test_every_option_of_sbatch_that_says_what_it_does_is_refused_after_script(cli, flags):
    code, out, err = cli("sbatch", "--site", "testbed", "train.py", *flags)
    named = ", ".join(f.split("=")[0] for f in flags if f in ("--wait", "--dry-run") or f.startswith("--")
                      and f.split("=")[0] in ("--parsable", "--cancel-on-interrupt", "--cluster"))
    assert code == 2 and out == "" and err.startswith(f"error: {named} after train.py would go to the script"), err


def test_the_same_options_after_a_double_dash_are_the_scripts(cli):
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", "train.py", "--", "--dry-run", "--wait")
    assert code == 0 and err == "", err
    assert program_argv(out, cli.script) == ["--dry-run", "--wait"]
