"""README's main job, taken from README.md itself so the documented command and the output
it shows cannot rot."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from conftest import REPO

PREFIX = 'scripts/setup && scripts/testbed up 4 && eval "$(scripts/testbed env)" && '
STDERR_MARK = "(stderr)"
# What README's output block leaves open: values that vary, and the default job folder root
# (the test runs with SLURMTORCH_HOME in tmp_path).
PLACEHOLDERS = {"<loss>": r"\d+\.\d{4}", "/root/.slurmtorch": None, "<job id>": None}


def readme_main_command() -> list[str]:
    text = (REPO / "README.md").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith(PREFIX)]
    argv = shlex.split(line[len(PREFIX):])
    assert argv[0] == ".venv/bin/slurmtorch"
    # The same console script, from whichever venv runs the tests.
    return [str(Path(sys.executable).parent / "slurmtorch"), *argv[1:]]


def readme_main_output() -> tuple[list[str], list[str]]:
    """(stdout lines, stderr lines) of the first ```text block after the main command."""
    text = (REPO / "README.md").read_text()
    after = text[text.index(PREFIX):]
    block = after[after.index("```text\n") + len("```text\n"):]
    block = block[:block.index("```")]
    out, err = [], []
    for line in block.splitlines():
        if line.rstrip().endswith(STDERR_MARK):
            err.append(line.rstrip()[:-len(STDERR_MARK)].rstrip())
        else:
            out.append(line.rstrip())
    return out, err


def pattern(line: str, job_id: str, home: str) -> re.Pattern:
    """A README line as a regex: literal text, with its placeholders filled in."""
    values = dict(PLACEHOLDERS, **{"<job id>": re.escape(job_id), "/root/.slurmtorch": re.escape(home)})
    parts = re.split("(" + "|".join(re.escape(k) for k in values) + ")", line)
    return re.compile("".join(values[p] if p in values else re.escape(p) for p in parts))


def matches(readme_lines: list[str], got: str, job_id: str, home: str) -> list[str]:
    """The README lines not found, in order, among the output's lines."""
    lines, at, missing = got.splitlines(), 0, []
    for want in readme_lines:
        regex = pattern(want, job_id, home)
        found = next((i for i in range(at, len(lines)) if regex.fullmatch(lines[i])), None)
        if found is None:
            missing.append(want)
        else:
            at = found + 1
    return missing


def test_readme_output_block_parses_and_matches_its_own_shape():
    out, err = readme_main_output()
    assert out[0] == "<job id>" and out[-1].startswith("trained on 4 ranks")
    assert err[-1] == "job <job id> COMPLETED (exit 0)"
    fake_out = "123\nepoch 0 loss 0.5000\nepoch 1 loss 0.2500\nepoch 2 loss 0.1250\n" \
               "trained on 4 ranks across nodes node1,node2,node3,node4 final loss 0.1250 (local rank 0)\n"
    fake_err = ("submitted job 123; folder /tmp/h/jobs/123\njob 123: PENDING\njob 123: RUNNING on node[1-4]\n"
                "some warning\njob 123 COMPLETED (exit 0)\n")
    assert matches(out, fake_out, "123", "/tmp/h") == []
    assert matches(err, fake_err, "123", "/tmp/h") == []
    assert matches(out, fake_out.replace("0.5000", "nan"), "123", "/tmp/h") == ["epoch 0 loss <loss>"]


@pytest.mark.slurm_versions
def test_readme_main_job_trains_ddp_across_four_nodes(testbed, has_torch, tmp_path, capsys):
    r = testbed.run(readme_main_command(), cwd=REPO, timeout=180, env={"SLURMTORCH_HOME": str(tmp_path)})
    with capsys.disabled():  # shown in CI's log
        print("\n  " + " ".join(readme_main_command()[1:]) + "\n    " + "\n    ".join(r.stdout.splitlines()))
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.splitlines()[0]
    assert re.fullmatch(r"\d+", job_id)
    assert "trained on 4 ranks across nodes node1,node2,node3,node4" in r.stdout
    assert f"job {job_id} COMPLETED (exit 0)" in r.stderr
    # What README shows it prints: stdout exactly, and its stderr lines among rank 0's own.
    out, err = readme_main_output()
    assert len(r.stdout.splitlines()) == len(out), r.stdout
    assert matches(out, r.stdout, job_id, str(tmp_path)) == [], r.stdout
    assert matches(err, r.stderr, job_id, str(tmp_path)) == [], r.stderr


def test_site_init_on_the_testbed_writes_a_site_that_runs_readme_main_job(testbed, has_torch, tmp_path):
    """A cluster with no preset: `site init` writes its site from what Slurm says, and README's
    main job runs on it unchanged but for --site (issue 36)."""
    slurmtorch = readme_main_command()[0]
    generated = tmp_path / "mine.yaml"
    init = testbed.run([slurmtorch, "site", "init", generated], cwd=tmp_path, timeout=60)
    assert init.returncode == 0, init.stderr
    # debug (node[1-4]) and fat (node[3-4], whose nodes have one feature more: a node type of their own)
    assert init.stderr.startswith(f"wrote {generated}: site 'mine', 2 partitions, 2 node types;"), init.stderr
    assert "\nmax_array_size: 1001  # scontrol show config: MaxArraySize\n" in generated.read_text()  # the testbed's
    argv = readme_main_command()
    argv[argv.index("--site") + 1] = str(generated)
    r = testbed.run(argv, cwd=REPO, timeout=180, env={"SLURMTORCH_HOME": str(tmp_path / "home")})
    assert r.returncode == 0, r.stderr
    assert "trained on 4 ranks across nodes node1,node2,node3,node4" in r.stdout, r.stdout
