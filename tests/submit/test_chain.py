"""A chain of jobs, without Slurm: each part's dependency by kind, the #SBATCH lines it is
rendered with, a chain file's mistakes as one line, how an ended chain is reported, and the
record in every part's folder that finds the chain again by any part's id."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmtorch.cli.main import main
import os

from slurmtorch.errors import SpecError, SubmitError
from slurmtorch.submit.launch.chain import (KILL_ON_INVALID_DEP, RECORD, Part, PartEnd, RecordedPart, chained_options,
                                            dependency, end_lines, held_namesake, parse_record, record_text,
                                            status_lines)
from slurmtorch.submit.edge.sbatch import Submission
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


# --------------------------------------------------------------------------- the chain as one, by any part's id


def test_a_chain_still_running_says_each_part_s_state_and_how_many_ended():
    parts = [Part("train", script="t"), Part("evaluate", script="e"), Part("export", script="x")]
    lines = status_lines([PartEnd("train", "1", "COMPLETED", 0), PartEnd("evaluate", "2", "RUNNING on c1 0:42", 0,
                                                                         done=False),
                          PartEnd("export", "3", "PENDING (Dependency) 0:50", 0, started=False, done=False)], parts)
    assert lines == ["chain train -> evaluate -> export (3 parts):", "  part 'train': job 1 COMPLETED (exit 0)",
                     "  part 'evaluate': job 2 RUNNING on c1 0:42", "  part 'export': job 3 PENDING (Dependency) 0:50",
                     "chain: 1 of 3 parts ended"]


def test_a_failed_chain_s_status_names_the_part_its_report_and_what_it_cancelled():
    parts = [Part("train", script="t"), Part("evaluate", script="e"), Part("export", script="x")]
    ends = [PartEnd("train", "1", "COMPLETED", 0), PartEnd("evaluate", "2", "FAILED", 3),
            PartEnd("export", "3", "CANCELLED", 1, started=False)]
    lines = status_lines(ends, parts, ["job 2 FAILED (exit 3 from rank 0)", "failed: rank 0 on c1: SystemExit 3"])
    assert lines[3:] == ["  part 'export': job 3 never ran: cancelled: part 'evaluate' failed",
                         "chain failed at part 'evaluate' (job 2):", "  job 2 FAILED (exit 3 from rank 0)",
                         "  failed: rank 0 on c1: SystemExit 3"]
    assert status_lines(ends[:1], parts[:1])[-1] == "chain: all 1 parts completed"


def test_the_chain_record_reads_back_as_written():
    parts = [RecordedPart("train", "12", "/h/jobs/12", "ok"), RecordedPart("export", "13", "/h/jobs/13", "any")]
    assert parse_record(record_text(parts), "chain.json") == tuple(parts)


@pytest.mark.parametrize("text", [
    "{not json",
    "[]",
    '{"parts": []}',
    '{"parts": [{"name": "train", "job_id": 12, "folder": "/h/jobs/12", "after": "ok"}]}',
    '{"parts": [{"name": "train", "job_id": "12; rm -rf /", "folder": "/h/jobs/12", "after": "ok"}]}',
    '{"parts": [{"name": "train", "job_id": "12", "folder": "/h/jobs/12", "after": "later"}]}',
])
def test_a_record_slurmtorch_did_not_write_is_one_line_naming_it(text):
    with pytest.raises(SubmitError, match="/h/jobs/12/chain.json") as err:
        parse_record(text, "/h/jobs/12/chain.json")
    assert "\n" not in err.value.message


def parts_in_folders(home: Path, ids=("12", "13", "14")) -> tuple[tuple[Part, ...], list[Submission]]:
    """Three parts and their job folders, as a submission leaves them (before the record)."""
    root = home / "jobs"
    root.mkdir(parents=True, mode=0o700)
    os.chmod(home, 0o700)
    subs = []
    for job_id in ids:
        (root / job_id).mkdir(mode=0o700)
        subs.append(Submission(job_id, root / job_id))
    return (Part("train", script="t"), Part("evaluate", script="e"), Part("export", script="x", after="any")), subs


def test_every_part_s_folder_holds_the_chain_s_record_privately(here):
    parts, subs = parts_in_folders(here / "home")
    chains.write_records(parts, subs)
    for sub in subs:
        assert (sub.job_dir / RECORD).stat().st_mode & 0o777 == 0o600
        assert [p.job_id for p in parse_record((sub.job_dir / RECORD).read_text(), "x")] == ["12", "13", "14"]
    chain = chains.chain_of(subs[1].job_dir)
    assert chain is not None and chain.job_ids == ("12", "13", "14") and chain.folders == tuple(s.job_dir for s in subs)
    assert [(p.name, p.after) for p in chain.parts] == [("train", "ok"), ("evaluate", "ok"), ("export", "any")]
    assert chains.attach("14").job_ids == chain.job_ids


def test_a_record_that_cannot_be_written_is_one_line_naming_it(here):
    parts, subs = parts_in_folders(here / "home")
    (subs[2].job_dir / RECORD).mkdir()  # os.replace cannot put a file there
    with pytest.raises(SubmitError, match=f"cannot write the chain record {subs[2].job_dir / RECORD}"):
        chains.write_records(parts, subs)


def test_a_record_that_cannot_be_written_undoes_the_chain_in_one_line(here):
    """What `submit` raises once it has withdrawn the held parts (the testbed pins a refused part's)."""
    parts, subs = parts_in_folders(here / "home")
    (subs[2].job_dir / RECORD).mkdir()
    with pytest.raises(SubmitError) as err:
        chains.write_records(parts, subs)
    undone = chains._not_submitted(err.value, parts, subs)
    assert undone.message == (f"chain not submitted: cannot write the chain record {subs[2].job_dir / RECORD}: "
                              "Is a directory; parts 'train', 'evaluate', 'export' (jobs 12, 13, 14) cancelled "
                              "before starting")


def test_a_record_naming_other_jobs_is_refused(here):
    parts, subs = parts_in_folders(here / "home")
    chains.write_records(parts, subs[:2])
    (subs[2].job_dir / RECORD).write_text((subs[0].job_dir / RECORD).read_text())
    with pytest.raises(SubmitError, match="does not name job 14 among its parts"):
        chains.chain_of(subs[2].job_dir)


@pytest.mark.parametrize("job_id, expected", [
    ("12; rm -rf /", "invalid job id '12; rm -rf /'"),
    ("99", "no job 99 in "),
    ("12", "job 12 is not part of a chain (its folder has no chain.json)"),
])
def test_attaching_to_what_is_not_a_chain_s_part_is_one_line(here, job_id, expected):
    from slurmtorch import Chain

    parts_in_folders(here / "home", ids=("12",))
    with pytest.raises(SpecError) as err:
        Chain.attach(job_id)
    assert err.value.message.startswith(expected) and "\n" not in err.value.message


def test_a_held_job_of_a_singleton_parts_name_is_the_refusal_and_others_are_not():
    singletons = {"export-job": "export"}
    error = held_namesake(singletons, [("7", "train"), ("8", "export-job")])
    assert error is not None and error.message == ("chain not submitted: part 'export' (after: singleton) would "
                                                   "wait for good behind job 8, held, of the same name 'export-job'")
    assert error.tip.startswith("slurmtorch cancel 8 (left held by a submission killed midway)")
    assert held_namesake(singletons, [("7", "train")]) is None
    assert held_namesake({}, [("8", "export-job")]) is None
