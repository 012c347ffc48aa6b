"""The live view's pure side: the ranks' samples (rankfiles.live_record) read back, the slowest
rank named by its time outside backward, the table and the end-of-job line."""

from __future__ import annotations

from slurmtorch import protocol
from slurmtorch import rankfiles
from slurmtorch.submit.follow import live


def sample(rank, host, step_s=0.5, own_s=None, steps=100, since=1000.0, written=1600.0, gpu=None, ended=False,
           own_mean_s=None, first_step=1010.0, last_step=None):
    if step_s is None:
        first_step = last_step = None
    elif last_step is None:
        last_step = first_step + (steps - 1) * step_s
    text = rankfiles.live_record(written=written, since=since, rank=rank, host=host, steps=steps, step_s=step_s,
                                own_s=own_s, trend_s=step_s, own_mean_s=own_mean_s, first_step=first_step,
                                last_step=last_step, cpu=97.5, rss=3 << 30, gpu=gpu, ended=ended)
    parsed = rankfiles.parse_live(text)
    assert parsed is not None
    return parsed


def world(slow_rank=2, extra=0.2):
    """Four ranks that step together (0.6 s); the slow one spends 20% more outside backward."""
    return {r: sample(r, f"node{r + 1}", step_s=0.6, own_s=0.3 * (1 + extra if r == slow_rank else 1),
                      own_mean_s=0.3 * (1 + extra if r == slow_rank else 1)) for r in range(4)}


def test_a_sample_reads_back_as_written_and_a_torn_one_is_none():
    s = sample(3, "node4", step_s=0.25, own_s=0.1)
    assert (s.rank, s.host, s.steps, s.step_s, s.own_s, s.rss) == (3, "node4", 100, 0.25, 0.1, 3 << 30)
    assert s.mean_step_s == 0.25
    assert rankfiles.parse_live('{"written": 1, "rank"') is None
    assert rankfiles.parse_live("[]") is None


def test_the_slowest_rank_is_named_by_its_time_outside_backward_not_the_shared_step_time():
    line = live.slowest_line(world(slow_rank=2))
    assert line == "slowest: rank 2 on node3, 360 ms outside backward = 1.20x the median (300 ms)"


def test_without_backward_timed_the_step_time_names_the_slowest():
    samples = {r: sample(r, "n", step_s=1.0 + r) for r in range(3)}
    assert live.slowest_line(samples) == "slowest: rank 2 on n, 3.00 s a step = 1.50x the median (2.00 s)"


def test_one_timed_rank_names_no_one():
    assert live.slowest_line({0: sample(0, "a"), 1: sample(1, "b", step_s=None, steps=0)}) is None


def test_the_table_puts_the_slowest_first_and_ranks_without_steps_last():
    samples = world(slow_rank=1)
    samples[4] = sample(4, "node5", step_s=None, steps=0)
    lines = live.top_lines(samples, now=1605.0)
    assert lines[0].startswith("slowest: rank 1 on node2")
    assert lines[1].split() == ["RANK", "HOST", "STEPS", "STEP", "OWN", "TREND", "CPU%", "RSS", "AGE"]
    assert [int(line.split()[0]) for line in lines[2:]] == [1, 0, 2, 3, 4]
    assert lines[2].split()[-1] == "5s" and "3.0G" in lines[2]


def test_gpu_columns_appear_only_where_a_rank_reported_its_gpu():
    gpu = {"index": 0, "util": 97, "mem": 40 << 30, "mem_total": 80 << 30, "power_w": 612.4, "sm_mhz": 1755,
           "throttle": ["sw_power_cap"], "energy_j": 36000.0}
    lines = live.top_lines({0: sample(0, "g1", gpu=gpu), 1: sample(1, "g2", gpu=dict(gpu, index=1))}, now=1600.0)
    assert "UTIL%" in lines[-3] and "THROTTLE" in lines[-3]
    assert "612W" in lines[-1] and "sw_power_cap" in lines[-1] and "40.0G" in lines[-1]
    assert "UTIL%" not in "\n".join(live.top_lines(world(), now=1600.0))


def test_the_end_line_gives_the_mean_step_the_slowest_rank_and_node_hours():
    line = live.end_line([world(slow_rank=3)])
    assert line == ("run: mean step 600 ms over 100 steps; slowest rank 3 on node4 (1.20x the median outside "
                    "backward); 4 nodes x 10:00 = 0.667 node-hours")


def test_the_end_line_adds_gpu_hours_and_energy_when_every_gpu_reported_it():
    gpus = {r: sample(r, "g1", gpu={"index": r, "energy_j": 1.8e6}) for r in range(2)}
    line = live.end_line([gpus])
    assert line is not None and line.endswith("1 node x 10:00 = 0.167 node-hours; 0.333 GPU-hours; 1 kWh (3600000 J)")


def test_no_samples_no_lines():
    assert live.top_lines({}, 0.0) == [] and live.end_line([]) is None and live.end_line([{}]) is None


def test_samples_are_read_from_the_folder_and_foreign_files_skipped(tmp_path):
    folder = tmp_path / protocol.LIVE
    folder.mkdir()
    for r, s in world().items():
        (folder / protocol.live_name(r)).write_text(rankfiles.live_record(**{
            "written": s.written, "since": s.since, "rank": s.rank, "host": s.host, "steps": s.steps,
            "step_s": s.step_s, "own_s": s.own_s, "trend_s": s.trend_s, "own_mean_s": s.own_mean_s,
            "first_step": s.first_step, "last_step": s.last_step, "cpu": s.cpu, "rss": s.rss, "gpu": None,
            "ended": False}))
    (folder / "rank-9.json").write_text("half a rec")
    (folder / "rank-8.json.tmp").write_text("{}")
    assert sorted(live.read_samples(tmp_path)) == [0, 1, 2, 3]
    assert live.read_samples(tmp_path / "nothing") == {}




def test_a_short_run_without_steps_gets_no_end_line():
    probe = {0: sample(0, "node1", step_s=None, steps=0, since=1000.0, written=1030.0)}
    assert live.end_line([probe]) is None
    assert live.end_line([{0: sample(0, "node1", step_s=None, steps=0, since=1000.0, written=1090.0)}]) is not None


def write_sample(folder, s, start=None):
    path = folder / protocol.LIVE / protocol.live_name(s.rank, start)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rankfiles.live_record(**{k: getattr(s, k) for k in (
        "written", "since", "rank", "host", "steps", "step_s", "own_s", "trend_s", "own_mean_s", "first_step",
        "last_step", "cpu", "rss", "gpu", "ended")}))


def test_a_requeued_jobs_end_line_counts_the_steps_and_node_hours_of_every_start(tmp_path):
    """Issue 45: each start replaced the ranks' samples, so a preempted job that trained 480
    steps said 343, and node-hours of its last start only. Each start keeps its own now; the
    node-hours are the record's spans of the batch script's starts (two of 2 nodes: 600 s, 300 s)."""
    for r in range(2):
        write_sample(tmp_path, sample(r, f"node{r + 1}", steps=137, since=1000.0, written=1600.0), start=0)
        write_sample(tmp_path, sample(r, f"node{r + 3}", steps=343, since=2000.0, written=2300.0), start=1)
    starts = live.read_starts(tmp_path)
    assert [sorted(s) for s in starts] == [[0, 1], [0, 1]] and live.read_samples(tmp_path)[0].host == "node3"
    line = live.end_line(starts, spans=[(990.0, 1590.0, 2), (1990.0, 2290.0, 2)])
    assert line == ("run: mean step 500 ms over 480 steps; slowest rank 0 on node3 (1.00x the median step); "
                    "2 nodes x 15:00 over 2 starts = 0.5 node-hours"), line
    assert live.end_line(starts).endswith("2 nodes x 15:00 over 2 starts = 0.5 node-hours")  # from the samples


def test_ranks_that_sampled_but_never_stepped_are_shown_not_said_to_be_silent(tmp_path):
    """Issue 45: `top` on an ended job whose ranks sampled but took no optimizer step said no
    rank sampled itself."""
    from slurmtorch.usecases import story

    samples = {0: sample(0, "node1", step_s=None, steps=0, since=1000.0, written=1030.0)}
    lines = story.ended_live_lines([samples], (), now=2000.0)
    assert lines[0] == "no optimizer step seen: 1 rank sampled itself (its last sample below)", lines
    assert lines[1].split()[:3] == ["RANK", "HOST", "STEPS"] and lines[2].split()[:3] == ["0", "node1", "0"], lines
    assert story.ended_live_lines([], (), now=2000.0) == [
        "no rank sampled itself (SLURMTORCH_LIVE_S=0, or no rank started)"]
