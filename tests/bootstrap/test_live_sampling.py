"""A rank's live sample (bootstrap.live), from a real training loop under the bootstrap: the
optimizer's steps counted and backward timed with no change to the script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtorch import protocol
from slurmtorch import rankfiles

REPO = Path(__file__).resolve().parents[2]

TRAIN = """
import time, torch
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
time.sleep(0.5)  # the sampler hooks torch at its first sample after torch.optim is imported
for step in range({steps}):
    time.sleep({outside})  # the script's own time (data, logging): outside backward
    loss = model(torch.randn(32, 64)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def run_rank(tmp_path, script: str, live_s: str = "0.1") -> rankfiles.LiveSample | None:
    path = tmp_path / "train.py"
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "OMPI", "PMI", "PMIX"))}
    env.update({protocol.JOB_DIR: str(tmp_path), protocol.LIVE_S: live_s})
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.bootstrap", "--no-init", str(path)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    sample_file = tmp_path / protocol.LIVE / protocol.live_name(0, 0)  # the first start's
    return rankfiles.parse_live(sample_file.read_text()) if sample_file.exists() else None


def test_a_training_loop_is_sampled_its_steps_counted_and_its_time_outside_backward_told(tmp_path, has_torch):
    s = run_rank(tmp_path, TRAIN.format(steps=30, outside=0.02))
    assert s is not None and s.ended and s.rank == 0 and s.host == os.uname().nodename
    assert s.steps == 30
    assert s.step_s is not None and s.own_s is not None and s.own_mean_s is not None
    assert 0.02 <= s.own_s <= s.step_s  # the sleep is outside backward; backward is the rest
    assert s.mean_step_s is not None and s.mean_step_s >= 0.02
    assert s.rss and s.rss > 50 << 20 and s.gpu is None  # no GPU here: no GPU figures, no error
    assert not list((tmp_path / protocol.LIVE).rglob("*.tmp"))


def test_a_script_without_an_optimizer_is_sampled_with_no_steps(tmp_path):
    s = run_rank(tmp_path, "import time; time.sleep(0.3)\n")
    assert s is not None and s.ended and s.steps == 0 and s.step_s is None


@pytest.mark.parametrize("live_s", ["0", "", "soon"])
def test_no_interval_no_sampling(tmp_path, live_s):
    assert run_rank(tmp_path, "print('ran')\n", live_s) is None


def test_throttle_reasons_are_named_from_nvmls_bits():
    from slurmtorch.bootstrap.live import throttle_names

    assert throttle_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal"]
    assert throttle_names(0) == []


def write_samples(folder, own: dict[int, float]) -> None:
    for rank, t in own.items():
        (folder / protocol.live_name(rank)).write_text(rankfiles.live_record(
            written=0.0, since=0.0, rank=rank, host=f"node{rank + 1}", steps=50, step_s=0.5, own_s=t, trend_s=None,
            own_mean_s=t, first_step=None, last_step=None, cpu=None, rss=None, gpu=None, ended=False))


def test_rank_0_names_a_rank_slower_by_the_margin_for_three_samples_running_once(tmp_path):
    from slurmtorch.bootstrap.live import Straggler

    watch = Straggler(str(tmp_path), 0.2)
    write_samples(tmp_path, {0: 0.10, 1: 0.10, 2: 0.13, 3: 0.10})
    assert [watch.look() for _ in range(2)] == [None, None]
    said = watch.look()
    assert said == ("slurmtorch: straggler: rank 2 on node3 spends 1.30x the median time outside backward "
                    "(0.13 s against 0.1 s) for 3 samples running (SLURMTORCH_STRAGGLER=0.2)\n")
    assert watch.look() is None  # once
    write_samples(tmp_path, {2: 0.11})  # within the margin: the streak ends
    assert watch.look() is None and (watch.streak.rank, watch.streak.count) == (-1, 0)
    write_samples(tmp_path, {1: 0.2})
    assert [watch.look() for _ in range(3)][-1].startswith("slurmtorch: straggler: rank 1 on node2")


def test_a_ranks_gpu_is_its_local_ranks_among_the_visible_ones_as_torch_picks_it():
    from slurmtorch.bootstrap.live import rank_device

    assert rank_device(1, "CUDA_VISIBLE_DEVICES", 8, {}) == (1, "1")
    assert rank_device(1, "CUDA_VISIBLE_DEVICES", 8, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}) == (5, "5")
    assert rank_device(0, "CUDA_VISIBLE_DEVICES", 8, {"CUDA_VISIBLE_DEVICES": "3"}) == (3, "3")  # one per rank
    assert rank_device(1, "CUDA_VISIBLE_DEVICES", 8, {"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}) == (None, "GPU-b")
    assert rank_device(9, "ROCR_VISIBLE_DEVICES", 8, {}) == (1, "1")


def test_a_gpus_sample_has_every_figure_it_gives_and_none_for_the_rest():
    from slurmtorch.bootstrap.live import gpu_figures

    def fails():
        raise RuntimeError("not supported on this GPU")

    got = gpu_figures("3", 100.0, 160.5, (("util", lambda: 97), ("power_w", fails)))
    assert got == {"index": "3", "util": 97, "power_w": None, "energy_j": 60.5}
    assert gpu_figures("0", None, 5.0, ())["energy_j"] is None


def sample(rank: int, own: float) -> rankfiles.LiveSample:
    parsed = rankfiles.parse_live(rankfiles.live_record(
        written=0.0, since=0.0, rank=rank, host=f"node{rank + 1}", steps=50, step_s=0.5, own_s=own, trend_s=None,
        own_mean_s=own, first_step=None, last_step=None, cpu=None, rss=None, gpu=None, ended=False))
    assert parsed is not None
    return parsed


def test_a_streak_answers_once_on_the_look_that_makes_it_and_restarts_when_another_rank_is_slowest():
    from slurmtorch.pace import Streak

    streak = Streak(0.2, runs=3)
    slow2 = {r: sample(r, 0.13 if r == 2 else 0.10) for r in range(4)}
    slow1 = {r: sample(r, 0.15 if r == 1 else 0.10) for r in range(4)}
    assert [streak.feed(slow2) for _ in range(2)] == [None, None]
    found = streak.feed(slow2)
    assert found is not None and found[0].rank == 2 and (found[1], found[2]) == (0.13, 0.10)
    assert streak.feed(slow2) is None  # past the run: said once
    assert [streak.feed(slow1) is not None for _ in range(3)] == [False, False, True]  # another rank: counted anew
    assert streak.feed({r: sample(r, 0.10) for r in range(4)}) is None and streak.count == 0
