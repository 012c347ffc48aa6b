"""`Distributor(..., cluster=NAME).run(fn)`: the call pickled here, run there, the answer back.

The Distributor pickles the call as a local run would (`payload.prepare`: what cannot be
pickled is named before anything is sent); this sends it in the request's header, with the
Distributor's own settings. The cluster side (serve's `answer`) submits it with its
site, waits there (rank 0's output and the state lines on stderr, which ssh brings here)
and writes one line on the request's stdout (`answer`): rank 0's value, or the error
(RemoteError, JobFailed) that a local run would have raised, so `run` returns or raises here
as it does locally. The value comes pickled by default, which the laptop unpickles: code on
the cluster side can then run code here. With `answer="json"` it comes as JSON and nothing is
unpickled here (docs/SECURITY.md). A file target goes with `sbatch --cluster`, which syncs its
tree; a Distributor sends functions only.
"""

from __future__ import annotations

import base64
from typing import Any

from slurmtorch import __version__

# The Distributor's settings that go along (scheduler_options too); `site` defaults to the cluster's.
_SETTINGS = ("num_processes", "nodes", "use_gpu", "site", "preset", "backend", "progress", "answer")


def run(dist: Any, prepared: tuple[dict, bytes | None, str]) -> Any:
    """The laptop's side of a call `payload.prepare` pickled (`prepared`: meta, payload, name):
    rank 0's value, or the error a local run would raise."""
    return _send(dist, prepared, wait=True)


def submit(dist: Any, prepared: tuple[dict, bytes | None, str]) -> str:
    """`Distributor(cluster=).submit`: the call submitted there; its job id, once sbatch took it."""
    return _send(dist, prepared, wait=False)


# What a ClusterJob may ask of a job there, and the keywords each takes (`Job`'s methods).
QUESTIONS = {"state": (), "wait": ("timeout",), "result": ("timeout", "stream"),
             "logs": ("rank", "stream", "node"), "cancel": ()}


def ask(name: str, job_id: str, question: str, kwargs: dict, answer: str = "pickle") -> Any:
    """A `ClusterJob`'s question about job `job_id` on cluster `name`: `Job.attach` there,
    the method's answer back here, or the error it raised there, raised here. `answer`: how
    a result may come back ("json": never a pickle)."""
    from slurmtorch.remote import clusters

    return _call(clusters.find(name), {"job": str(job_id), "question": question, "kwargs": kwargs, "answer": answer},
                 pickled=question == "result" and answer == "pickle")


def _send(dist: Any, prepared: tuple[dict, bytes | None, str], wait: bool) -> Any:
    from slurmtorch.remote import clusters  # lazy: the clusters file's reader (yaml), only when a call is sent

    meta, payload, name = prepared
    cluster = clusters.find(dist.cluster)
    settings = {k: getattr(dist, k) for k in _SETTINGS}
    settings["site"] = settings["site"] or cluster.site
    call = {"settings": settings, "options": dist.scheduler_options, "meta": meta, "name": name,
            "payload": base64.b64encode(payload or b"").decode(), "wait": wait}
    return _call(cluster, call, pickled=wait and dist.answer == "pickle")


def _call(cluster: Any, call: dict, pickled: bool) -> Any:
    """`call` to the cluster side's `--distribute` (serve's `answer`), over one connection: its
    answer, or the error raised there, raised here; a pickled value only where `pickled`."""
    from slurmtorch.remote import outcome, request, ssh

    code, out = ssh.call(ssh.connect(cluster), request.command(cluster, __version__, ["--distribute"]),
                         request.header(None, call=call))
    return outcome.read(out, code, cluster.name, pickled)
