"""TEMPORARY stub (the clusters helper writes the real one)."""
from __future__ import annotations
import os
from dataclasses import dataclass
from pathlib import Path
import yaml
from slurmtorch.errors import ClusterError

ENV = "SLURMTORCH_CLUSTER"

@dataclass(frozen=True)
class Cluster:
    name: str
    host: str
    site: str | None
    python: str
    modules: tuple[str, ...]
    workdir: str | None
    source: str

def path(environ=os.environ) -> Path:
    if environ.get("SLURMTORCH_CLUSTERS"):
        return Path(environ["SLURMTORCH_CLUSTERS"])
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "slurmtorch" / "clusters.yaml"

def load(file=None, environ=os.environ):
    f = file or path(environ)
    data = yaml.safe_load(open(f))
    out = {}
    for n, e in data.items():
        py = e.get("venv") + "/bin/python" if e.get("venv") else e.get("python", "python3")
        out[n] = Cluster(n, e["host"], e.get("site"), py, tuple(e.get("modules", ())), e.get("workdir"), str(f))
    return out

def find(name, environ=os.environ):
    c = load(None, environ)
    if name not in c:
        raise ClusterError(f"no cluster {name}")
    return c[name]
