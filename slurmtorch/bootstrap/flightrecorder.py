"""torch's NCCL flight recorder, on by default and dumping into the job folder.

When an NCCL collective times out, torch's watchdog can write what each rank's recorder
holds (the last collectives it entered and completed, with sequence numbers) before the
process ends: `slurmtorch stacks` and the failure report summarise those dumps
(`submit.flightdump`). torch documents the switches as environment variables, read when
the NCCL process group is made; a value the user or the site set is kept.

torch 2.9 renamed two of them (TORCH_NCCL_TRACE_BUFFER_SIZE -> TORCH_FR_BUFFER_SIZE,
TORCH_NCCL_DEBUG_INFO_TEMP_FILE -> TORCH_FR_DUMP_TEMP_FILE; torchtitan followed in
pytorch/torchtitan#1748) and reads the old names still, but warns once per rank when one is
set ("Environment variable TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated; use TORCH_FR_BUFFER_SIZE
instead", seen on every rank with torch 2.11). So each rank gets the names its own torch reads,
and a user's setting of either name of a pair leaves that pair alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from slurmtorch import protocol

BUFFER_ENTRIES = "2000"  # torch 2.13's own default; older torch records nothing without it
RENAMED_IN = (2, 9)  # the first torch that reads the TORCH_FR_* names
# (torch >= 2.9's name, older torch's name) of each renamed switch.
BUFFER_NAMES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
DUMP_NAMES = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")


def torch_version(text: str) -> tuple[int, int]:
    """`2.11.0+cu128` -> (2, 11); (0, 0) when it cannot be read (the old names, which every torch reads)."""
    parts = str(text).split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or "x")
    except (IndexError, ValueError):
        return 0, 0


def env_for(backend: str, environ: Mapping[str, str], version: tuple[int, int]) -> dict[str, str]:
    """The recorder's variables for a group of `backend` in a job folder (or a local run's, which
    `slurmtorch stacks local-N` reads alike), named for torch `version`, less those set (pure)."""
    folder = protocol.rank_folder(environ)
    if not folder or "nccl" not in str(backend).lower():
        return {}
    which = 0 if version >= RENAMED_IN else 1
    env = {} if "TORCH_NCCL_DUMP_ON_TIMEOUT" in environ else {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
    for names, value in ((BUFFER_NAMES, BUFFER_ENTRIES), (DUMP_NAMES, protocol.flight_prefix(folder))):
        if not any(name in environ for name in names):
            env[names[which]] = value
    return env


def enable(backend: str, environ=os.environ) -> None:
    """Set `env_for`'s variables (for the torch this rank imported) and make the dumps' folder (best effort)."""
    import torch  # already imported: only a rank making a process group gets here

    env = env_for(backend, environ, torch_version(torch.__version__))
    if not env:
        return
    environ.update(env)
    try:
        os.makedirs(os.path.join(str(protocol.rank_folder(environ)), protocol.FLIGHT), exist_ok=True)
    except OSError:
        pass  # torch then says it could not write the dump; the job runs on
