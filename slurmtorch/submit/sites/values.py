"""Checking one site file's values against the schema's types, every problem collected.

`Validator` walks a merged site file: each problem is noted with its file, line (where
YAML knows it), key path and fix, and the walk goes on, so `site validate` reports them
all in one run. A problem that makes the rest of a subtree meaningless (a node type that
is not a mapping) raises `Stop`, which the enclosing `section()` catches: only that
subtree is left unchecked. `raise_problems` turns what was collected into one SiteError.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from slurmtorch import shell
from slurmtorch.errors import ShellSafetyError, SiteError
from slurmtorch.limits import MAX_ENV_STRING, fits_env
from slurmtorch.roles import ROLE_ORDER
from slurmtorch.submit.sites.model import (ANNOTATION_KEY_RE, MPI_PLUGIN_RE, MPI_PLUGINS, NO_MPI_OPTION, SrunRemoval,
                                           parse_time, valid_tip)
from slurmtorch.submit.sites.slurmoptions import SRUN_REFUSED, option_problem, site_directive_problem
from slurmtorch.submit.sites.safe_yaml import Marked, type_name, where

_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"  # shell.env_name's pattern; re's cache compiles it once
# `$NAME` or `${NAME}` in a plain env value: exported literally, never expanded (the bug of
# `LD_LIBRARY_PATH: /opt/plugin/lib:$LD_LIBRARY_PATH`).
_EXPANSION = re.compile(r"\$\{?[A-Za-z_]")
REQUIRABLE = ("account", "qos", "time")
# A job-time variable in an apptainer image path ($NAME or ${NAME}): expanded on the node
# (IDRIS: $SINGULARITY_ALLOWED_DIR/x.sif); any other `$` would be shell code.
JOB_TIME_VAR = shell.JOB_TIME_VAR.pattern
_LAST = 1 << 30  # sorts after every line
# Options a job cannot do without (its layout, where it runs, its logs): a site may not refuse them.
_OURS = frozenset({"nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "partition", "job-name", "output",
                   "error", "time", "account", "qos", "array", "open-mode", "requeue", "no-requeue"})


class Stop(Exception):
    """The rest of this subtree cannot be checked meaningfully; its problem is noted."""


class Validator:
    """One file's values checked against the schema; problems collected, not raised."""

    def __init__(self, path: Path):
        self.path = path
        self.problems: list[tuple[tuple[str, int], str, str | None]] = []

    # ------------------------------------------------------------------ problems

    def note(self, mapping, key, keypath: str, problem: str, tip: str | None = None) -> None:
        """Record one problem at `key` of `mapping` (file:line: key path: problem) and go on."""
        if not keypath.isprintable():  # a key with a newline: the error stays one line
            keypath = repr(keypath)
        place = where(mapping, key, self.path)
        self.problems.append((_order(mapping, key), f"{place}: {keypath}: {problem}", tip))

    def note_file(self, place: str, problem: str, tip: str | None = None) -> None:
        """A problem of the file as a whole (a missing key has no line of its own)."""
        self.note_message(f"{self.path}: {place}: {problem}", tip)

    def note_message(self, message: str, tip: str | None = None) -> None:
        """A problem said in full by the caller (one that cannot name the file: its name is the problem)."""
        self.problems.append(((str(self.path), 0), message, tip))

    def fail(self, mapping, key, keypath: str, problem: str, tip: str | None = None):
        """Record a problem that ends this subtree's checks."""
        self.note(mapping, key, keypath, problem, tip)
        raise Stop

    @contextmanager
    def section(self) -> Iterator[None]:
        """A subtree whose `fail` stops only itself."""
        try:
            yield
        except Stop:
            pass

    def count(self) -> int:
        return len(self.problems)

    def in_order(self) -> tuple[tuple[str, str | None], ...]:
        """Everything noted as (message, tip), in file order (first: the earliest line)."""
        files: dict[str, int] = {}
        for (file, _line), _m, _t in self.problems:
            files.setdefault(file, len(files))
        ordered = sorted(self.problems, key=lambda p: (files[p[0][0]], p[0][1]))
        return tuple((message, tip) for _o, message, tip in ordered)

    def raise_problems(self) -> None:
        """One SiteError for everything noted, in file order (first: the earliest line)."""
        if not self.problems:
            return
        problems = self.in_order()
        path = str(self.path)
        try:  # the hint's command, copy-pasteable; a name a shell word cannot show on one line: repr
            source = shell.quote(path) if path.isprintable() else repr(path)
        except ShellSafetyError:
            source = repr(path)
        raise SiteError(problems[0][0], tip=problems[0][1], problems=problems, source=source)

    # ------------------------------------------------------------------ keys

    def check_keys(self, mapping: dict, schema: dict, keypath: str, required=()) -> None:
        """Note unknown keys; a missing required key stops the subtree (it cannot be built)."""
        for key in mapping:
            if key not in schema:
                kp = f"{keypath}.{key}" if keypath else str(key)
                self.note(mapping, key, kp, "unknown key", valid_tip(str(key), list(schema), "keys here"))
        missing = [key for key in required if key not in mapping]
        for key in missing:
            # Inside an entry, where the entry starts; a missing top-level key after the rest
            # (an unknown key, likely its misspelling, says more).
            order = _order_first(mapping, self.path) if keypath else (str(self.path), _LAST)
            self.problems.append((order,
                                  f"{self.path}: {keypath or 'top level'}: missing required key {key!r}",
                                  f"add `{key}:` ({schema[key][1]})"))
        if missing:
            raise Stop

    def values(self, mapping: dict, schema: dict, keypath: str) -> dict[str, Any]:
        """Every known key's checked value; a key with a problem is left out (and noted)."""
        out = {}
        for key in mapping:
            if key in schema:
                with self.section():
                    out[key] = self.value(mapping, key, schema[key][0], f"{keypath}.{key}" if keypath else key)
        return out

    # ------------------------------------------------------------------ one value

    def value(self, mapping, key, spec, keypath):
        """The value at `key` as the schema type `spec` says, or `fail`."""
        v = mapping[key]
        if isinstance(spec, tuple):
            if v not in spec:
                self.fail(mapping, key, keypath, f"invalid value {v!r}", valid_tip(str(v), list(spec), "values"))
            return v
        if spec == "str":
            if not isinstance(v, str):
                self.fail(mapping, key, keypath, f"expected a string, got {type_name(v)}")
            return v
        if spec == "int":
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                self.fail(mapping, key, keypath, f"expected a non-negative integer, got {v!r}")
            return v
        if spec == "bool":
            if not isinstance(v, bool):
                self.fail(mapping, key, keypath, f"expected true or false, got {v!r}")
            return v
        if spec == "strlist":
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                self.fail(mapping, key, keypath, "expected a list of strings",
                          f"write it as a list: {key}: [{v}]" if isinstance(v, str) else f"e.g. {key}: [a, b]")
            return tuple(v)
        return getattr(self, spec)(mapping, key, v, keypath)

    def time(self, mapping, key, v, keypath):
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)  # plain minutes
        if not isinstance(v, str):
            self.fail(mapping, key, keypath, f"expected a Slurm time string, got {type_name(v)}")
        try:
            parse_time(v)
        except ValueError as exc:
            why = f": {exc}" if str(exc) != v.strip() else ""
            self.fail(mapping, key, keypath, f"invalid time {v!r}{why}",
                      "Slurm formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (quote it in YAML)")
        return v

    def lines(self, mapping, key, v, keypath):
        """Shell lines or paths: a list of strings without NUL (a shell cannot carry it)."""
        items = self.value(mapping, key, "strlist", keypath)
        for i, item in enumerate(items):
            if "\x00" in item:
                self.note(mapping, key, f"{keypath}[{i}]", "contains a NUL byte, which no shell can carry")
        return items

    def paths(self, mapping, key, v, keypath):
        """Folders (module use): one line each."""
        items = self.value(mapping, key, "strlist", keypath)
        for i, item in enumerate(items):
            if not item or any(c in item for c in "\n\r\x00"):
                self.note(mapping, key, f"{keypath}[{i}]", "expected a folder path on one line")
        return items

    def required(self, mapping, key, v, keypath):
        if not isinstance(v, list) or not all(x in REQUIRABLE for x in v):
            self.fail(mapping, key, keypath, f"expected a list of {', '.join(REQUIRABLE)}, got {v!r}",
                      "e.g. required: [account], or [account, time]")
        return tuple(dict.fromkeys(v))

    def hcas(self, mapping, key, v, keypath):
        """A list of HCA names, or `auto`: () (NCCL and UCX find the active HCAs themselves)."""
        if v == "auto":
            return ()
        if not isinstance(v, list) or not all(isinstance(x, str) and x and x.isprintable() for x in v):
            self.fail(mapping, key, keypath, f"expected a list of HCA names or auto, got {v!r}",
                      "e.g. hcas: [mlx5_0, mlx5_1] (see `ibv_devices`), or hcas: auto to let NCCL find them")
        return tuple(v)

    def image(self, mapping, key, v, keypath):
        """An image on one line; `$` only as a job-time variable ($NAME, ${NAME})."""
        if not isinstance(v, str) or not v or any(c in v for c in "\n\r\x00"):
            self.fail(mapping, key, keypath, "expected an image reference or path on one line")
        if "$" in re.sub(JOB_TIME_VAR, "", v):
            self.fail(mapping, key, keypath, f"{v!r}: a '$' that is not $NAME or ${{NAME}}",
                      "name a job-time variable as $NAME or ${NAME} (e.g. $SINGULARITY_ALLOWED_DIR/x.sif)")
        return v

    def regex(self, mapping, key, v, keypath):
        if not isinstance(v, str) or not v:
            self.fail(mapping, key, keypath, f"expected a regular expression, got {type_name(v)}")
        try:
            re.compile(v)
        except re.error as exc:
            self.fail(mapping, key, keypath, f"invalid regular expression {v!r}: {exc}",
                      "e.g. account_pattern: '[a-z]{3}@h100' (quote it in YAML)")
        return v

    def refused(self, mapping, key, v, keypath):
        """refused_options: option name (long, no dashes) -> the centre's reason."""
        if not isinstance(v, dict):
            self.fail(mapping, key, keypath, f"expected a mapping OPTION: reason, got {type_name(v)}",
                      'e.g. refused_options: {mem: "Vista does not accept --mem"}')
        out = []
        for name, why in v.items():
            kp = f"{keypath}.{name}"
            if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9-]*", name):
                self.note(v, name, kp, "expected a long option name without dashes", "e.g. mem, gres, gpus-per-task")
            elif name in _OURS:
                self.note(v, name, kp, f"--{name} is an option slurmtorch sets or needs itself",
                          "refuse only options a job may pass (mem, gres, exclusive, ...)")
            elif not isinstance(why, str) or not why.strip() or not why.isprintable():
                self.note(v, name, kp, "expected the centre's reason, one line of text",
                          f'e.g. {name}: "the centre does not accept --{name}"')
            else:
                out.append((name, why.strip()))
        return tuple(out)

    def envmap(self, mapping, key, v, keypath):
        if not isinstance(v, dict):
            self.fail(mapping, key, keypath, f"expected a mapping NAME: value, got {type_name(v)}")
        out = []
        for name, val in v.items():
            with self.section():
                out.append((name, self._env_value(v, name, val, f"{keypath}.{name}")))
        return tuple(out)

    def _env_value(self, v, name, val, kp) -> str | None:
        if not isinstance(name, str) or not re.fullmatch(_ENV_NAME, name):
            self.fail(v, name, kp, "invalid environment variable name",
                      "names are letters, digits and '_', not starting with a digit")
        if isinstance(val, dict):
            return self._job_time_value(v, name, val, kp)
        if isinstance(val, bool) or not (val is None or isinstance(val, (str, int))):
            self.fail(v, name, kp, f"expected a string, got {type_name(val)}",
                      "quote values such as 'yes', 'true' or '1.0' in YAML")
        self._fits(v, name, val, kp)
        if isinstance(val, str) and _EXPANSION.search(val):
            self.fail(v, name, kp, f"{val!r} would be exported literally: env values are not expanded",
                      _dollar_tip(name, val))
        return None if val is None else str(val)

    def _job_time_value(self, v, name, val, kp) -> str:
        """`NAME: {expand: VALUE}`: VALUE's $NAME/${NAME} expand when the job runs (LUMI's
        TORCH_HOME=/scratch/${SLURM_JOB_ACCOUNT}/...); the rest of it is literal."""
        if set(val) != {"expand"}:
            self.fail(v, name, kp, "expected a string or {expand: VALUE}",
                      f'e.g. {name}: {{expand: "/scratch/$USER"}} (expanded when the job runs)')
        text = val["expand"]
        if not isinstance(text, str):
            self.fail(v, name, kp, f"expected a string after expand:, got {type_name(text)}")
        self._fits(v, name, text, kp)
        if any(c in text for c in "\n\r\x00"):
            self.fail(v, name, kp, "contains a newline or NUL", "one line of text and $NAME or ${NAME}")
        if "$" in re.sub(JOB_TIME_VAR, "", text):
            self.fail(v, name, kp, f"{text!r}: a '$' that is not $NAME or ${{NAME}}",
                      "a job-time value names variables only ($NAME, ${NAME}); no $(...), ${NAME:-...} or "
                      "arithmetic: that is shell code (a node prologue's, or your own script's)")
        return shell.JobTimeWord(text)

    def _fits(self, v, name, val, kp) -> None:
        if val is not None and not fits_env(name, str(val)):
            self.fail(v, name, kp, f"{name}=... is {len(str(val).encode())} bytes; a variable may be at most "
                      f"{MAX_ENV_STRING} bytes with its name",
                      "Linux refuses to start a program with a longer one (execve's MAX_ARG_STRLEN); "
                      "put large data in a file and export its path")

    def pathmap(self, mapping, key, v, keypath):
        """prepend_path/append_path: NAME: [dir, ...] or NAME: dir; literal, ':'-free entries."""
        if not isinstance(v, dict):
            self.fail(mapping, key, keypath, f"expected a mapping NAME: [DIR, ...], got {type_name(v)}")
        out = []
        for name, dirs in v.items():
            kp = f"{keypath}.{name}"
            with self.section():
                if not isinstance(name, str) or not re.fullmatch(_ENV_NAME, name):
                    self.fail(v, name, kp, "invalid environment variable name",
                              "names are letters, digits and '_', not starting with a digit")
                dirs = [dirs] if isinstance(dirs, str) else dirs
                if not isinstance(dirs, list) or not dirs or not all(isinstance(d, str) for d in dirs):
                    self.fail(v, name, kp, "expected a folder or a list of folders")
                for d in dirs:
                    if not d or any(c in d for c in ":\n\r\x00") or "$" in d:
                        self.fail(v, name, kp, f"{d!r} is not one literal folder",
                                  "one entry per folder: no ':', '$' or newline (the value is literal; "
                                  "the existing value is kept by the composition itself)")
                out.append((name, tuple(dirs)))
        return tuple(out)

    def srunargs(self, mapping, key, v, keypath):
        """srun options as `--name[=value]`, or `{--name: null}` to remove an earlier layer's
        (`SrunRemoval`); the ones slurmtorch sets are refused (SRUN_REFUSED)."""
        if not isinstance(v, list) or not all(isinstance(x, (str, dict)) for x in v):
            self.fail(mapping, key, keypath, "expected a list of options (--name[=value], or {--name: null} to "
                      "remove one an earlier layer set)", f"write it as a list: {key}: [{v}]" if isinstance(v, str)
                      else f"e.g. {key}: [--cpu-bind=cores]")
        items = tuple(self._srun_removal(mapping, key, x, f"{keypath}[{i}]") if isinstance(x, dict) else x
                      for i, x in enumerate(v))
        for i, arg in enumerate(items):
            if isinstance(arg, SrunRemoval):
                continue
            problem = option_problem(arg, SRUN_REFUSED, set())
            if problem is None and any(c in arg for c in "\n\r\x00"):
                problem = ("contains a newline or NUL", "one option per entry")
            if problem is not None:
                why, tip = problem
                fix = ("e.g. --gpu-bind=closest (a value joins its option with '=')" if not tip else
                       "leave it out of srun_args" + ("" if tip == "leave it out" else f"; {tip}"))
                self.note(mapping, key, f"{keypath}[{i}]", f"{arg!r}: {why}", fix)
        return items

    def _srun_removal(self, mapping, key, item: dict, kp: str) -> SrunRemoval:
        """`{--NAME: null}`: --NAME (with any value) out of the layers before this one."""
        (name, value), = item.items() if len(item) == 1 else ((None, "?"),)
        if value is not None or not isinstance(name, str) or not re.fullmatch(r"--[a-z][a-z0-9-]*", name):
            self.note(mapping, key, kp, f"{dict(item)!r}: a removal is {{--NAME: null}}",
                      "e.g. srun_args: [{--cpu-bind: null}] takes --cpu-bind=... of an earlier layer out")
        return SrunRemoval(name if isinstance(name, str) else "")

    def containerargs(self, mapping, key, v, keypath):
        """A container runtime's options: a word that is not an option is the value of the option
        before it, written without '=' (--bind, /scratch); any other is half of an option YAML
        split at a comma ([--module=gpu,nccl-plugin]), which the runtime would run as the command."""
        items = self.value(mapping, key, "strlist", keypath)
        for i, arg in enumerate(items):
            if any(c in arg for c in "\n\r\x00") or not arg:
                self.note(mapping, key, f"{keypath}[{i}]", f"{arg!r}: expected one option on one line")
            elif not arg.startswith("-") and (i == 0 or not items[i - 1].startswith("-") or "=" in items[i - 1]):
                whole = f"{items[i - 1]},{arg}" if i and "=" in items[i - 1] else f"--option={arg}"
                self.note(mapping, key, f"{keypath}[{i}]", f"{arg!r} is not an option, nor the value of one",
                          f"quote an option whose value holds a comma: {key}: ['{whole}']")
        return items

    def mpi(self, mapping, key, v, keypath):
        """An srun --mpi plugin name (`srun --mpi=list`), or none for no --mpi at all."""
        if not isinstance(v, str) or not MPI_PLUGIN_RE.fullmatch(v):
            self.fail(mapping, key, keypath, f"invalid srun --mpi plugin {v!r}",
                      f"one of {', '.join(MPI_PLUGINS)} or another name `srun --mpi=list` shows; "
                      f"{NO_MPI_OPTION} writes plain srun (the cluster's MpiDefault)")
        return v

    def threads(self, mapping, key, v, keypath):
        """OMP_NUM_THREADS: a positive number, or auto (each rank's CPU share)."""
        if v != "auto" and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            self.fail(mapping, key, keypath, f"expected a number of threads (1 or more) or auto, got {v!r}",
                      "e.g. omp_num_threads: 8 (as the centre documents it), or auto for each rank's CPU share")
        return v

    def annotations(self, mapping, key, v, keypath):
        """EDF annotations: dotted hook keys (com.hooks.cxi.enabled) to strings, as CE reads them."""
        if not isinstance(v, dict):
            self.fail(mapping, key, keypath, f"expected a mapping key: 'value', got {type_name(v)}")
        out = []
        for name, val in v.items():
            kp = f"{keypath}.{name}"
            if not isinstance(name, str) or not ANNOTATION_KEY_RE.fullmatch(name):
                self.note(v, name, kp, "invalid annotation key",
                          "dotted names of letters, digits, '_' and '-', e.g. com.hooks.cxi.enabled")
            elif not isinstance(val, str) or any(c in val for c in "\n\r\x00"):
                self.note(v, name, kp, f"expected a string on one line, got {type_name(val)}",
                          "CE reads annotation values as strings: quote them, e.g. 'false'")
            else:
                out.append((name, val))
        return tuple(out)

    def rolemap(self, mapping, key, v, keypath):
        if not isinstance(v, dict):
            self.fail(mapping, key, keypath, f"expected a mapping role: image, got {type_name(v)}")
        out = []
        for name, val in v.items():
            kp = f"{keypath}.{name}"
            if name not in ROLE_ORDER:
                self.note(v, name, kp, f"unknown role {name!r}", valid_tip(str(name), list(ROLE_ORDER), "roles"))
            elif not isinstance(val, str) or not val or any(c in val for c in "\n\r\x00"):
                self.note(v, name, kp, "expected an image reference (one line)")
            else:
                out.append((name, val))
        return tuple(out)

    def directives(self, mapping, key, v, keypath):
        """name: value, true for a flag, null (or false) to remove the line an earlier layer set."""
        if not isinstance(v, dict):
            self.fail(mapping, key, keypath, f"expected a mapping name: value, got {type_name(v)}")
        out = []
        for name, val in v.items():
            kp = f"{keypath}.{name}"
            if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9-]*", name):
                self.note(v, name, kp, "invalid directive name",
                          "use the long sbatch option without dashes, e.g. constraint")
                continue
            val = None if val is False else val
            if val is not None and not isinstance(val, (str, int, bool)):
                self.note(v, name, kp, f"expected a string, number or true, got {type_name(val)}")
                continue
            problem: tuple[str, str | None] | None = site_directive_problem(name, val)
            if problem is None and isinstance(val, str) and any(c in val for c in "\n\r\x00"):
                problem = (f"{val!r} contains a newline or NUL, which an #SBATCH line cannot carry", None)
            if problem is not None:
                self.note(v, name, kp, *problem)
                continue
            out.append((name, val if val is True or val is None else str(val)))
        return tuple(out)


def _dollar_tip(name: str, val: str) -> str:
    """The fix for a `$` in a plain env value, fitted to what was written: the variable's own
    value before or after folders is a composition (AWS's and Google's LD_LIBRARY_PATH), any
    other variable a job-time value."""
    own = re.escape(name)
    parts = val.split(":")
    self_ref = [i for i, p in enumerate(parts) if re.fullmatch(rf"\$(\{{{own}\}}|{own})", p)]
    dirs = [p for p in parts if p and not re.fullmatch(rf"\$(\{{{own}\}}|{own})", p)]
    if len(self_ref) == 1 and dirs and not any("$" in d for d in dirs):
        where = "prepend_path" if self_ref[0] == len(parts) - 1 else "append_path" if self_ref[0] == 0 else ""
        if where:
            return (f"keep the job's own value with {where}: {{{name}: [{', '.join(dirs)}]}} (at the same level; "
                    "no stray ':' when it is empty)")
    return f'to expand it when the job runs: {name}: {{expand: "{val}"}}'


def _order(mapping, key) -> tuple[str, int]:
    if isinstance(mapping, Marked) and key in mapping.where:
        file, line = mapping.where[key]
        return file, line or 0
    return "", 0


def _order_first(mapping, path: Path) -> tuple[str, int]:
    """Where a mapping starts (its first key), for a problem of the mapping as a whole."""
    if isinstance(mapping, Marked) and mapping.where:
        return _order(mapping, next(iter(mapping.where)))
    return str(path), 0
