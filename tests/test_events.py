"""slurmtorch.events: a job's record, written a line an event, read back whatever else is in it."""

from __future__ import annotations

import json
import os
import threading

from slurmtorch import events
from slurmtorch.submit.jobfolder import story


def test_an_event_reads_back_as_written(tmp_path):
    assert events.append(tmp_path, "started", attempt=1, nodes="node[1-2]", host="node1")
    (e,) = events.read(tmp_path)
    assert (e.kind, e.get("attempt"), e.get("nodes"), e.get("host")) == ("started", 1, "node[1-2]", "node1")


def test_a_torn_line_a_foreign_line_and_a_wrong_value_are_skipped_not_fatal(tmp_path):
    good = events.line("ended", {"attempt": 0, "code": 3})
    record = (b'{"v":1,"t":1.0,"ev":"started","attempt":0,"nod'  # torn: no newline, cut short
              + b"\n" + b"not json at all\n" + b'{"v":99,"t":1,"ev":"started"}\n'  # another version
              + b'{"v":1,"t":1,"ev":"nonsense"}\n' + b'{"v":1,"t":"x","ev":"ended"}\n'
              + b'{"v":1,"t":2,"ev":"ended","code":"three","attempt":true}\n' + good)
    (tmp_path / events.FILE).write_bytes(record)
    read = events.read(tmp_path)
    assert [(e.kind, dict(e.fields)) for e in read] == [("ended", {}), ("ended", {"attempt": 0, "code": 3})]


def test_a_line_never_exceeds_one_write_however_long_its_values(tmp_path):
    data = events.line("restarting", {"start": 1, "cause": "x" * 50_000, "nodes": [f"node{i}" for i in range(5000)],
                                      "action": "restart", "excluded": []})
    assert len(data) <= events.MAX_LINE and data.endswith(b"\n")
    record = json.loads(data)
    assert record["cause"].endswith("...") and record["nodes"][-1].endswith("more")


def test_appends_from_many_writers_at_once_each_land_whole(tmp_path):
    def write(k):
        for i in range(200):
            events.append(tmp_path, "launched", start=k * 1000 + i, nodes=[f"node{j}" for j in range(100)])

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(events.read(tmp_path)) == 800


def test_a_record_that_is_a_link_or_a_fifo_is_not_read_nor_written_through(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(events.line("cleaned", {"freed": 1}))
    (tmp_path / "job").mkdir()
    os.symlink(target, tmp_path / "job" / events.FILE)
    assert events.read(tmp_path / "job") == []
    assert not events.append(tmp_path / "job", "cleaned", freed=2)
    assert target.read_bytes().count(b"\n") == 1
    (tmp_path / "f").mkdir()
    os.mkfifo(tmp_path / "f" / events.FILE)
    assert events.read(tmp_path / "f") == []


def test_a_huge_record_reads_its_newest_events(tmp_path):
    one = events.line("launched", {"start": 0, "nodes": ["n" * 3000]})
    with open(tmp_path / events.FILE, "wb") as f:
        for _ in range(events.MAX_BYTES // len(one) + 10):
            f.write(one)
        f.write(events.line("ended", {"attempt": 0, "code": 0}))
    read = events.read(tmp_path)
    assert read[-1].kind == "ended" and all(e.kind in ("launched", "ended") for e in read)


def E(kind, at, **fields):
    return events.Event(kind, at, fields)


def test_the_story_of_a_requeued_job_spans_both_starts():
    s = story.fold([E("submitted", 0.0, job="7"), E("started", 10.0, attempt=0, nodes="node[1-2]", host="node1"),
                    E("requeued", 70.0, by="rank 0 on node1", why="USR1 received", attempt=0),
                    E("started", 100.0, attempt=1, nodes="node[3-4]", host="node3"),
                    E("ended", 160.0, attempt=1, code=0)])
    assert s.restart_count == 1 and s.requeue_count == 1
    # the first start ends where its requeue was asked (the batch script was killed: no `ended`)
    assert s.spans(now=999) == [(10.0, 70.0, 2), (100.0, 160.0, 2)]
    assert s.elapsed(now=999) == 120.0 and round(s.node_hours(now=999) * 3600) == 240
    assert s.nodes == "node[3-4]"
    assert s.lines() == ["requeued by rank 0 on node1: USR1 received", "started again on node[3-4] (Slurm's restart 1)"]
    assert s.as_dict(now=999)["restarts"] == 1 and s.as_dict(now=999)["version"] == story.VERSION


def test_the_story_of_a_restarted_job_names_each_failed_start():
    s = story.fold([E("started", 0.0, attempt=0, nodes="node[1-3]", host="node1"),
                    E("launched", 1.0, start=0, nodes=["node1", "node2"]),
                    E("restarting", 5.0, start=0, cause="rank 1 on node2: killed by a signal", action="restart",
                      nodes=["node1", "node3"], excluded=["node2"]),
                    E("launched", 6.0, start=1, nodes=["node1", "node3"])])
    assert s.restart_count == 1 and s.requeue_count == 0
    assert s.lines() == ["start 0 failed: rank 1 on node2: killed by a signal; node2 excluded; restarted on node1,node3"]
    assert s.elapsed(now=20.0) == 20.0  # still running


def test_a_cleaned_job_says_so_and_keeps_what_slurm_last_said():
    s = story.fold([E("settled", 50.0, state="COMPLETED", code=0, elapsed=40, nodes="node[1-4]"), E("cleaned", 90.0)])
    assert s.cleaned == 90.0 and s.nodes == "node[1-4]"
    assert "its folder was cleaned" in s.lines()[-1]


def test_a_requeue_no_slurmtorch_side_asked_for_says_so_at_the_next_start_and_the_killed_start_ends_there():
    s = story.fold([E("started", 10.0, attempt=0, nodes="node[1-2]", host="node1"), E("ended", 40.0, attempt=0),
                    E("started", 60.0, attempt=1, nodes="node[1-2]", host="node1"),
                    E("ended", 90.0, attempt=1, code=0)])
    assert s.lines() == ["requeued (by Slurm or an operator: scontrol requeue, preemption); started again on "
                         "node[1-2] (Slurm's restart 1)"]
    assert s.spans(now=999) == [(10.0, 40.0, 2), (60.0, 90.0, 2)] and s.attempts[0].code is None


def test_slurms_word_before_a_later_start_is_history_not_the_end():
    s = story.fold([E("started", 0.0, attempt=0, nodes="node1"), E("settled", 5.0, state="PREEMPTED", nodes="node1"),
                    E("started", 20.0, attempt=1, nodes="node2")])
    assert s.settled is None and s.nodes == "node2"


def test_a_followed_story_says_each_new_line_once_as_its_event_is_appended(tmp_path):
    from slurmtorch.submit.follow.storytail import StoryTail

    said: list[str] = []
    tail = StoryTail(tmp_path, said.append)
    tail.pump()  # no record yet
    events.append(tmp_path, "started", attempt=0, nodes="node[1-2]", host="node1")
    tail.pump()
    assert said == []
    events.append(tmp_path, "requeued", by="rank 0 on node1", why="SIGUSR1 received", attempt=0)
    tail.pump()
    tail.pump()
    events.append(tmp_path, "started", attempt=1, nodes="node[3-4]", host="node3")
    tail.pump()
    assert said == ["requeued by rank 0 on node1: SIGUSR1 received", "started again on node[3-4] (Slurm's restart 1)"]
