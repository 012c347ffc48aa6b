"""README's main job, taken from README.md itself so the documented command cannot rot."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from conftest import REPO

PREFIX = 'scripts/setup && scripts/testbed up 4 && eval "$(scripts/testbed env)" && '


def readme_main_command() -> list[str]:
    text = (REPO / "README.md").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith(PREFIX)]
    argv = shlex.split(line[len(PREFIX):])
    assert argv[0] == ".venv/bin/slurmtorch"
    # The same console script, from whichever venv runs the tests.
    return [str(Path(sys.executable).parent / "slurmtorch"), *argv[1:]]


def test_readme_main_job_trains_ddp_across_four_nodes(testbed, has_torch, tmp_path, capsys):
    r = testbed.run(readme_main_command(), cwd=REPO, timeout=180, env={"SLURMTORCH_HOME": str(tmp_path)})
    with capsys.disabled():  # shown in CI's log
        print("\n  " + " ".join(readme_main_command()[1:]) + "\n    " + "\n    ".join(r.stdout.splitlines()))
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.splitlines()[0]
    assert re.fullmatch(r"\d+", job_id)
    assert "trained on 4 ranks across nodes node1,node2,node3,node4" in r.stdout
    assert f"job {job_id} COMPLETED (exit 0)" in r.stderr
