"""The batch script's own bash (submit/batchnode/batchbash.py), run in a real bash."""

from __future__ import annotations

import subprocess
import time

from slurmtorch.submit.batchnode.batchbash import PICK_PORT, REAP_ROLE_STEPS


def bash(script: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f'SLURMTORCH_JOB_DIR={tmp_path}\n{script}'], capture_output=True,
                          text=True, timeout=60)


def test_the_port_picker_exports_a_port_below_the_ephemeral_range(tmp_path):
    proc = bash(PICK_PORT + '\nprintf "%s %s\\n" "$MASTER_PORT" "$(printenv MASTER_PORT)"', tmp_path)
    assert proc.returncode == 0, proc.stderr
    mine, exported = proc.stdout.split()
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    ephemeral = low if low > 21000 else 32768
    assert mine == exported and 20000 <= int(mine) < ephemeral


def test_the_first_failing_role_stops_the_others_and_its_code_is_the_jobs(tmp_path):
    steps = ("(sleep 0.3; exit 3) & role[$!]=worker training[$!]=1\n"
             "sleep 0.1 & role[$!]=master training[$!]=1\n"
             "sleep 60 & role[$!]=ps\n")
    started = time.monotonic()
    proc = bash(steps + REAP_ROLE_STEPS, tmp_path)
    assert proc.returncode == 3
    assert proc.stderr == "slurmtorch: role worker exited with 3; stopping the other roles\n"
    assert time.monotonic() - started < 30  # the ps was stopped, not waited for


def test_parameter_servers_are_stopped_once_every_training_role_ended_well(tmp_path):
    steps = "sleep 0.2 & role[$!]=master training[$!]=1\nsleep 60 & role[$!]=ps\n"
    started = time.monotonic()
    proc = bash(steps + REAP_ROLE_STEPS, tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    assert time.monotonic() - started < 30
