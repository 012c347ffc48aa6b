"""readback: what a job wrote, read bounded (issue 44), and the values parsed from it checked,
so one bad file or sample is a phrase, never a hang, a traceback or gigabytes of memory.

Real files of every kind a job can leave (a FIFO, a device node, links, a sparse 10 GiB file,
bytes that are not UTF-8); the parsers fed what a careless or hostile job writes."""

from __future__ import annotations

import math
import os
import stat
import threading
from pathlib import Path

import pytest

from slurmtorch import protocol, rankfiles, readback
from slurmtorch.submit.follow import live
from slurmtorch.submit.jobfolder import report


def fifo_opened(path: Path, read) -> bool:
    """Whether `read` opened the FIFO at `path`: a writer waits in open() until a reader does."""
    os.mkfifo(path)
    opened = threading.Event()

    def writer():
        with open(path, "wb"):
            opened.set()

    threading.Thread(target=writer, daemon=True).start()
    read()
    seen = opened.wait(0.2)
    if not seen:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))  # let the writer go
        opened.wait(5)
    return seen


def test_a_fifo_is_refused_without_being_opened(tmp_path):
    def read():
        with pytest.raises(readback.NotRead, match=r"^not a plain file \(a FIFO\)$"):
            readback.read_bytes(tmp_path / "rank-0.out", readback.LOG_TAIL)

    assert not fifo_opened(tmp_path / "rank-0.out", read)


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/hostname", "inside.txt"])
def test_a_link_is_never_followed_out_of_the_folder_or_within_it(tmp_path, target):
    (tmp_path / "inside.txt").write_text("mine\n")
    (tmp_path / "job.json").symlink_to(target)
    with pytest.raises(readback.NotRead, match=r"^not a plain file \(a symbolic link\)$"):
        readback.read_bytes(tmp_path / "job.json", readback.RECORD)
    assert readback.text_or_empty(tmp_path / "job.json", readback.RECORD) == ""


def test_a_device_node_in_the_folder_is_refused(tmp_path):
    os.mknod(tmp_path / "rank-0.err", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    with pytest.raises(readback.NotRead, match=r"^not a plain file \(a device\)$"):
        readback.read_bytes(tmp_path / "rank-0.err", readback.LOG_TAIL, cut="tail")


def test_a_level_below_the_job_folder_that_is_a_link_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / protocol.live_name(0)).write_text("{}")
    job = tmp_path / "job"
    job.mkdir()
    (job / protocol.LIVE).symlink_to(elsewhere)
    path = job / protocol.LIVE / protocol.live_name(0)
    with pytest.raises(readback.NotRead, match=r"^\.live/ is not a folder \(a symbolic link\)$"):
        readback.read_bytes(path, readback.SAMPLE, below=job)
    assert readback.read_bytes(path, readback.SAMPLE) == b"{}"  # without `below`, only the file itself is judged


def test_a_file_over_its_cap_is_refused_or_read_from_its_end(tmp_path):
    path = tmp_path / "rank-0.err"
    with open(path, "wb") as f:  # 10 GiB, sparse: read whole it would not fit
        f.truncate(10 << 30)
        f.seek(10 << 30)
        f.write(b"the end\n")
    with pytest.raises(readback.NotRead, match=r"^over 64 KiB$"):
        readback.read_bytes(path, readback.SAMPLE)
    assert readback.read_bytes(path, 8, cut="tail") == b"the end\n"
    assert readback.read_bytes(path, 4, cut="head") == b"\0\0\0\0"
    assert len(readback.text_or_empty(path, readback.LOG_TAIL)) == readback.LOG_TAIL


def test_bytes_that_are_not_utf8_are_replaced_and_a_missing_file_is_none(tmp_path):
    (tmp_path / "rank-0.out").write_bytes(b"caf\xe9 \xff\n")
    assert readback.read_text(tmp_path / "rank-0.out", readback.LOG_TAIL) == "caf\ufffd \ufffd\n"
    assert readback.read_text(tmp_path / "nothing", readback.LOG_TAIL) is None
    assert readback.text_or_empty(tmp_path / "nothing" / "deeper", readback.LOG_TAIL, below=tmp_path) == ""


@pytest.mark.parametrize("name, number", [("rank-3.err", 3), ("rank-03.err", 3), ("rank-²3.err", None),
                                          ("rank-٣.err", None), ("rank-" + "9" * 5000 + ".err", None),
                                          ("rank-3.out", None), ("rank-.err", None), ("rank--1.err", None)])
def test_a_file_is_a_ranks_only_for_a_few_ascii_digits(name, number):
    assert readback.numbered(name, "rank-", ".err") == number


# --------------------------------------------------------------------------- a rank's live sample

def sample(**changed) -> str:
    fields = dict(written=1000.0, since=900.0, rank=1, host="node2", steps=10, step_s=0.5, own_s=0.1, trend_s=0.5,
                  own_mean_s=0.1, first_step=901.0, last_step=995.5, cpu=99.0, rss=1 << 30,
                  gpu={"index": 0, "util": 97, "mem": 1 << 30, "mem_total": 80 << 30, "power_w": 300.0,
                       "sm_mhz": 1980, "throttle": ["power"], "energy_j": 1000.0}, ended=False)
    fields.update(changed)
    return rankfiles.live_record(**fields)


MALFORMED = [
    (sample(rss=math.inf), "rss is not a number of bytes"),
    (sample(rss=-5), "rss is not a number of bytes"),
    (sample(rss=2.5), "rss is not a number of bytes"),
    (sample(steps=math.inf), "steps is not a count"),
    (sample(rank="1"), "rank is not a count"),
    (sample(written=math.nan), "written is not a time"),
    (sample(since=True), "since is not a time"),
    (sample(step_s="fast"), "step_s is not a number"),
    (sample(cpu=-math.inf), "cpu is not a number"),
    (sample(host=""), "host is not a host name"),
    (sample(host=["node2"]), "host is not a host name"),
    (sample(host="n" * 256), "host is not a host name"),
    (sample(gpu=[1, 2]), "gpu is not a record"),
    (sample(gpu={"index": [0]}), "gpu index is not a number"),
    (sample(gpu={"power_w": "hot"}), "gpu power_w is not a number"),
    (sample(gpu={"mem": "lots"}), "gpu mem is not a number"),
    (sample(gpu={"energy_j": math.inf}), "gpu energy_j is not a number"),
    (sample(gpu={"throttle": 5}), "gpu throttle is not a list of names"),
    (sample(gpu={"throttle": [5]}), "gpu throttle is not a list of names"),
    (sample().replace('"steps":10', '"steps":' + "9" * 5000), "a number too long to read"),
    ("[]", "not a JSON object"),
    ('{"written": 1, "rank"', "not JSON"),
]


@pytest.mark.parametrize("text, why", MALFORMED)
def test_a_malformed_live_sample_is_refused_and_says_why(text, why):
    assert rankfiles.live_or_why(text) == why
    assert rankfiles.parse_live(text) is None


@pytest.mark.parametrize("text, why", MALFORMED)
def test_whatever_a_sample_says_the_table_and_the_end_line_are_drawn(text, why):
    """Was: OverflowError (an rss of 1e999), ValueError (a power of "hot"), TypeError (a throttle
    of 5) from `top`, `status` and the end of `--wait`: exit 70."""
    good = rankfiles.parse_live(sample(rank=0, host="node1"))
    samples = {0: good}
    bad = rankfiles.parse_live(text)  # before the fix some raised here, some gave a sample the table could not draw
    if bad is not None:
        samples[bad.rank] = bad
    assert any(line.startswith(" RANK") for line in live.top_lines(samples, 1000.0))
    assert live.end_line([samples]).startswith("run: ")


def test_a_well_formed_sample_still_reads_back_whole():
    got = rankfiles.parse_live(sample())
    assert got is not None and got.rss == 1 << 30 and got.gpu["throttle"] == ["power"] and got.steps == 10


def test_a_hosts_escape_sequences_are_shown_not_obeyed_in_every_live_line():
    host = "node\x1b]0;pwned\x07\x1b[2J"
    samples = {0: rankfiles.parse_live(sample(rank=0, host="node1")),
               1: rankfiles.parse_live(sample(rank=1, host=host, own_s=0.5, own_mean_s=0.5))}
    lines = [*live.top_lines(samples, 1000.0), live.end_line([samples])]
    assert not any("\x1b" in line or "\x07" in line for line in lines), lines
    assert "slowest: rank 1 on node\\x1b]0;pwned\\x07\\x1b[2J" in lines[0]


def test_read_samples_notes_each_file_it_skips(tmp_path):
    (tmp_path / protocol.LIVE).mkdir()
    (tmp_path / protocol.LIVE / protocol.live_name(0)).write_text(sample(rank=0))
    (tmp_path / protocol.LIVE / protocol.live_name(1)).write_text(sample(rank=1, rss=-1))
    (tmp_path / protocol.LIVE / protocol.live_name(2)).symlink_to("/dev/zero")
    notes: list[str] = []
    assert sorted(live.read_samples(tmp_path, notes.append)) == [0]
    assert notes == [f"note: skipped {protocol.LIVE}/rank-1.json: rss is not a number of bytes",
                     f"note: skipped {protocol.LIVE}/rank-2.json: not a plain file (a symbolic link)"]


# --------------------------------------------------------------------------- numbers in a job's logs

@pytest.mark.parametrize("name, text", [
    (protocol.BATCH_OUT, "srun: error: node1: task 0: Exited with exit code " + "9" * 5000 + "\n"),
    (protocol.BATCH_OUT, "srun: error: node1: tasks 0-99999999999: Exited with exit code 1\n"),
    (protocol.BATCH_OUT, "prterun noticed that process rank 1 with PID 11 on node vm exited on signal 999.\n"),
    (protocol.BATCH_OUT, "prterun noticed that process rank " + "1" * 5000 + " with PID 11 on node vm exited on signal 9.\n"),
    (protocol.exit_note_name(0), f"rank 0 on node1 exited {'9' * 5000} restart 0\n"),
    ("rank-0.err", f"rank {'7' * 5000} on node1 failed:\nValueError: x\n"),
])
def test_numbers_a_job_wrote_in_its_logs_never_end_the_report_in_an_error(tmp_path, name, text):
    """Was: ValueError (int() of 5000 digits; strsignal(999)) or MemoryError (a range of 10^11
    tasks) from `status` and `logs`: exit 70."""
    (tmp_path / name).write_text(text)
    assert all(isinstance(line, str) for line in report.failure_lines(tmp_path))


@pytest.mark.parametrize("frames", ['[[1]]', '[{"filename": "a.py", "line": 1e999, "name": "f"}]', '"x"'])
def test_native_frames_of_another_shape_are_a_reason_not_an_error(frames):
    """Was: AttributeError (a frame that is a list), OverflowError (a line of 1e999) from `stacks`."""
    text = rankfiles.native_header(3, 99) + f'[{{"thread_id": 1, "frames": {frames}}}]'
    assert rankfiles.parse_native(text).why == "py-spy said something unreadable"
