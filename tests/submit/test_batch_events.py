"""The batch script's own events (`started`, `ended`) in the job's record, written by the
script's bash (record.sh's `note`, called where the script starts and in its `finish`), read
back by `slurmtorch.events`: whatever Slurm's variables hold, every line is JSON of this
version, and a script killed mid-run still notes its end."""

from __future__ import annotations

import json
import os
import signal
import subprocess

from slurmtorch import events
from slurmtorch.submit import sites
from slurmtorch.submit.jobfolder import story
from slurmtorch.options import Options
from slurmtorch.submit.launch.spec import build_spec
from helpers import as_run, wait_for


def script_start() -> str:
    """The rendered batch script's `finish`, `die` and `note` (record.sh, in its place), as bash text."""
    spec = build_spec(sites.load_site("testbed"), Options(script="/home/user/train.py", python="/usr/bin/python3",
                                                           job_root="/home/user/.slurmtorch/jobs"))
    lines = as_run(spec).splitlines()
    first = lines.index("note() {")
    note = lines[first:lines.index("}", first) + 1]
    assert lines.index("note started") > first  # the script notes its start once note is defined
    return "\n".join([*(ln for ln in lines if ln.startswith(("finish() {", "die() {"))), *note]) + "\n"


def run(folder, body: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script_start() + body], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "SLURMTORCH_JOB_DIR": str(folder), **env})


def test_the_batch_script_notes_each_start_with_its_nodes_and_its_finish_with_the_exit_code(tmp_path):
    done = run(tmp_path, "note started; finish 3",
               SLURM_RESTART_COUNT="1", SLURM_JOB_NODELIST="node[1-2],gpu-a01", SLURMD_NODENAME="node1")
    assert done.returncode == 3 and done.stderr == "", done.stderr
    started, ended = events.read(tmp_path)
    assert (started.kind, dict(started.fields)) == ("started", {"attempt": 1, "nodes": "node[1-2],gpu-a01",
                                                                "host": "node1"})
    assert (ended.kind, dict(ended.fields)) == ("ended", {"attempt": 1, "code": 3})
    assert (tmp_path / "exit-code").read_text() == "3\n"
    assert story.fold([started, ended]).attempts[0].node_count == 3
    assert os.stat(tmp_path / events.FILE).st_mode & 0o777 == 0o600


def test_a_die_before_the_record_is_sourced_still_ends_in_one_line(tmp_path):
    done = run(tmp_path, "unset -f note; die 'the code is gone'")
    assert (done.returncode, done.stderr) == (1, "slurmtorch: error: the code is gone\n")
    assert not (tmp_path / events.FILE).exists()


def test_a_value_that_is_no_node_list_host_or_number_is_left_out_and_the_line_stays_json(tmp_path):
    done = run(tmp_path, "note started; note ended '1,\"x\":2'",
               SLURM_RESTART_COUNT='0,"evil":1', SLURM_JOB_NODELIST='node1","host":"x\\"}\n{"v":1',
               SLURMD_NODENAME="a b\nc")
    assert done.returncode == 0, done.stderr
    raw = (tmp_path / events.FILE).read_text().splitlines()
    assert len(raw) == 2 and all(isinstance(json.loads(line), dict) for line in raw), raw
    started, ended = events.read(tmp_path)
    assert dict(started.fields) == {"attempt": 0, "nodes": "", "host": ""}
    assert dict(ended.fields) == {"attempt": 0}


def test_a_node_list_too_long_for_one_line_is_left_out_and_the_line_fits(tmp_path):
    nodes = ",".join(f"node{i:05d}" for i in range(1000))
    done = run(tmp_path, "note started", SLURM_JOB_NODELIST=nodes, SLURMD_NODENAME="h" * 300)
    assert done.returncode == 0, done.stderr
    data = (tmp_path / events.FILE).read_bytes()
    assert len(data) <= events.MAX_LINE
    assert dict(events.read(tmp_path)[0].fields) == {"attempt": 0, "nodes": "", "host": ""}


def test_a_batch_script_killed_mid_run_notes_its_end_without_a_code(tmp_path):
    """A requeue, scancel or the time limit TERMs the script: its start's span still ends there."""
    proc = subprocess.Popen(["bash", "-c", script_start() + "note started; sleep 60 & wait"],
                            env={"PATH": "/usr/bin:/bin", "SLURMTORCH_JOB_DIR": str(tmp_path),
                                 "SLURM_JOB_NODELIST": "node1", "SLURMD_NODENAME": "node1"})
    wait_for(lambda: events.read(tmp_path), "the start noted", timeout=30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM  # bash ends by the signal, its EXIT trap run first
    assert [(e.kind, dict(e.fields)) for e in events.read(tmp_path)] == [
        ("started", {"attempt": 0, "nodes": "node1", "host": "node1"}), ("ended", {"attempt": 0})]


def test_the_record_is_never_written_through_a_link_or_into_a_fifo(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / events.FILE).symlink_to(elsewhere)
    done = run(tmp_path / "job", "note started; finish 0", SLURM_JOB_NODELIST="node1")
    assert done.returncode == 0 and elsewhere.read_text() == "", done.stderr
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / events.FILE)
    done = run(tmp_path / "fifo", "note started; finish 0", SLURM_JOB_NODELIST="node1")  # returns, not blocked
    assert done.returncode == 0, done.stderr
