"""The headline of a failed rank: Python's own last line (`TYPE: first line of the message`) of
the exception that ended it, and the user's frame of that exception; a rank that exited with a
code and no exception, the last line it wrote to stderr.

Real reports: each script below runs under the real bootstrap (`python -m slurmtorch.bootstrap
--from single --no-init`), whose stderr is what a rank's log holds; the reports are read back
as every front end reads them (`parse_failures`, `rank_reports`, `failure_lines`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import rank_failure
from slurmtorch.submit.jobfolder import report
from slurmtorch.submit.jobfolder.failures import parse_failures, rank_reports

HOST = os.uname().nodename

# What DDP raises when a parameter got no gradient: a message of several lines, the last of
# which is advice (torch/csrc/distributed/c10d/reducer.cpp, shortened).
DDP = '''\
def step():
    raise RuntimeError(
        "Expected to have finished reduction in the prior iteration before starting a new one. This error "
        "indicates that your module has parameters that were not used in producing loss.\\n"
        "Parameter indices which did not receive grad for rank 0: 1\\n"
        " In addition, you can set the environment variable TORCH_DISTRIBUTED_DEBUG to either INFO or DETAIL "
        "to print out information about which particular parameters did not receive gradient on this rank")

step()
'''
FROM = '''\
def load(path):
    raise FileNotFoundError(path)

try:
    load("/data/shard-3")
except FileNotFoundError as exc:
    raise RuntimeError("the data loader failed\\nsee the shard list") from exc
'''
DURING = '''\
try:
    {}["lr"]
except KeyError:
    raise ValueError("no learning rate\\nset --lr")
'''
ARGPARSE = '''\
import argparse

parser = argparse.ArgumentParser(prog="sweep.py")
parser.add_argument("--steps", type=int)
parser.parse_args()
'''
EXIT = '''\
import sys

print("starting", flush=True)
print("loss is nan at step 12", file=sys.stderr)
sys.exit(3)
'''


def rank_log(tmp_path: Path, script: str, *args: str, name: str = "train.py", folder: Path | None = None) -> str:
    return rank_failure(folder or tmp_path, script, *args, name=name)


def headline(log: str) -> tuple[str, str, int | None]:
    (failure,) = parse_failures("", {0: log})
    return failure.line(), failure.where, failure.code


def test_a_multi_line_message_is_headed_by_its_type_and_first_line(tmp_path):
    line, where, _ = headline(rank_log(tmp_path, DDP))
    assert line.startswith(f"rank 0 on {HOST}: RuntimeError: Expected to have finished reduction in the prior "
                           "iteration before starting a new one."), line
    assert "TORCH_DISTRIBUTED_DEBUG" not in line
    assert where == f"{tmp_path}/train.py:2"
    assert rank_reports(rank_log(tmp_path, DDP), 0)[0].exc_type == "RuntimeError"


@pytest.mark.parametrize("script, want, frame", [
    (FROM, "RuntimeError: the data loader failed", 7),  # raise X from Y: X ended the program
    (DURING, "ValueError: no learning rate", 4),  # raised while handling another
], ids=["from", "during"])
def test_of_chained_exceptions_the_one_that_ended_the_program_is_the_headline(tmp_path, script, want, frame):
    log = rank_log(tmp_path, script)
    assert headline(log)[:2] == (f"rank 0 on {HOST}: {want}", f"{tmp_path}/train.py:{frame}")
    assert rank_reports(log, 0)[0].exc_type == want.split(":")[0]


GROUP = '''\
def load(shard):
    raise ValueError(f"shard {shard} is empty\\nsee the manifest")

errors = []
for shard in (1, 2):
    try:
        load(shard)
    except ValueError as exc:
        errors.append(exc)
raise ExceptionGroup("the loaders failed", errors)
'''


def test_an_exception_group_is_headed_by_its_own_line_and_frame(tmp_path):
    assert headline(rank_log(tmp_path, GROUP))[:2] == (
        f"rank 0 on {HOST}: ExceptionGroup: the loaders failed (2 sub-exceptions)", f"{tmp_path}/train.py:10")


def test_a_rank_that_exits_with_a_code_is_headed_by_its_last_stderr_line(tmp_path):
    line, _, _ = headline(rank_log(tmp_path, ARGPARSE, "--stesp", "20", name="sweep.py"))
    assert line == f"rank 0 on {HOST}: sweep.py: error: unrecognized arguments: --stesp 20"
    line, _, _ = headline(rank_log(tmp_path, EXIT))
    assert line == f"rank 0 on {HOST}: loss is nan at step 12"


WARNED = '''\
import sys, warnings

warnings.warn("lr_scheduler.step() before optimizer.step()")
sys.stderr.write("[W1207 21:17:25.093 ProcessGroupGloo.cpp:727] Warning: Unable to resolve hostname\\n")
sys.exit(3)
'''


def test_a_library_warning_is_not_what_an_exit_said(tmp_path):
    """Python's warnings (the line and its source line) and torch's C++ ones (`[W...]`) are not
    the script's words: an exit after them alone says its code."""
    assert headline(rank_log(tmp_path, WARNED))[0] == f"rank 0 on {HOST}: exited with code 3"


def test_an_exit_with_nothing_on_stderr_says_its_code():
    log = "rank 3 on node4 failed:\nexited with code 3\n"
    assert headline(log)[0] == "rank 3 on node4: exited with code 3"


def test_a_frame_in_the_jobs_copy_of_the_code_is_named_by_the_users_own_path(tmp_path, monkeypatch):
    """The job ran its snapshot (jobs/42/code/...); the report names the file in the user's tree,
    which snapshot.json says it was copied from: the one their editor opens."""
    monkeypatch.delenv("SLURMTORCH_ON_CLUSTER", raising=False)
    folder = tmp_path / "jobs" / "42"
    log = rank_log(tmp_path, DDP, folder=folder / "code" / "models")
    assert f"{folder}/code/models/train.py" in log  # the traceback as Python printed it: the copy that ran
    (folder / "rank-0.err").write_text(log)
    (folder / "snapshot.json").write_text(json.dumps({"root": "/home/ada/proj", "git": True}))
    assert report.failure_lines(folder)[0].endswith("(at /home/ada/proj/models/train.py:2, exit 1)")
    # A tree sent from a laptop (--cluster) names the laptop's file.
    (folder / "snapshot.json").write_text(json.dumps({"root": "laptop:/Users/ada/proj", "git": True}))
    assert report.failure_lines(folder)[0].endswith("(at /Users/ada/proj/models/train.py:2, exit 1)")
