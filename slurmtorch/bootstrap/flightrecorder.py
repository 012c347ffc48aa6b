"""torch's NCCL flight recorder, on by default and dumping into the job folder.

When an NCCL collective times out, torch's watchdog can write what each rank's recorder
holds (the last collectives it entered and completed, with sequence numbers) before the
process ends: `slurmtorch stacks` and the failure report summarise those dumps
(`submit.flightdump`). torch documents the switches as environment variables, read when
the NCCL process group is made; a value the user or the site set is kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from slurmtorch import protocol

BUFFER_ENTRIES = "2000"  # torch 2.13's own default; older torch records nothing without it


def env_for(backend: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The recorder's variables for a group of `backend` in a job folder (or a local run's, which
    `slurmtorch stacks local-N` reads alike), less those set (pure)."""
    folder = protocol.rank_folder(environ)
    if not folder or "nccl" not in str(backend).lower():
        return {}
    prefix = protocol.flight_prefix(folder)
    wanted = {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": BUFFER_ENTRIES,  # TORCH_FR_BUFFER_SIZE, where set, wins
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": prefix,  # torch >= 2.9's name
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,  # older torch's
    }
    if "TORCH_FR_BUFFER_SIZE" in environ:
        del wanted["TORCH_NCCL_TRACE_BUFFER_SIZE"]
    return {k: v for k, v in wanted.items() if k not in environ}


def enable(backend: str, environ=os.environ) -> None:
    """Set `env_for`'s variables and make the dumps' folder (best effort)."""
    env = env_for(backend, environ)
    if not env:
        return
    environ.update(env)
    try:
        os.makedirs(os.path.join(str(protocol.rank_folder(environ)), protocol.FLIGHT), exist_ok=True)
    except OSError:
        pass  # torch then says it could not write the dump; the job runs on
