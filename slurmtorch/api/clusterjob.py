"""`ClusterJob`: a Distributor job on a cluster, asked from the laptop that submitted it.

It answers what `Job` answers (state, wait, result, logs, cancel); each question is one
request over SSH (`remote.distribute.ask`), where the cluster's side attaches to the job by
id (`Job.attach`) and answers as it would there. So a laptop whose Python died can
re-attach with `Job.attach(job_id, cluster=NAME)`, and an answer never depends on this
process having waited.
"""

from __future__ import annotations

from typing import Any


class ClusterJob:
    """A Distributor job on cluster `cluster` (the clusters file's name), by its Slurm job id."""

    def __init__(self, job_id: str, cluster: str, answer: str = "pickle"):
        self.job_id = str(job_id)
        self.cluster = cluster
        self.answer = answer  # "json": the result comes as JSON, and a pickle is refused unread

    def __repr__(self) -> str:
        shown = f", answer={self.answer!r}" if self.answer != "pickle" else ""
        return f"ClusterJob({self.job_id!r}, cluster={self.cluster!r}{shown})"

    def state(self) -> str:
        """PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ... (Slurm's words)."""
        return self._ask("state")

    def wait(self, timeout: float | None = None) -> str:
        """Block until the job ends (TimeoutError after `timeout` s); its final state."""
        return self._ask("wait", timeout=timeout)

    def result(self, timeout: float | None = None, *, stream: bool = False) -> Any:
        """Rank 0's return value; raises RemoteError / JobFailed as `Job.result` does. An
        interrupt ends the wait, not the job: ask again, or `cancel()`. Pickled (and so
        unpickled here) unless this job's answer is "json"."""
        return self._ask("result", timeout=timeout, stream=stream)

    def logs(self, rank: int | None = None, stream: str = "both", *, node: int | None = None) -> str:
        """What rank `rank` (default 0) printed so far, as `Job.logs`."""
        return self._ask("logs", rank=rank, stream=stream, node=node)

    def cancel(self) -> None:
        """Cancel the job; a finished job is left alone."""
        self._ask("cancel")

    def _ask(self, question: str, **kwargs: Any) -> Any:
        from slurmtorch.remote import distribute  # lazy: ssh's edge, only when a question is asked

        return distribute.ask(self.cluster, self.job_id, question, kwargs, self.answer)
