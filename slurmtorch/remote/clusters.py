"""The user's clusters file: the clusters `--cluster NAME` can reach, and how.

One YAML file on the laptop maps cluster names to entries: the SSH destination, the site
to use there, where slurmtorch's Python is on the cluster (a venv, or an interpreter after
`module load`) and where job folders live there. It is read with the site configs' safe
loader (plain scalars, line marks, no duplicate keys) and checked with their `Validator`:
every problem of the file is collected, the first raised as one `ClusterError` line
(file:line: key path: problem) with its fix. Every value is plain text a shell can quote
(`slurmtorch.shell.quote`), never shell code: no control characters, no `$`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmtorch import protocol
from slurmtorch.errors import ClusterError
from slurmtorch.inputs import file_problem
from slurmtorch.submit.sites.model import NAME_RE as SITE_NAME_RE, NAME_TIP, valid_tip
from slurmtorch.submit.sites.safe_yaml import Kind, read_document, type_name
from slurmtorch.submit.sites.values import Stop, Validator

ENV = protocol.CLUSTER  # the variable that picks a cluster, as `--cluster NAME` does
FILE_ENV = "SLURMTORCH_CLUSTERS"  # the clusters file itself, in place of the XDG one
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
NAME_RULE = "names are letters, digits, '.', '_' and '-', starting with a letter or digit"
EXAMPLE = "alps: {host: ela}"  # the least an entry needs, for tips
KIND = Kind("clusters file", ClusterError)

# OpenSSH 9.6 refuses these in a user or host name given on its command line, where
# ProxyCommand's %h/%r would pass them to a shell (CVE-2023-51385; misc.c valid_hostname
# and valid_ruser); a leading '-' would be read as an option (git's CVE-2017-1000117,
# "connect: reject ssh hostname that begins with a dash"). Said here, with the key's line.
_HOST_REFUSED = "'`\"$\\;&<>|(){},"
_USER_REFUSED = "'`\";&<>|(){}"
_COMMAND_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*")  # python3, python3.11: a name on PATH

# key -> (the Validator's check, what it means); the docs' table says the same.
KEYS: dict[str, tuple[str, str]] = {
    "host": ("destination", "the SSH destination: an alias from ~/.ssh/config, or [user@]host"),
    "site": ("site_name", "the site config to use on the cluster (default: the cluster's own default site)"),
    "venv": ("venv", "where slurmtorch is installed on the cluster: a venv, whose bin/python runs"),
    "python": ("interpreter", "or an interpreter: an absolute path, or a name on the cluster's PATH "
                              "(default python3)"),
    "modules": ("module_names", "modules loaded first (`module load`, in a login shell)"),
    "workdir": ("folder", "job folders and synced code on the cluster (its SLURMTORCH_HOME; "
                          "default the cluster's ~/.slurmtorch)"),
}


@dataclass(frozen=True)
class Cluster:
    """One entry of the clusters file, checked; paths under `~/` mean the cluster's home."""

    name: str
    host: str
    site: str | None
    python: str  # resolved: venv + "/bin/python", or python, or "python3"
    modules: tuple[str, ...]
    workdir: str | None
    source: str  # the file it came from, for messages


def path(environ: Mapping[str, str] = os.environ) -> Path:
    """Where the clusters file is: $SLURMTORCH_CLUSTERS, else under $XDG_CONFIG_HOME, else ~/.config."""
    return _located(environ)[0]


def load(file: Path | None = None, environ: Mapping[str, str] = os.environ) -> dict[str, Cluster]:
    """Every cluster of the file (`path()` unless given), by name; any problem is a ClusterError."""
    file, how = (Path(file), "") if file is not None else _located(environ)
    found = file_problem(file)
    if found == "does not exist":
        raise ClusterError(f"no clusters file at {file}{how}",
                           tip=f"create it with one entry per cluster, e.g. `{EXAMPLE}` "
                               "(host: what you would type after `ssh`)")
    if found is not None:
        raise ClusterError(f"clusters file {file} {found}{how}",
                           tip=f"make it a YAML file of clusters (e.g. `{EXAMPLE}`), or set ${FILE_ENV} to one")
    clusters, problems = _parse(file)
    if problems:
        (message, tip), more = problems[0], len(problems) - 1
        raise ClusterError(message + (f" (and {more} more)" if more else ""), tip=tip)
    return clusters


def check(file: Path) -> tuple[tuple[str, str | None], ...]:
    """Every problem of an existing clusters file as (message, tip), in file order; () when none."""
    try:
        return _parse(file)[1]
    except ClusterError as e:  # the file as a whole: unreadable, not YAML, not a mapping
        return ((e.message, e.tip),)


def find(name: str, environ: Mapping[str, str] = os.environ) -> Cluster:
    """The cluster named `name` in the clusters file, else a ClusterError naming the known ones."""
    clusters = load(None, environ)
    file = path(environ)
    if name in clusters:
        return clusters[name]
    if not clusters:
        raise ClusterError(f"unknown cluster {name!r}: {file} names no clusters",
                           tip=f"add an entry, e.g. `{EXAMPLE}`")
    raise ClusterError(f"unknown cluster {name!r} in {file}", tip=valid_tip(name, sorted(clusters), "clusters"))


def _located(environ: Mapping[str, str]) -> tuple[Path, str]:
    """The clusters file's path and, for a message, why there."""
    home = environ.get("HOME") or str(Path.home())
    given = environ.get(FILE_ENV)
    if given:
        return Path(home + given[1:] if given.startswith("~/") else given), f" (named by ${FILE_ENV})"
    # XDG Base Directory Specification: unset or empty means $HOME/.config, and "if an
    # implementation encounters a relative path in any of these variables it should
    # consider the path invalid and ignore it"
    # (https://specifications.freedesktop.org/basedir-spec/latest/, "Environment variables").
    config = environ.get("XDG_CONFIG_HOME", "")
    if config.startswith("/"):
        return (Path(config) / "slurmtorch" / "clusters.yaml",
                f" (under $XDG_CONFIG_HOME; set ${FILE_ENV} to use another file)")
    return (Path(home) / ".config" / "slurmtorch" / "clusters.yaml",
            f" (the default; set ${FILE_ENV} to use another file)")


def _parse(file: Path) -> tuple[dict[str, Cluster], tuple[tuple[str, str | None], ...]]:
    """The file's clusters and every problem found; a file that is no mapping at all raises."""
    data = read_document(file, KIND)
    if data is None:  # empty, or comments only
        return {}, ()
    if not isinstance(data, dict):
        raise ClusterError(f"{file}: top level: expected a mapping of cluster names to entries, "
                           f"got {type_name(data)}", tip=f"one entry per cluster, e.g. `{EXAMPLE}`")
    checks = _Checks(file)
    clusters = {}
    for name, entry in data.items():
        with checks.section():
            cluster = _entry(checks, data, name, entry, str(file))
            clusters[cluster.name] = cluster
    return clusters, checks.in_order()


def _entry(checks: _Checks, data: dict, name: Any, entry: Any, source: str) -> Cluster:
    """One cluster's entry checked; any problem is noted and ends it (`Stop`)."""
    label = str(name)
    if not isinstance(name, str):
        checks.fail(data, name, label, f"expected a cluster name, got {type_name(name)}",
                    "quote the name: YAML reads a bare number, true/false, yes/no, on/off or null as another type")
    if not NAME_RE.fullmatch(name):
        checks.fail(data, name, label, f"invalid cluster name {name!r}", NAME_RULE)
    if not isinstance(entry, dict):
        checks.fail(data, name, label, f"expected a mapping of keys, got {type_name(entry)}",
                    f"e.g. `{name}: {{host: login.example.org}}`; valid keys: {', '.join(KEYS)}")
    before = checks.count()
    checks.check_keys(entry, KEYS, name)
    if "host" not in entry:
        checks.note(data, name, name, "missing required key 'host'", f"add `host:` ({KEYS['host'][1]})")
    if "venv" in entry and "python" in entry:
        checks.note(entry, "python", f"{name}.python", "give venv or python, not both",
                    "a venv runs its own bin/python; keep `venv:`, or `python:` for an interpreter outside one")
    values = checks.values(entry, KEYS, name)
    if checks.count() > before:
        raise Stop
    venv = values.get("venv")
    return Cluster(
        name=name, host=values["host"], site=values.get("site"),
        python=(venv.rstrip("/") + "/bin/python") if venv else values.get("python", "python3"),
        modules=values.get("modules", ()), workdir=values.get("workdir"), source=source,
    )


class _Checks(Validator):
    """The clusters file's value types, on the site configs' Validator (file:line, key path, fix)."""

    def text(self, mapping, key, v, keypath, example: str) -> str:
        """A non-empty string on one line, without control characters."""
        if not isinstance(v, str):
            self.fail(mapping, key, keypath, f"expected a string, got {type_name(v)}", f"e.g. {key}: {example}")
        if not v:
            self.fail(mapping, key, keypath, "is empty", f"e.g. {key}: {example}")
        if not v.isprintable():
            bad = next(c for c in v if not c.isprintable())
            self.fail(mapping, key, keypath, f"{v!r} contains {bad!r}, a newline or control character",
                      "write the value on one line, as plain text")
        return v

    def destination(self, mapping, key, v, keypath) -> str:
        """`[user@]host` or an ssh config alias: one argument ssh reads as its destination."""
        v = self.text(mapping, key, v, keypath, "login.example.org")
        fix = "name an alias from ~/.ssh/config (Host NAME, with HostName, User, Port, ProxyJump) or [user@]host"
        if v.startswith("-"):
            self.fail(mapping, key, keypath, f"{v!r} starts with '-', which ssh would read as an option", fix)
        if any(c.isspace() for c in v):
            self.fail(mapping, key, keypath, f"{v!r} contains whitespace: ssh takes one destination",
                      fix + "; put options such as a port in ~/.ssh/config")
        user, at, host = v.rpartition("@")
        for part, refused, what in ((user, _USER_REFUSED, "user"), (host, _HOST_REFUSED, "host")):
            bad = [c for c in refused if c in part]
            if bad:
                self.fail(mapping, key, keypath, f"{v!r}: {bad[0]!r} in the {what} name, which ssh refuses "
                          "on its command line (it could reach a shell through ProxyCommand)", fix)
        if at and not (user and host):
            self.fail(mapping, key, keypath, f"{v!r} has an empty user or host name", fix)
        return v

    def site_name(self, mapping, key, v, keypath) -> str:
        """A site's name on the cluster (as `slurmtorch site list` shows there), never a path."""
        v = self.text(mapping, key, v, keypath, "cscs-alps")
        if not SITE_NAME_RE.fullmatch(v) or v.startswith(("-", ".")):
            self.fail(mapping, key, keypath, f"invalid site name {v!r}",
                      f"site {NAME_TIP}, not starting with '-' or '.': a name `slurmtorch site list` "
                      "shows on the cluster, not a path")
        return v

    def folder(self, mapping, key, v, keypath) -> str:
        """An absolute path on the cluster, or one under `~/` (the cluster's home), kept as given."""
        v = self.text(mapping, key, v, keypath, "/scratch/me/slurmtorch")
        if not v.startswith(("/", "~/")):
            self.fail(mapping, key, keypath, f"{v!r} is not an absolute path",
                      "write it from / or from ~/ (your home folder on the cluster)"
                      + ("" if v.startswith("~") else f", e.g. ~/{v}"))
        self._no_variables(mapping, key, v, keypath)
        return v

    def venv(self, mapping, key, v, keypath) -> str:
        """A virtual environment's folder (its bin/python runs), not the interpreter inside it."""
        v = self.folder(mapping, key, v, keypath)
        if re.search(r"/bin/python[0-9.]*/?$", v):
            self.fail(mapping, key, keypath, f"{v!r} is an interpreter, not a venv's folder",
                      f"write venv: {v[:v.rindex('/bin/')]}, or python: {v.rstrip('/')} instead")
        return v

    def interpreter(self, mapping, key, v, keypath) -> str:
        """An interpreter: an absolute path (or under `~/`), or a bare name the cluster's PATH finds."""
        v = self.text(mapping, key, v, keypath, "python3")
        if not (v.startswith(("/", "~/")) or _COMMAND_RE.fullmatch(v)):
            self.fail(mapping, key, keypath, f"{v!r} is neither an absolute path nor a command name",
                      "e.g. python: /usr/bin/python3, python: ~/miniconda3/bin/python, or python: python3.11 "
                      "(found on the cluster's PATH after `modules`)")
        self._no_variables(mapping, key, v, keypath)
        return v

    def module_names(self, mapping, key, v, keypath) -> tuple[str, ...]:
        """Module names for `module load`: each one word, not an option."""
        names = self.value(mapping, key, "strlist", keypath)
        for i, name in enumerate(names):
            if not name or not name.isprintable() or any(c.isspace() for c in name) or name.startswith("-"):
                self.note(mapping, key, f"{keypath}[{i}]", f"{name!r} is not one module name",
                          "one module per entry, without spaces or a leading '-', "
                          "e.g. modules: [cray-python, cudatoolkit/12.4]")
        return names

    def _no_variables(self, mapping, key, v, keypath) -> None:
        # The value is quoted on the cluster's command line, so `$SCRATCH` would stay a folder named so.
        if "$" in v:
            self.fail(mapping, key, keypath, f"{v!r}: variables are not expanded",
                      "write the path out (run `echo $SCRATCH` on the cluster); ~/ is the only shorthand")
