"""Site files as YAML: safe, plain scalars, line marks, no duplicate keys.

PyYAML's safe loader with three changes, so an admin's typo is caught on load and
named by file and line: only plain decimal numbers, bools and null are implicit
types (a Slurm time like `2:00:00` stays text), every mapping remembers the line of
each key, and a key given twice is an error. `extends:` merges with `deep_merge`.
The user's clusters file (`slurmtorch.remote.clusters`) is read the same way: a `Kind`
names the file in messages and picks the error raised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from slurmtorch.errors import SiteError, SlurmtorchError


@dataclass(frozen=True)
class Kind:
    """What a YAML file is to its reader: its name in messages and the error it raises."""

    noun: str
    error: type[SlurmtorchError]


SITE = Kind("site file", SiteError)


class Marked(dict):
    """A mapping that remembers where each key came from: (file, line)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.where: dict[Any, tuple[str, int | None]] = {}


def _plain_resolvers() -> dict[Any, list[tuple[str, re.Pattern]]]:
    """Implicit scalar types for site files: plain decimal ints and floats, bools, null, `<<`.

    PyYAML resolves YAML 1.1's other forms too, and silently: `time: 2:00:00` is the
    sexagesimal int 7200 (then read as minutes: five days), `0755` is 493, `0x1F` is 31
    and `1_000` is 1000; a date becomes a datetime. Here those stay the strings the
    admin typed, which is what a Slurm time, an env value or a directive wants.
    """
    keep = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:null", "tag:yaml.org,2002:merge")
    table: dict[Any, list[tuple[str, re.Pattern]]] = {}
    for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items():
        kept = [(tag, rx) for tag, rx in resolvers if tag in keep]
        if kept:
            table[first] = kept
    for tag, rx, firsts in (
        ("tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), "-+0123456789"),
        ("tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$"),
         "-+0123456789."),
    ):
        for first in firsts:
            table.setdefault(first, []).append((tag, rx))
    return table


class _SiteConstruction:
    """Loader mixin: plain scalar types, line numbers recorded, duplicate keys refused."""

    yaml_implicit_resolvers = _plain_resolvers()
    kind = SITE  # set per file by the reader

    def construct_mapping(self, node, deep=False):
        self.flatten_mapping(node)
        out = Marked()
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise self.kind.error(
                    f"{self.name}:{key_node.start_mark.line + 1}: a mapping key must be a plain value"
                ) from None
            if key in out and not getattr(key_node, "_merged", False):
                raise self.kind.error(
                    f"{self.name}:{key_node.start_mark.line + 1}: duplicate key {key!r}",
                    tip="each key may appear once per mapping",
                )
            out[key] = self.construct_object(value_node, deep=True)
            out.where[key] = (self.name, key_node.start_mark.line + 1)
        return out

    def flatten_mapping(self, node):
        # Keys brought in by `<<: *anchor` may be overridden without counting as duplicates.
        before = {id(k) for k, _ in node.value}
        super().flatten_mapping(node)
        for k, _ in node.value:
            if id(k) not in before:
                k._merged = True
        # An explicit key after a merged one wins; drop earlier merged duplicates.
        seen: dict[Any, int] = {}
        kept = []
        for k, v in reversed(node.value):
            # A complex key (a mapping or a list) has a list as its value: not hashable;
            # construct_mapping rejects it with a clear line right after.
            ident = k.value if isinstance(k, yaml.ScalarNode) else id(k)
            if ident in seen and getattr(k, "_merged", False):
                continue
            seen[ident] = 1
            kept.append((k, v))
        node.value = list(reversed(kept))


class _Loader(_SiteConstruction, yaml.SafeLoader):
    """The pure-Python loader: slower, but its syntax errors say the most."""


# libyaml's parser is ~20x faster on our files; its marks are the same, its messages
# terser, so a file it refuses is parsed again by _Loader for the error.
_CLoader = type("_CLoader", (_SiteConstruction, yaml.CSafeLoader), {}) if hasattr(yaml, "CSafeLoader") else None

for _cls in (_Loader, _CLoader):
    if _cls is not None:
        _cls.add_constructor("tag:yaml.org,2002:map", lambda loader, node: loader.construct_mapping(node))


# Site files are a handful of levels deep. PyYAML's composer recurses once per level: 5000
# nested brackets raised RecursionError and 30000 overflowed libyaml's C stack (exit 139,
# no message). libyaml's event parser keeps its own stack, so depth is counted there first.
MAX_DEPTH = 64


def check_depth(text: str, path: Path, kind: Kind = SITE) -> None:
    """An error for a document nested deeper than MAX_DEPTH; syntax errors are left to the load."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_CLoader or _Loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    assert event.start_mark is not None  # the parser marks every event it makes
                    raise _too_deep(path, event.start_mark.line + 1, kind)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError as exc:
        # PyYAML 6.0.4's libyaml has a nesting limit of its own, met while scanning a flow
        # collection's brackets before any event of ours: the same problem, said our way
        # (the pure parser that words other syntax errors would recurse past Python's limit).
        if "maximum nesting depth" in str(exc):
            mark = getattr(exc, "problem_mark", None)
            raise _too_deep(path, mark.line + 1 if mark is not None else 1, kind) from None
        return


def _too_deep(path: Path, line: int, kind: Kind) -> SlurmtorchError:
    return kind.error(f"{path}:{line}: nested more than {MAX_DEPTH} levels deep",
                      tip=f"a {kind.noun} is a few levels of mappings; look for runaway brackets")


def read_yaml(path: Path) -> Marked:
    """One site file (not merged) as marked mappings; any problem is a one-line SiteError."""
    data = read_document(path, SITE)
    if data is None:
        data = Marked()
    if not isinstance(data, dict):
        raise SiteError(f"{path}: a site file must be a mapping of keys, not {type(data).__name__}")
    return data


def read_document(path: Path, kind: Kind) -> Any:
    """One YAML file's document, whatever its shape (None when empty); any problem is one line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise kind.error(f"cannot read {kind.noun} {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise kind.error(f"{path}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})",
                         tip=f"save the {kind.noun} as UTF-8") from None
    check_depth(text, path, kind)
    if _CLoader is None:
        return parse_pure(text, path, kind)
    loader = _CLoader(text)
    loader.name = str(path)
    loader.kind = kind
    try:
        return loader.get_single_data()
    except yaml.YAMLError:
        return parse_pure(text, path, kind)
    finally:
        loader.dispose()


def parse_pure(text: str, path: Path, kind: Kind = SITE) -> Any:
    """Parse with the pure-Python loader; its YAML errors become one-line errors of `kind`."""
    try:
        # The reader already refuses NUL and other non-printable characters here.
        loader = _Loader(text)
    except yaml.reader.ReaderError as e:
        raise kind.error(f"{path}: character {e.character:#06x} at offset {e.position} is not allowed in YAML",
                         tip=f"remove control characters from the {kind.noun}") from None
    loader.name = str(path)
    loader.kind = kind
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise kind.error(
            f"{path}{line}: YAML syntax error: {e.problem or e.context}",
            tip="check indentation and quoting near that line",
        ) from None
    except yaml.YAMLError as e:
        raise kind.error(f"{path}: YAML error: {e}") from None
    finally:
        loader.dispose()


def deep_merge(base: dict, over: dict) -> Marked:
    """`over` merged onto `base`: mappings merge recursively, anything else is replaced."""
    out = Marked()
    for src in (base, over):
        for key, value in src.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                value = deep_merge(out[key], value)
            out[key] = value
            if isinstance(src, Marked) and key in src.where:
                out.where[key] = src.where[key]
    return out


def where(mapping: Any, key: Any, fallback: Path) -> str:
    """`file:line` of `key` in a mapping read from YAML, else `fallback`."""
    if isinstance(mapping, Marked) and key in mapping.where:
        file, line = mapping.where[key]
        return f"{file}:{line}" if line else file
    return str(fallback)


def type_name(v: Any) -> str:
    """How an error names a YAML value's type."""
    return {dict: "a mapping", Marked: "a mapping", list: "a list", type(None): "null"}.get(type(v), type(v).__name__)
