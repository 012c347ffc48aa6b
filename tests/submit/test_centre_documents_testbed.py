"""Issue 34 on the real testbed: a site's job-time value reaches every rank expanded.

A site that `extends: testbed` sets `ST_HOME: {expand: "/scratch/${SLURM_JOB_ID}/${ST_WHO} x"}`
(LUMI's TORCH_HOME form; ST_WHO in the submitting environment, as USER would be) and the job
passes `--env ST_LIT='$ST_WHO'`: each rank, under srun and torchrun, sees the first expanded by
the batch script and the second exactly as typed.
"""

from __future__ import annotations

import json

import pytest

from helpers import st

PROBE = """\
import json, os
print(json.dumps({"rank": os.environ.get("RANK"), "home": os.environ.get("ST_HOME"),
                  "lit": os.environ.get("ST_LIT"), "job": os.environ.get("SLURM_JOB_ID")}), flush=True)
"""


@pytest.mark.timeout(240)
@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_a_job_time_value_reaches_every_rank_expanded_and_an_env_value_stays_literal(testbed, has_torch, tmp_path,
                                                                                     launcher):
    home = tmp_path / "home"
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    site = tmp_path / "site.yaml"
    site.write_text('extends: testbed\nenv:\n  ST_HOME: {expand: "/scratch/${SLURM_JOB_ID}/${ST_WHO} x"}\n')
    proc = st(testbed, home, ["sbatch", "--site", str(site), "-N", "2", "--launcher", launcher,
                              "--env", "ST_LIT=$ST_WHO", "--wait", str(probe)], env={"ST_WHO": "ana"}, timeout=200)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.split()[0]
    folder = home / "jobs" / job
    logs = [*folder.glob("rank-*.out"), *folder.glob("node-[0-9]*.out")]
    got = [json.loads(ln[ln.index("{"):]) for p in sorted(logs) for ln in p.read_text().splitlines() if "{" in ln]
    assert len(got) == 2, got
    assert all(r["home"] == f"/scratch/{job}/ana x" and r["lit"] == "$ST_WHO" for r in got), got
