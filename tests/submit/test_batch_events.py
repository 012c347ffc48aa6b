"""The batch script's own events (`started`, `ended`) in the job's record, written by the
rendered script's bash (`slurmtorch_event`), read back by `slurmtorch.events`: whatever
Slurm's variables hold, every line is JSON, and a script killed mid-run still notes its end."""

from __future__ import annotations

import json
import signal
import subprocess
import time

from slurmtorch import events
from slurmtorch.submit import render, sites
from slurmtorch.submit.jobfolder import story
from slurmtorch.submit.options import Options
from slurmtorch.submit.spec import build_spec


def event_function() -> str:
    """The rendered batch script's `slurmtorch_event` function, as bash text."""
    spec = build_spec(sites.load_site("testbed"), Options(script="/home/user/train.py", python="/usr/bin/python3",
                                                           job_root="/home/user/.slurmtorch/jobs"))
    lines = render.render_sbatch(spec).splitlines()
    first = lines.index("slurmtorch_event() {")
    return "\n".join(lines[first:lines.index("}", first) + 1]) + "\n"


def run(folder, body: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", event_function() + body], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "SLURMTORCH_JOB_DIR": str(folder), **env})


def test_the_batch_script_notes_each_start_with_its_nodes_and_its_end_with_the_exit_code(tmp_path):
    done = run(tmp_path, "slurmtorch_event started; slurmtorch_event ended 3",
               SLURM_RESTART_COUNT="1", SLURM_JOB_NODELIST="node[1-2],gpu-a01", SLURMD_NODENAME="node1")
    assert done.returncode == 0, done.stderr
    started, ended = events.read(tmp_path)
    assert (started.kind, dict(started.fields)) == ("started", {"attempt": 1, "nodes": "node[1-2],gpu-a01",
                                                                "host": "node1"})
    assert (ended.kind, dict(ended.fields)) == ("ended", {"attempt": 1, "code": 3})
    assert story.fold([started, ended]).attempts[0].node_count == 3


def test_a_value_that_is_no_node_list_host_or_number_is_left_out_and_the_line_stays_json(tmp_path):
    done = run(tmp_path, "slurmtorch_event started; slurmtorch_event ended '1,\"x\":2'",
               SLURM_RESTART_COUNT='0,"evil":1', SLURM_JOB_NODELIST='node1","host":"x\\"}\n{"v":1',
               SLURMD_NODENAME="a b\nc")
    assert done.returncode == 0, done.stderr
    raw = (tmp_path / events.FILE).read_text().splitlines()
    assert len(raw) == 2 and all(isinstance(json.loads(line), dict) for line in raw), raw
    started, ended = events.read(tmp_path)
    assert dict(started.fields) == {"attempt": 0, "nodes": "", "host": ""}
    assert dict(ended.fields) == {"attempt": 0}


def test_a_batch_script_killed_mid_run_notes_its_end_without_a_code(tmp_path):
    """A requeue, scancel or the time limit TERMs the script: its start's span still ends there."""
    proc = subprocess.Popen(["bash", "-c", event_function() + "slurmtorch_event started; sleep 60 & wait"],
                            env={"PATH": "/usr/bin:/bin", "SLURMTORCH_JOB_DIR": str(tmp_path),
                                 "SLURM_JOB_NODELIST": "node1", "SLURMD_NODENAME": "node1"})
    deadline = time.monotonic() + 30
    while not events.read(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM  # bash ends by the signal, its EXIT trap run first
    assert [(e.kind, dict(e.fields)) for e in events.read(tmp_path)] == [
        ("started", {"attempt": 0, "nodes": "node1", "host": "node1"}), ("ended", {"attempt": 0})]


def test_the_record_is_never_written_through_a_link(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / events.FILE).symlink_to(elsewhere)
    done = run(tmp_path / "job", "slurmtorch_event started; slurmtorch_event ended 0", SLURM_JOB_NODELIST="node1")
    assert done.returncode == 0 and elsewhere.read_text() == "", done.stderr
