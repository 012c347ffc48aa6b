"""What a job leaves in its folder is data, read bounded (issue 44): `logs`, `status`, `top` and a
chain's record read only plain files reached without a link, up to a cap (a log: its end), and
what they cannot read is one line, never a hang, a traceback or gigabytes of memory.

Real folders and files made here (a FIFO, a link to /dev/zero, a 10 GiB sparse log), the real
CLI in a process of its own under a 2 GiB address-space limit and a timeout: before the fix a
FIFO hung it and /dev/zero grew until the limit. squeue is a stand-in that prints a recorded
line (what is tested is the reading; tests/cli/test_top.py runs `top` on the testbed).
"""

from __future__ import annotations

import json
import os
import pwd
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from slurmtorch import protocol, rankfiles

REPO = Path(__file__).resolve().parents[2]
USER = pwd.getpwuid(os.getuid()).pw_name
RUNNING = f"8|RUNNING|None|node1|2026-11-24T20:00:00|2026-11-24T20:00:05|{USER}|2026-11-24T21:00:00|train"
SQUEUE = f"""#!/bin/sh
# A stand-in for squeue: job 8 runs (the line recorded from the testbed's squeue -o FORMAT); any other is unknown.
case "$*" in
  *" -j 8") echo '{RUNNING}' ;;
  *) echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1 ;;
esac
"""
HOSTILE_HOST = "node\x1b]0;pwned\x07\x1b[2J"


def cli(tmp_path: Path, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """The real CLI on tmp_path's home, with the stand-in squeue, under 2 GiB of address space."""
    bin_dir = tmp_path / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "squeue").write_text(SQUEUE)
        (bin_dir / "squeue").chmod(0o755)
    env = {**os.environ, "SLURMTORCH_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO), "PATH": str(bin_dir)}

    def bounded():  # before the fix, a read of /dev/zero grew until this limit stopped it
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run([sys.executable, "-m", "slurmtorch", *argv], env=env, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=bounded)


def job(tmp_path: Path, job_id: str = "7", ntasks: int = 2) -> Path:
    """A job folder as a job leaves it: rank logs, an exit code, live samples."""
    folder = tmp_path / "home" / "jobs" / job_id
    folder.mkdir(parents=True)
    for level in (folder, folder.parent, folder.parent.parent):
        level.chmod(0o700)
    (folder / protocol.JOB).write_text(json.dumps({"launcher": "srun", "ntasks": ntasks, "nodes": 1}))
    (folder / protocol.SCRIPT).write_text("#!/bin/bash\n#SBATCH --job-name=train\n")
    for rank in range(ntasks):
        out, err = protocol.rank_logs(rank)
        (folder / out).write_text(f"rank {rank} says hello\n")
        (folder / err).write_text("")
    (folder / protocol.BATCH_OUT).write_text("")
    (folder / protocol.EXIT_CODE).write_text("1\n")
    (folder / protocol.LIVE).mkdir()
    (folder / protocol.LIVE / protocol.live_name(0)).write_text(sample(0))
    return folder


def sample(rank: int, **changed) -> str:
    fields = dict(written=1000.0, since=900.0, rank=rank, host=f"node{rank + 1}", steps=10, step_s=0.5, own_s=0.1,
                  trend_s=0.5, own_mean_s=0.1, first_step=901.0, last_step=995.5, cpu=99.0, rss=1 << 30,
                  gpu={"index": 0, "util": 97, "mem": 1 << 30, "mem_total": 80 << 30, "power_w": 300.0,
                       "sm_mhz": 1980, "throttle": [], "energy_j": 1000.0}, ended=False)
    fields.update(changed)
    return rankfiles.live_record(**fields)


def one_line_each(done: subprocess.CompletedProcess) -> None:
    """No traceback, no internal error: every line slurmtorch said is a line of its own kind."""
    assert done.returncode in (0, 1), (done.returncode, done.stderr)
    assert 'File "' not in done.stderr and "unexpected" not in done.stderr, done.stderr  # no traceback of ours


def fifo(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def dev_zero(path: Path) -> Path:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")
    return path


# Every file of the folder that `logs` and `status` read, each made a FIFO or a link to /dev/zero.
READ = ["rank-0.out", "rank-0.err", "rank-1.err", "batch.out", "job.json", "exit-code", "script.sh",
        f"{protocol.LIVE}/{protocol.live_name(0)}", protocol.RESTARTS, protocol.SNAPSHOT, "node-prologue.err",
        f"{protocol.STACKS}/{protocol.SUMMARY}", "chain.json", protocol.exit_note_name(1)]


class Opened:
    """Whether anything opened a FIFO: a writer waits in open() until a reader opens it."""

    def __init__(self, path: Path):
        self.path, self.done = path, threading.Event()
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self):
        with open(self.path, "wb"):
            self.done.set()

    def release(self) -> bool:
        """Whether it was opened; the writer let go either way."""
        opened = self.done.wait(0.2)
        if not opened:
            os.close(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK))  # lets the writer's open return
            self.done.wait(5)
        return opened


@pytest.mark.parametrize("argv", [["logs", "7"], ["logs", "7", "--tail", "2"], ["logs", "7", "--all-ranks"],
                                  ["status", "7"], ["status", "--json", "7"]])
def test_logs_and_status_never_open_a_fifo_a_job_left_in_its_folder(tmp_path, argv):
    folder = job(tmp_path)
    (folder / protocol.STACKS).mkdir()
    fifos = [Opened(fifo(folder / name)) for name in READ]
    done = cli(tmp_path, *argv)
    one_line_each(done)
    assert [f.path.name for f in fifos if f.release()] == []


@pytest.mark.parametrize("argv", [["logs", "7"], ["logs", "7", "--tail", "2"], ["logs", "7", "--all-ranks"],
                                  ["status", "7"], ["status", "--json", "7"]])
def test_logs_and_status_read_nothing_through_a_link_to_dev_zero(tmp_path, argv):
    folder = job(tmp_path)
    (folder / protocol.STACKS).mkdir()
    for name in READ:
        dev_zero(folder / name)
    one_line_each(cli(tmp_path, *argv))


def test_logs_says_in_one_line_that_a_log_is_not_a_plain_file_and_shows_the_others(tmp_path):
    folder = job(tmp_path)
    fifo(folder / "rank-0.out")
    dev_zero(folder / "rank-0.err")
    done = cli(tmp_path, "logs", "7")
    one_line_each(done)
    assert done.stdout == ""
    assert f"slurmtorch: {folder / 'rank-0.out'}: not a plain file (a FIFO), not read\n" in done.stderr, done.stderr
    assert f"slurmtorch: {folder / 'rank-0.err'}: not a plain file (a symbolic link), not read\n" in done.stderr
    done = cli(tmp_path, "logs", "7", "--rank", "1")
    assert done.stdout == "rank 1 says hello\n", done.stderr


def test_a_huge_log_is_read_from_its_end_only(tmp_path):
    """A 10 GiB log (sparse: a hole, then its last lines): its failure and its last lines are
    found in its end; read whole it would not fit in the 2 GiB the CLI runs in."""
    folder = job(tmp_path)
    for name in ("rank-1.err", "rank-1.out", "batch.out"):
        with open(folder / name, "wb") as f:
            f.truncate(10 << 30)
            f.seek(10 << 30)
            f.write(b"\nrank 1 on node2 failed:\nTraceback (most recent call last):\nValueError: late\n")
    done = cli(tmp_path, "logs", "7", "--rank", "1", "--tail", "2")
    one_line_each(done)
    assert done.stdout == "Traceback (most recent call last):\nValueError: late\n", done.stdout
    assert "slurmtorch: failed: rank 1 on node2: ValueError: late" in done.stderr, done.stderr


def test_a_chain_record_that_is_a_fifo_is_one_line_not_a_hang(tmp_path):
    folder = job(tmp_path)
    opened = Opened(fifo(folder / "chain.json"))
    done = cli(tmp_path, "status", "7")
    assert not opened.release()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"error: cannot read the chain record {folder / 'chain.json'}: not a plain file (a FIFO)" in done.stderr


def test_a_file_named_with_other_digits_is_not_a_rank(tmp_path):
    """`rank-²3.err`: str.isdigit() says digits, int() refuses them."""
    folder = job(tmp_path)
    for name in ("rank-²3.err", "rank-²3.out", "rank-²3.exit"):
        (folder / name).write_text("x\n")
    (folder / protocol.LIVE / "rank-²3.json").write_text(sample(3))
    for argv in (["logs", "7"], ["logs", "7", "--all-ranks"], ["status", "7"]):
        one_line_each(cli(tmp_path, *argv))


# --------------------------------------------------------------------------- top and the live samples

BAD_SAMPLES = {
    2: sample(2, rss=float("inf")),  # JSON's 1e999
    3: sample(3, rss=-5),
    4: sample(4, gpu={"index": 0, "power_w": "hot"}),
    5: sample(5, gpu={"index": 0, "throttle": 5}),
    6: sample(6, gpu={"index": 0, "mem": "lots"}),
    7: sample(7, gpu={"index": [0]}),
    8: sample(8, steps=float("inf")),
    9: sample(9, written=float("nan")),
    10: sample(10).replace('"steps":10', '"steps":' + "9" * 5000),
    11: sample(11, gpu=[1, 2]),
    12: "not json\n",
}


def test_top_skips_each_malformed_sample_with_a_note_and_shows_a_hosts_escapes(tmp_path):
    folder = job(tmp_path, "8", ntasks=1)
    (folder / protocol.EXIT_CODE).unlink()
    (folder / protocol.LIVE / protocol.live_name(1)).write_text(sample(1, host=HOSTILE_HOST))
    for rank, text in BAD_SAMPLES.items():
        (folder / protocol.LIVE / protocol.live_name(rank)).write_text(text)
    fifo(folder / protocol.LIVE / protocol.live_name(13))
    dev_zero(folder / protocol.LIVE / protocol.live_name(14))
    with open(folder / protocol.LIVE / protocol.live_name(15), "wb") as f:
        f.truncate(1 << 30)
    done = cli(tmp_path, "top", "8", "--once")
    assert done.returncode == 0, done.stderr
    rows = [line.split()[0] for line in done.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert sorted(rows) == ["0", "1"], done.stdout
    assert "node\\x1b]0;pwn" in done.stdout and "\x1b" not in done.stdout, done.stdout  # HOST: 14 wide
    notes = done.stderr.splitlines()
    assert len(notes) == len(BAD_SAMPLES) + 3, done.stderr
    assert all(line.startswith(f"note: skipped {protocol.LIVE}/rank-") for line in notes), done.stderr
    assert f"note: skipped {protocol.LIVE}/rank-13.json: not a plain file (a FIFO)" in notes
    assert f"note: skipped {protocol.LIVE}/rank-15.json: over 64 KiB" in notes


# --------------------------------------------------------------------------- a progress bar in a log

TQDM = """
import sys
from tqdm import tqdm
for epoch in tqdm(range(2), desc="epoch", file=sys.stderr, mininterval=0, ascii=True):
    for batch in tqdm(range(3), desc="batch", leave=False, file=sys.stderr, mininterval=0, ascii=True):
        pass
print("trained", file=sys.stderr)
"""


def test_logs_show_a_progress_bar_as_its_final_line_not_as_redraws_and_escape_codes(tmp_path):
    """Was: every redraw after a `\\r`, and tqdm's cursor-up shown as `\\x1b[A`."""
    pytest.importorskip("tqdm")
    folder = job(tmp_path)
    with open(folder / "rank-0.err", "wb") as err:  # a rank running tqdm's nested bars
        subprocess.run([sys.executable, "-c", TQDM], stderr=err, check=True, timeout=60)
    done = cli(tmp_path, "logs", "7")
    lines = [line.split(" [")[0] for line in done.stderr.splitlines()]
    assert lines == ["epoch: 100%|##########| 2/2", "trained"], done.stderr
    assert "\\x1b" not in done.stderr and "\r" not in done.stderr, done.stderr
