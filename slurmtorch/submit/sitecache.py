"""Validated sites kept between CLI runs: a run that names an unchanged site reads no YAML.

Loading a site imports PyYAML (~9 ms of a ~90 ms dry run, 2 cores), then parses and
validates every file of its `extends:` chain. A later run that names the same site needs
none of that when nothing it was made from has changed. One entry per site file: the
`Site`, and what it was made from: each YAML file's content (its SHA-256: a file rewritten
within a clock tick keeps its mtime), where each `extends:` name led on the search path,
and the code that reads and checks sites (its files' mtime and size, as for .pyc files). An entry is used only while all of that still holds:
an edited file, a name that now resolves elsewhere, a changed loader or a templates folder
that is gone all load from YAML again, with every error as before.

Private, as Jinja's bytecode cache is (`render`): a folder only this user can write, and
entries unpickled with only the site model's classes allowed. SLURMTORCH_NO_SITE_CACHE=1
turns it off. Reading or writing it never fails a run: any problem is a miss.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Iterable
from pathlib import Path

from slurmtorch.submit.jobfolder import ownership
from slurmtorch.submit.sites.model import Site

FORMAT = 1  # the entry's layout; a change makes every older entry a miss
_PACKAGE = Path(__file__).resolve().parent.parent
# The code a Site is made by: a changed loader or schema must not be answered from the cache.
_CODE = ("submit/sites.py", "submit/sites/safe_yaml.py", "submit/sites/schema.py", "submit/sites/values.py",
         "submit/sites/rules.py", "submit/sites/model.py", "submit/sites/fabric.py", "submit/sbatch_options.py",
         "submit/options.py", "submit/inputs.py", "records.py", "limits.py", "roles.py", "backends.py", "shell.py",
         "errors.py")
_ALLOWED = {("slurmtorch.submit.sites.model", name) for name in ("Site", "NodeType", "Partition", "Container")}


def folder() -> Path | None:
    """$XDG_CACHE_HOME/slurmtorch/sites (default ~/.cache), made private; None when off or
    unsafe (someone else could plant an entry: ownership.cache_folder)."""
    if os.environ.get("SLURMTORCH_NO_SITE_CACHE"):
        return None
    return ownership.cache_folder("sites")


def identity(path: str | os.PathLike) -> tuple[str, str] | None:
    """(path, SHA-256 of its bytes) of a site file, or None when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return (str(path), hashlib.sha256(fh.read()).hexdigest())
    except OSError:
        return None


def _stamp(name: str) -> tuple[str, int, int] | None:
    try:
        st = os.stat(_PACKAGE / name)
    except OSError:
        return None
    return (name, st.st_mtime_ns, st.st_size)


def depends(files: Iterable[tuple | None], names: Iterable[tuple[str, Path]]) -> tuple:
    """What an entry is valid for: the `identity` of each site file (taken before it was
    read), where each extends name led, and the code that loads sites."""
    return (tuple(files), tuple((n, str(p)) for n, p in names), tuple(_stamp(f) for f in _CODE))


def _entry(where: Path, path: Path) -> Path:
    return where / (hashlib.sha256(str(path).encode("utf-8", "surrogateescape")).hexdigest()[:32] + ".pickle")


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a site")
        return super().find_class(module, name)


def load(path: Path, resolve) -> Site | None:
    """The cached Site for the site file `path`, or None (a miss). `resolve(name)` finds
    an `extends:` name on the search path as loading would (`sites.find_site`)."""
    where = folder()
    if where is None:
        return None
    try:
        with open(_entry(where, path), "rb") as fh:
            fmt, key, (files, names, code), site = _Unpickler(fh).load()
    except Exception:  # noqa: BLE001 - missing, truncated, foreign or old: a miss
        return None
    if fmt != FORMAT or key != str(path) or not isinstance(site, Site):
        return None
    if any(entry is None or identity(entry[0]) != entry for entry in files):
        return None
    if code != tuple(_stamp(f) for f in _CODE):
        return None
    try:
        if any(str(resolve(name)) != found for name, found in names):
            return None
    except Exception:  # noqa: BLE001 - the name no longer resolves: loading says why
        return None
    if site.templates and not os.path.isdir(site.templates):
        return None
    return site


def store(path: Path, site: Site, valid_for: tuple) -> None:
    """Keep `site` for `path` (written atomically; best effort)."""
    where = folder()
    if where is None or None in valid_for[0]:
        return
    target = _entry(where, path)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            pickle.dump((FORMAT, str(path), valid_for, site), fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, target)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
