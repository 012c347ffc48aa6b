"""What this process's bootstrap has set up: one `RankState`, shared by its parts.

`init()` fills it, the `init_process_group` wrapper (which runs inside the user's
script) reads and updates it, and the exit path reads it to report and tear down.
One instance per process (`STATE`): a rank is one world.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurmtorch.bootstrap.rankinfo import RankInfo
from slurmtorch.bootstrap.rendezvous import PortReservation


@dataclass(eq=False)  # one instance, never compared
class RankState:
    info: RankInfo | None = None  # set once init() has derived the world
    reservation: PortReservation | None = None  # rank 0's MASTER_PORT, held until torch's store binds it
    timeout: float | None = None  # the group's timeout in seconds: ours, or the script's once it asked
    backend: str | None = None  # the group's backend, as chosen or as the script asked
    group_ours: bool = False  # the default group is the one init() created
    hook_installed: bool = False  # the init_process_group wrapper is in place (or will be, on import)
    main: bool = False  # started as `python -m slurmtorch.bootstrap`: the exit path is ours
    timings: dict[str, float] = field(default_factory=dict)  # import_torch's cost, for SLURMTORCH_TIMINGS
    reinits: int = 0  # groups the script replaced ours with (each gets a fresh store prefix)
    kept_store: object = None  # our store, kept alive under the script's replacement group
    group_env: dict[str, str] = field(default_factory=dict)  # the process-group settings our group was made with
    placement: object = None  # the rank's placement.Placement, once init() decided it (doctor reports it)

    def release_port(self) -> None:
        """Stop holding MASTER_PORT (torch's store has it now, or nobody will)."""
        reservation, self.reservation = self.reservation, None
        if reservation is not None:
            reservation.close()


STATE = RankState()
