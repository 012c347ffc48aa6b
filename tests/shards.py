"""Split the suite into shards of about equal time, whole files each, so that CI runs them at
once, each on a testbed of its own (`--shard K/N`, .ci/run): the suite waits on Slurm far more
than it computes (tests/submit/test_recovery.py kept 2 cores 23% busy), so two testbeds side by
side take about half the time of one.

Seconds per file are from a clean-clone CI run's `--durations` on Slurm 22.05, its two shards
running beside the 24.11 run as CI runs them (2026-11-29, commit 7c9c44c).
A file not listed counts its tests; a stale number only unbalances the shards, never drops a
test: every file lands in exactly one shard.
"""

from __future__ import annotations

MEASURED_S = {
    "tests/submit/test_recovery.py": 360,
    "tests/bootstrap/test_launchers.py": 350,
    "tests/bootstrap/test_cpu_binding.py": 267,
    "tests/api/test_distributor.py": 225,
    "tests/submit/test_stacks_testbed.py": 134,
    "tests/bootstrap/test_interop.py": 134,
    "tests/bootstrap/test_preempt.py": 131,
    "tests/submit/test_failures.py": 126,
    "tests/submit/test_ray_testbed.py": 124,
    "tests/remote/test_remote_testbed.py": 113,
    "tests/cli/test_story_testbed.py": 110,  # four jobs, one requeued (measured alone: 75 s, not in a CI run)
    "tests/bootstrap/test_scripts_unchanged.py": 87,
    "tests/cli/test_top.py": 82,
    "tests/cli/test_cli.py": 72,
    "tests/cli/test_waiting.py": 56,
    "tests/bootstrap/test_other_scripts.py": 50,
    "tests/submit/test_site_keys_testbed.py": 50,
    "tests/remote/test_pull_testbed.py": 50,  # one job, six pulls (measured alone, not in a CI run)
    "tests/cli/test_chain_testbed.py": 36,
    "tests/submit/test_roles_sweeps.py": 33,
    "tests/test_fabric_network.py": 33,
    "tests/bootstrap/test_runid.py": 31,
    "tests/api/test_runfolder.py": 31,
    "tests/submit/test_signals.py": 29,
    "tests/cli/test_main_job.py": 29,
    "tests/doctor/test_doctor.py": 28,
    "tests/submit/test_workdir_testbed.py": 27,
    "tests/submit/test_hetjob.py": 23,
    "tests/submit/test_snapshot_testbed.py": 21,
    "tests/bootstrap/test_placement_launchers.py": 21,
    "tests/cli/test_sbatch_options_testbed.py": 20,
    "tests/bootstrap/test_raynode_ports.py": 20,
    "tests/api/test_attach.py": 19,
    "tests/test_containers.py": 16,
    "tests/submit/test_centre_documents_testbed.py": 16,
    "tests/bootstrap/test_live_sampling.py": 16,
}
# A file not measured: a testbed test is a job or two (seconds), any other a pure function.
TESTBED_TEST_S = 5.0
OTHER_TEST_S = 0.02


def parse(text: str) -> tuple[int, int]:
    """`K/N` -> (K, N), 1 <= K <= N; a ValueError names what is wrong."""
    k, sep, n = text.partition("/")
    if not sep or not k.isdigit() or not n.isdigit() or not 1 <= int(k) <= int(n):
        raise ValueError(f"--shard {text!r}: expected K/N with 1 <= K <= N, e.g. 1/2")
    return int(k), int(n)


def estimate(path: str, testbed_tests: int, other_tests: int) -> float:
    """Seconds a file's tests take: measured, or counted."""
    if path in MEASURED_S:
        return float(MEASURED_S[path])
    return testbed_tests * TESTBED_TEST_S + other_tests * OTHER_TEST_S


def assign(seconds: dict[str, float], n: int) -> dict[str, int]:
    """Each file's shard (1..n): longest first into the least loaded shard, ties by name, so
    every run of the same files splits them the same way."""
    load = [0.0] * n
    shard: dict[str, int] = {}
    for path in sorted(seconds, key=lambda p: (-seconds[p], p)):
        k = min(range(n), key=lambda i: (load[i], i))
        load[k] += seconds[path]
        shard[path] = k + 1
    return shard
