"""Frozen records: what `@dataclass(frozen=True)` makes, without what it costs to make it.

Every rank defines its records (`RankInfo`, `RoleLayout`, ...) before it imports torch, and
`import dataclasses` imports `inspect` (ast, dis, tokenize, enum, re): about 7 ms of every
rank's start on 2 cores, half its whole own work. A dry run defines the site model, the
`Options` and the `JobSpec`, and `dataclass` compiles six methods of each from text: ~3 ms
for `Options`' 60 fields alone.

`record` gives a class the methods a frozen dataclass has (an `__init__` with the defaults,
`__repr__`, `__eq__`, `__hash__`, a `__setattr__`/`__delattr__` that refuse,
`__match_args__`); only `__init__` is compiled, the rest are shared functions over the field
names. The class answers `dataclasses.fields/replace/asdict/is_dataclass` as any frozen
dataclass does: its `__dataclass_fields__` is made by `dataclasses` itself on first use, by
whoever asks (`import dataclasses` is then theirs). Without that import, `fields` lists a
record's fields and `replace` is `dataclasses.replace`.

Fields are the class's own annotations, in order; a class attribute of the same name is the
default, or `field(default=..., metadata=...)` for a default with metadata. Only immutable
defaults (no default factories, no `__post_init__`): a record is a value.
"""

from __future__ import annotations

_MUTABLE = (list, dict, set, bytearray)


class Field:
    """One field of a record: `name`, `type` (its annotation, a string under postponed
    annotations), `default` (`MISSING` when it has none) and `metadata`, as a
    `dataclasses.Field` shows them."""

    __slots__ = ("name", "type", "default", "metadata")

    def __init__(self, default, metadata=None, name: str = "", type=None):  # noqa: A002 - dataclasses' name
        self.name, self.type, self.default = name, type, default
        self.metadata = dict(metadata or {})  # read, never written

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, type={self.type!r}, default={self.default!r})"


MISSING = object()


def field(*, default=MISSING, metadata=None) -> Field:
    """A default with metadata (`dataclasses.field(default=..., metadata=...)`)."""
    return Field(default, metadata)


def record(cls):
    """Class decorator: `cls` as a frozen record (see the module docstring)."""
    if any("__record_fields__" in base.__dict__ for base in cls.__mro__[1:]):
        raise TypeError(f"{cls.__qualname__}: a record's fields are its own annotations; it cannot extend a record")
    annotations = cls.__dict__.get("__annotations__", {})
    own = []
    for name, kind in annotations.items():
        value = cls.__dict__.get(name, MISSING)
        spec = value if isinstance(value, Field) else Field(value)
        spec.name, spec.type = name, kind
        if isinstance(spec.default, _MUTABLE):
            raise ValueError(f"mutable default {type(spec.default).__name__} for field {name!r} of a record")
        if spec.default is MISSING and own and own[-1].default is not MISSING:
            raise TypeError(f"non-default field {name!r} follows a default one")
        if isinstance(value, Field):
            if spec.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, spec.default)  # as dataclasses: the class attribute is the default
        own.append(spec)
    if "__post_init__" in cls.__dict__:
        raise TypeError("records have no __post_init__")
    names = tuple(f.name for f in own)
    params = ", ".join(f.name if f.default is MISSING else f"{f.name}=_d_{f.name}" for f in own)
    # __init__ is written as text for its real signature and Python's own argument errors.
    # exec of the text, not of compile(): the builtin compile()'s first call in a process
    # costs ~0.8 ms more (measured, CPython 3.11).
    scope = {"_fill": _fill, **{f"_d_{f.name}": f.default for f in own if f.default is not MISSING}}
    exec(f"def __init__(self, {params}):\n    _fill(self, ({''.join(n + ', ' for n in names)}))\n",
         scope)  # noqa: S102 - our own text
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {**annotations, "return": None}
    methods = {"__init__": init, "__repr__": _repr, "__eq__": _eq, "__hash__": _hash,
               "__setattr__": _refuse_set, "__delattr__": _refuse_del}
    for name, fn in methods.items():
        setattr(cls, name, fn)
    cls.__match_args__ = names
    cls.__record_fields__ = tuple(own)
    cls.__dataclass_fields__ = _DataclassFields()
    return cls


def fields(record_or_class) -> tuple[Field, ...]:
    """A record's fields, in order (`dataclasses.fields` without the import)."""
    return record_or_class.__record_fields__


def replace(obj, /, **changes):
    """`dataclasses.replace(obj, **changes)` for a record, without importing `dataclasses`."""
    names = type(obj).__match_args__
    unknown = sorted(set(changes) - set(names))
    if unknown:
        raise TypeError(f"{type(obj).__qualname__} has no field {unknown[0]!r}")
    return type(obj)(**{name: changes[name] if name in changes else getattr(obj, name) for name in names})


def _fill(self, values: tuple) -> None:
    for name, value in zip(type(self).__match_args__, values):
        object.__setattr__(self, name, value)


def _values(self) -> tuple:
    return tuple(getattr(self, name) for name in type(self).__match_args__)


def _repr(self) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in type(self).__match_args__)
    return f"{type(self).__qualname__}({shown})"


def _eq(self, other):
    if other.__class__ is self.__class__:
        return _values(self) == _values(other)
    return NotImplemented


def _hash(self) -> int:
    return hash(_values(self))


def _refuse_set(self, name, value):
    # As a frozen dataclass: nothing at all on a record itself, no field on a subclass of one
    # (which may set attributes of its own).
    if "__match_args__" in type(self).__dict__ or name in type(self).__match_args__:
        raise _frozen(name)
    object.__setattr__(self, name, value)


def _refuse_del(self, name):
    if "__match_args__" in type(self).__dict__ or name in type(self).__match_args__:
        raise _frozen(name)
    object.__delattr__(self, name)


def _frozen(name: str) -> AttributeError:
    import dataclasses  # lazy: only a write to a record pays for the module, to raise its error

    return dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


class _DataclassFields:
    """`__dataclass_fields__`, made by `dataclasses` from the record's fields on first use."""

    def __get__(self, obj, owner):
        import dataclasses  # lazy: only code that introspects a record as a dataclass pays for the module

        namespace = {"__annotations__": {f.name: f.type for f in owner.__record_fields__},
                     "__module__": owner.__module__}
        for f in owner.__record_fields__:
            if f.metadata:
                namespace[f.name] = dataclasses.field(default=f.default, metadata=dict(f.metadata)) \
                    if f.default is not MISSING else dataclasses.field(metadata=dict(f.metadata))
            elif f.default is not MISSING:
                namespace[f.name] = f.default
        twin = dataclasses.dataclass(frozen=True)(type(owner.__name__, (), namespace))
        type.__setattr__(owner, "__dataclass_fields__", twin.__dataclass_fields__)
        type.__setattr__(owner, "__dataclass_params__", twin.__dataclass_params__)
        return twin.__dataclass_fields__
