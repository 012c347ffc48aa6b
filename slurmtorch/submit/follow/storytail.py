"""A job's story followed like a log: each new line of it (a requeue, a restart, a start on
other nodes) said once, as it appears in the job's record.

`--wait`, `logs --follow` and a Distributor's run pump one beside the log tails: the record
is stat'ed each time and read (bounded, `events.read`) only when it grew, so a requeue shows
where the user is looking within a tick of its event, without asking the scheduler.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from slurmtorch import events
from slurmtorch.submit.jobfolder.terminaltext import visible
from slurmtorch.submit.jobfolder.story import fold


class StoryTail:
    """The story lines of the job in `folder` not said yet, each passed to `say` once."""

    def __init__(self, folder: Path, say: Callable[[str], None]):
        self.folder, self.say = folder, say
        self.said = 0  # lines of the story said so far
        self.size = -1  # the record's size when last read

    def pump(self) -> None:
        try:
            size = (self.folder / events.FILE).stat().st_size
        except OSError:
            return
        if size == self.size:
            return
        self.size = size
        lines = fold(events.read(self.folder)).lines()
        for line in lines[self.said:]:
            self.say(visible(line))
        self.said = max(self.said, len(lines))
