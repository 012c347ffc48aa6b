"""slurmtorch.requeue: the one requeue path, with scontrol replaced by a recording runner."""

from __future__ import annotations

import subprocess

import pytest

from slurmtorch import requeue
from slurmtorch.errors import BootstrapError, SubmitError


class Scontrol:
    """Answers like scontrol: `show job` with the user's -x, `update` refused `refusals` times."""

    def __init__(self, refusals: int = 0, excluded: str = "(null)"):
        self.calls: list[list[str]] = []
        self.refusals, self.excluded = refusals, excluded

    def __call__(self, argv, timeout=60):
        self.calls.append(list(argv))
        if argv[1] == "update" and self.refusals:
            self.refusals -= 1
            raise SubmitError("scontrol update failed (exit 1): Job is still running")
        out = f"JobId=7 ExcNodeList={self.excluded} Nodes=x\n" if argv[1] == "-o" else ""
        return subprocess.CompletedProcess(argv, 0, out, "")


def test_the_target_of_an_array_task_is_its_array_id_and_index():
    assert requeue.target({"SLURM_JOB_ID": "43", "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "3"}) == "40_3"
    assert requeue.target({"SLURM_JOB_ID": "42"}) == "42"
    with pytest.raises(BootstrapError, match="not inside a Slurm job"):
        requeue.target({})


def test_requeue_asks_scontrol_once():
    scontrol = Scontrol()
    requeue.requeue("40_3", scontrol)
    assert scontrol.calls == [["scontrol", "requeue", "40_3"]]


def test_excluding_retries_one_update_until_slurm_takes_it_and_asks_nothing_else():
    # Between the requeue and its KILL (KillWait) only the update itself is asked: the user's
    # own -x were read before the requeue (excluded_now) and come in with `nodes`.
    scontrol = Scontrol(refusals=1, excluded="node[7-8]")
    every = sorted({"node2", *requeue.excluded_now("7", scontrol)})
    scontrol.calls.clear()
    assert requeue.exclude("7", every, scontrol, wait_s=5) == ["node2", "node7", "node8"]
    assert scontrol.calls == [["scontrol", "update", "JobId=7", "ExcNodeList=node[2,7-8]"]] * 2


def test_excluding_gives_up_with_scontrols_words_once_its_time_is_up():
    with pytest.raises(SubmitError, match="Job is still running"):
        requeue.exclude("7", ["node2"], Scontrol(refusals=99), wait_s=0)


def test_a_missing_scontrol_is_one_clear_error():
    with pytest.raises(SubmitError, match="no-such-scontrol.*failed"):
        requeue.run(["no-such-scontrol", "requeue", "7"])
