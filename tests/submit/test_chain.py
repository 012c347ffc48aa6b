"""A chain of jobs, without Slurm: each part's dependency by kind, the #SBATCH lines it is
rendered with, a chain file's mistakes as one line, and how an ended chain is reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmtorch.cli.main import main
from slurmtorch.errors import SpecError
from slurmtorch.submit.chain import KILL_ON_INVALID_DEP, Part, PartEnd, chained_options, dependency, end_lines
from slurmtorch.usecases import chain as chains


@pytest.mark.parametrize("after, previous, own, expected", [
    ("ok", None, None, None),
    ("ok", "12", None, "afterok:12"),
    ("any", "12", None, "afterany:12"),
    ("singleton", "12", None, "afterok:12,singleton"),
    ("singleton", None, None, "singleton"),
    ("ok", "12", "afterany:7", "afterok:12,afterany:7"),
    ("ok", None, "afterok:7", "afterok:7"),
])
def test_a_part_depends_on_the_part_before_as_its_after_says(after, previous, own, expected):
    part = Part("p", script="x.py", after=after, options={"dependency": own} if own else {})
    assert dependency(part, previous) == expected


@pytest.mark.parametrize("after, previous, kills", [
    ("ok", "12", True), ("singleton", "12", True), ("singleton", None, True), ("any", "12", False), ("ok", None, False),
])
def test_slurm_cancels_a_part_whose_dependency_fails_unless_it_keeps_going(after, previous, kills):
    options = chained_options(Part("p", script="x.py", after=after, options={"sbatch_args": ("--nice=5",)}), previous)
    assert options["sbatch_args"] == (("--nice=5", KILL_ON_INVALID_DEP) if kills else ("--nice=5",))


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working folder with three scripts, SLURMTORCH_HOME in it, no snapshot."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SLURMTORCH_SNAPSHOT", "off")
    monkeypatch.delenv("SLURMTORCH_SITE", raising=False)
    for name in ("train", "evaluate", "export"):
        (tmp_path / f"{name}.py").write_text("print('hi')\n")
    return tmp_path


def header(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#SBATCH --dependency")
            or line.startswith("#SBATCH --kill-on-invalid-dep")]


def test_the_rendered_part_carries_its_dependency_and_kill_on_invalid_dep(here):
    parts = chains.parts_given([{"name": "train", "script": "train.py"},
                                {"name": "evaluate", "script": "evaluate.py", "dependency": "afterany:7"},
                                {"name": "export", "script": "export.py", "after": "any"}], site="testbed")
    assert header(chains.render_part(parts[0], None).job.text) == []
    assert header(chains.render_part(parts[1], "1234").job.text) == [
        "#SBATCH --dependency=afterok:1234,afterany:7", "#SBATCH --kill-on-invalid-dep=yes"]
    assert header(chains.render_part(parts[2], "1235").job.text) == ["#SBATCH --dependency=afterany:1235"]


def test_the_dry_run_prints_every_part_after_a_placeholder(here, capsys):
    (here / "c.yaml").write_text("site: testbed\nparts:\n  - {name: train, script: train.py, time: '5'}\n"
                                 "  - {name: evaluate, script: evaluate.py, args: [--x, 1]}\n")
    assert main_code(["chain", "c.yaml", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# ---- part 1 of 2: 'train' on site testbed\n")
    assert "# ---- part 2 of 2: 'evaluate' on site testbed, after part 'train' (ok; job 0 stands" in out
    assert "#SBATCH --dependency=afterok:0\n" in out and out.count("#SBATCH --kill-on-invalid-dep=yes") == 1
    assert f"{here / 'evaluate.py'} --x 1\n" in out
    assert not (here / "home").exists() or not any((here / "home").rglob("script.sh"))


def main_code(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as ended:
        main(argv)
    return int(ended.value.code or 0)


GOOD = "  - {name: train, script: train.py}\n"


@pytest.mark.parametrize("text, expected", [
    ("parts: oops\n", "c.yaml: a chain file is a mapping with `parts:`"),
    ("parts: []\n", "c.yaml: the chain has no parts"),
    ("parts:\n  - [train]\n", "c.yaml: part 1 must be a mapping, not list"),
    ("parts:\n  - {script: train.py}\n", "c.yaml:2: part 1 needs a name"),
    ("parts:\n  - {name: 'a b', script: train.py}\n", "part 'a b' needs a name: letters"),
    (f"parts:\n{GOOD}  - {{name: ev, script: evaluate.py, gpus: 2}}\n", "c.yaml:3: part 'ev': unknown key 'gpus'"),
    (f"parts:\n{GOOD}  - {{name: ev, script: evaluate.py, gpus-per-node: 2}}\n",
     "c.yaml:3: part 'ev': unknown key 'gpus-per-node'"),
    (f"parts:\n{GOOD}  - {{name: ev, script: evaluate.py, after: maybe}}\n",
     "part 'ev': after must be one of ok, any, singleton, not 'maybe'"),
    (f"parts:\n{GOOD}  - {{name: ev}}\n", "part 'ev' needs a script or a module (one of them)"),
    (f"parts:\n{GOOD}  - {{name: ev, script: evaluate.py, module: m}}\n", "needs a script or a module"),
    (f"parts:\n{GOOD}{GOOD}", "c.yaml: two parts are named 'train'"),
    ("parts:\n  - {name: train, script: train.py, after: any}\n", "part 'train' is the first: after: any"),
    (f"parts:\n{GOOD}  - {{name: ev, script: evaluate.py, args: --x}}\n", "part 'ev': args must be a list"),
    (f"parts:\n{GOOD}  - {{name: ev, script: evaluate.py, nodes: two}}\n",
     "c.yaml:3: part 'ev': nodes must be a whole number, not 'two'"),
    (f"parts:\n{GOOD}  - {{name: ev, script: evaluate.py, exclusive: 1}}\n", "exclusive must be true or false"),
    (f"parts:\n{GOOD}  - {{name: ev, script: evaluate.py, dependency: 'afterok:1?afterok:2'}}\n",
     "uses '?' (any of them), which cannot join the chain's"),
    (f"parts:\n{GOOD}  - {{name: ev, script: evaluate.py, sbatch_args: [--kill-on-invalid-dep=no]}}\n",
     "part 'ev': --kill-on-invalid-dep is the chain's to set"),
    (f"sites: testbed\nparts:\n{GOOD}", "c.yaml:1: unknown key 'sites' in a chain file"),
    ("parts:\n  - {name: train, script: train.py\n", "c.yaml:3: YAML syntax error"),
    (f"site: testbed\nparts:\n{GOOD}  - {{name: ev, script: missing.py}}\n", "part 'ev': SCRIPT"),
    (f"site: testbed\nparts:\n{GOOD}  - {{name: ev, script: evaluate.py, nodes: 9}}\n", "part 'ev': "),
    (f"parts:\n{GOOD}  - {{name: ev, script: evaluate.py, site: nosuchsite}}\n", "part 'ev': "),
])
def test_a_bad_chain_file_is_one_line_and_nothing_submitted(here, capsys, monkeypatch, text, expected):
    (here / "c.yaml").write_text(text)
    monkeypatch.setenv("SLURMTORCH_SITE", "testbed")  # a part without a site of its own is the testbed's
    code = main_code(["chain", "c.yaml"])
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert code != 0 and lines[0].startswith("error: ") and expected in lines[0], err
    assert len(lines) <= 2 and all(line.startswith("tip: ") for line in lines[1:]), err
    assert not any((here / "home").rglob("script.sh"))


def test_a_chain_file_names_what_it_cannot_read(here, capsys):
    assert main_code(["chain", "nosuch.yaml"]) != 0
    assert capsys.readouterr().err.startswith("error: cannot read chain file nosuch.yaml")


def test_parts_given_in_python_are_checked_as_a_file_s():
    with pytest.raises(SpecError, match="part 'ev': unknown key 'gpus'"):
        chains.parts_given([{"name": "train", "script": "t.py"}, {"name": "ev", "script": "e.py", "gpus": 1}])
    parts = chains.parts_given([{"name": "train", "script": "t.py", "env": {"A": 1}},
                                Part("ev", script="e.py", after="any")], site="testbed")
    assert [(p.name, p.site, p.after) for p in parts] == [("train", "testbed", "ok"), ("ev", "testbed", "any")]
    assert parts[0].options == {"env": ("A=1",)}


def test_the_report_names_the_first_failed_part_and_what_it_cancelled():
    parts = [Part("train", script="t"), Part("evaluate", script="e"), Part("export", script="x")]
    code, failed, lines = end_lines([PartEnd("train", "1", "COMPLETED", 0), PartEnd("evaluate", "2", "FAILED", 3),
                                     PartEnd("export", "3", "CANCELLED", 1, started=False)], parts)
    assert (code, failed) == (3, "evaluate")
    assert lines == ["part 'train': job 1 COMPLETED (exit 0)", "part 'evaluate': job 2 FAILED (exit 3)",
                     "part 'export': job 3 never ran: cancelled: part 'evaluate' failed"]


def test_a_part_that_keeps_going_is_reported_as_it_ran():
    parts = [Part("train", script="t"), Part("evaluate", script="e"), Part("export", script="x", after="any")]
    code, failed, lines = end_lines([PartEnd("train", "1", "FAILED", 1), PartEnd("evaluate", "2", "CANCELLED", 1,
                                                                                  started=False),
                                     PartEnd("export", "3", "COMPLETED", 0)], parts)
    assert (code, failed) == (1, "train")
    assert lines[1:] == ["part 'evaluate': job 2 never ran: cancelled: part 'train' failed",
                         "part 'export': job 3 COMPLETED (exit 0)"]
    assert end_lines([PartEnd("train", "1", "COMPLETED", 0)], parts[:1]) == (0, None, [lines[0].replace(
        "FAILED (exit 1)", "COMPLETED (exit 0)")])


def test_the_python_chain_renders_as_the_cli(here):
    from slurmtorch import Chain

    chain = Chain([{"name": "train", "script": "train.py"}, {"name": "export", "script": "export.py"}],
                  site="testbed")
    assert repr(chain) == "Chain(train -> export)"
    text = chain.dry_run()
    assert text.count("# ---- part ") == 2 and "#SBATCH --dependency=afterok:0" in text
    assert Path(here / "home").exists() is False or not any((here / "home").rglob("script.sh"))
