"""A `--ray` job's driver step (`python -m slurmtorch.bootstrap.raynode driver ...`): it waits
for the head to answer and for every node to join within --hang-timeout (a loaded node may
register after its `ray start` gave up), then runs the script in this process with
RAY_ADDRESS set, as `python SCRIPT` would. Only this imports ray, lazily."""

from __future__ import annotations

import os
import sys
import time

from slurmtorch import protocol
from slurmtorch.bootstrap.rendezvous import split_address, wait_listening


def say(line: str) -> None:
    """A line of the driver's own in batch.out, as raynode's (raynode imports this module, not back)."""
    sys.stderr.write(f"slurmtorch: {line}\n")
    sys.stderr.flush()


def wait_for_nodes(address: str, nodes: int, deadline: float) -> list[str]:
    """Connect as a driver and wait until `nodes` Ray nodes are alive; the Slurm nodes still
    missing at the deadline ([] once all joined)."""
    import logging

    import hostlist
    import ray  # lazy: only the driver step needs Ray; rendering a --ray job never imports it

    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    try:
        while True:
            alive = [n for n in ray.nodes() if n.get("Alive")]
            if len(alive) >= nodes:
                return []
            if time.monotonic() >= deadline:
                return missing_nodes(alive, hostlist.expand_hostlist(os.environ.get("SLURM_JOB_NODELIST", "")), nodes)
            time.sleep(0.2)
    finally:
        ray.shutdown()


def missing_nodes(alive: list[dict], expected: list[str], wanted: int) -> list[str]:
    """The job's nodes that no alive Ray node is (by host name, short), pure; where the names
    do not match Slurm's, how many are missing."""
    seen = {str(n.get("NodeManagerHostname", "")).split(".", 1)[0] for n in alive}
    seen |= {str(n.get("NodeManagerAddress", "")) for n in alive}
    return [e for e in expected if e.split(".", 1)[0] not in seen] or [f"{wanted - len(alive)} node(s)"]


def drive(head_text: str, opts: dict[str, str], program: list[str]) -> int:
    """Once every node has joined, run the script here as Ray's driver, with RAY_ADDRESS set."""
    started = os.environ.get(protocol.STARTED)
    if started:  # the batch script's proof that the step launched (bootstrap.runner.note_started)
        try:
            os.close(os.open(started, os.O_WRONLY | os.O_CREAT, 0o644))
        except OSError:
            pass
    wait_s = float(opts["--deadline"])
    deadline = time.monotonic() + wait_s
    ip, port = split_address(head_text)
    address = f"{ip}:{port}"
    if not wait_listening(ip, port, wait_s, poll_s=0.1):
        say(f"error: the Ray head at {address} did not answer within {wait_s:g} s (its line above says why)")
        return 1
    missing = wait_for_nodes(address, int(opts["--nodes"]), deadline)
    if missing:
        say(f"error: the Ray cluster was not complete after {wait_s:g} s (--hang-timeout): not joined: "
            f"{', '.join(missing)}")
        return 1
    os.environ["RAY_ADDRESS"] = address
    run_program(program, opts.get("--import-from"))
    return 0


def run_program(program: list[str], import_from: str | None) -> None:
    """`python SCRIPT ARGS` or `python -m MODULE ARGS`, in this process (bootstrap.target's way)."""
    from slurmtorch.bootstrap.target import import_from as use_folder, run_script  # lazy: the driver's only
    import runpy

    if program[0] == "-m":
        if import_from:
            use_folder(import_from)
        sys.argv = [program[1], *program[2:]]
        runpy.run_module(program[1], run_name="__main__", alter_sys=True)
    else:
        run_script(program[0], program[1:])
