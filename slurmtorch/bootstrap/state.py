"""What this process's bootstrap has set up: one `RankState`, shared by its parts.

`init()` fills it, the `init_process_group` wrapper (which runs inside the user's
script) reads and updates it, and the exit path reads it to report and tear down.
One instance per process (`STATE`): a rank is one world.
"""

from __future__ import annotations

from slurmtorch.bootstrap.rankinfo import RankInfo


class RankState:
    """A plain class (one instance, never compared): a dataclass would import `dataclasses`,
    ~7 ms of every rank's start (see `slurmtorch.records`)."""

    def __init__(self) -> None:
        self.info: RankInfo | None = None  # set once init() has derived the world
        # rank 0's MASTER_PORT (a rendezvous.PortReservation), held until torch's store binds it
        self.reservation = None
        self.timeout: float | None = None  # the group's timeout in seconds: ours, or the script's once it asked
        self.backend: str | None = None  # the group's backend, as chosen or as the script asked
        self.group_ours = False  # the default group is the one init() created
        self.hook_installed = False  # the init_process_group wrapper is in place (or will be, on import)
        self.main = False  # started as `python -m slurmtorch.bootstrap`: the exit path is ours
        self.timings: dict[str, float] = {}  # import_torch's cost, for SLURMTORCH_TIMINGS
        self.reinits = 0  # groups the script replaced ours with (each gets a fresh store prefix)
        self.kept_store = None  # our store, kept alive under the script's replacement group

    def release_port(self) -> None:
        """Stop holding MASTER_PORT (torch's store has it now, or nobody will)."""
        reservation, self.reservation = self.reservation, None
        if reservation is not None:
            reservation.close()


STATE = RankState()
