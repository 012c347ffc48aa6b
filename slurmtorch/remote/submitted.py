"""The laptop's record of what it submitted where, so `pull` needs nothing the cluster says for it.

When `sbatch --cluster NAME` has sent the code and the cluster answered with a job id
(`forward.submit`), the laptop keeps, privately (`statefiles`), one small file per job,
`submitted/NAME/JOBID.json`: the laptop folder it was submitted from (absolute) and the
cluster folder the job runs in (the code's mirror and the working folder inside it, as this
laptop computed them), with the cluster's host. `pull JOBID --cluster NAME` reads it: the
files go into that laptop folder, from that cluster folder. The job's own records (job.json's
`workdir`, snapshot.json's tree) are the job's to rewrite, so neither is asked.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from slurmtorch.errors import ClusterError
from slurmtorch.remote import statefiles
from slurmtorch.remote.clusters import NAME_RE

RECORD_MAX = 64 << 10  # a record is a few hundred bytes: paths and a name
KEPT = 2000  # records kept per cluster, the newest job ids (a pull of an older job needs --to)
_JOB_FILE = re.compile(r"([0-9]+)\.json")


@dataclass(frozen=True)
class Submission:
    """One job this laptop submitted: where from, and where it runs."""

    cluster: str  # the clusters file's name
    host: str  # its host then: a record of another host's job is none of this one's
    job_id: str
    laptop: str  # the folder it was submitted from, absolute
    mirror: str  # the code's mirror on the cluster (`~/...` or absolute)
    cwd: str  # the working folder inside the mirror, relative ('' for the mirror itself)

    @property
    def cluster_folder(self) -> str:
        return posixpath.join(self.mirror, self.cwd) if self.cwd else self.mirror


def parse(value: object, where: str) -> Submission:
    """A record's JSON value as a Submission, or one ClusterError line (pure)."""
    fields = [f for f in Submission.__dataclass_fields__]
    if not isinstance(value, dict) or not all(isinstance(value.get(f), str) for f in fields):
        raise ClusterError(f"the record of a submission, {where}, is not one slurmtorch wrote",
                           tip="remove it; then pull that job with --to DIR")
    sub = Submission(**{f: value[f] for f in fields})
    if not os.path.isabs(sub.laptop) or not sub.mirror or sub.cwd.startswith("/") or ".." in sub.cwd.split("/"):
        raise ClusterError(f"the record of a submission, {where}, names no usable folders",
                           tip="remove it; then pull that job with --to DIR")
    return sub


def record(sub: Submission, environ=os.environ) -> Path:
    """Keep `sub` (replacing an older record of the same job id) and prune the oldest; its file."""
    folder = _folder(sub.cluster, environ)
    path = folder / f"{int(sub.job_id)}.json"
    statefiles.write_json(path, asdict(sub), RECORD_MAX)
    _prune(folder)
    return path


def find(cluster: str, host: str, job_id: str, environ=os.environ) -> Submission | None:
    """This laptop's record of job `job_id` on `cluster` (at `host`), or None."""
    folder = _folder(cluster, environ)
    path = folder / f"{int(job_id)}.json"
    value = statefiles.read_json(path, RECORD_MAX, "the record of a submission",
                                 tip=f"remove {path}; then pull that job with --to DIR")
    if value is None:
        return None
    sub = parse(value, str(path))
    return sub if sub.cluster == cluster and sub.host == host and sub.job_id == str(int(job_id)) else None


def _folder(cluster: str, environ) -> Path:
    if not NAME_RE.fullmatch(cluster):  # the clusters file's rule: a name is a plain folder name
        raise ClusterError(f"invalid cluster name {cluster!r}")
    return statefiles.state_folder(f"submitted/{cluster}", environ)


def _prune(folder: Path) -> None:
    ids = sorted(int(m.group(1)) for m in map(_JOB_FILE.fullmatch, os.listdir(folder)) if m)
    for old in ids[:-KEPT]:
        try:
            os.unlink(folder / f"{old}.json")
        except FileNotFoundError:
            pass
