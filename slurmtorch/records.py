"""Frozen records: what `@dataclass(frozen=True)` makes, without importing `dataclasses` to make it.

Every rank defines its records (`RankInfo`, `RoleLayout`, ...) before it imports torch, and
`import dataclasses` imports `inspect` (ast, dis, tokenize, enum, re): about 7 ms of every
rank's start on 2 cores, half its whole own work. `record` writes the same methods from the
class's annotations (an `__init__` with the defaults, `__repr__`, `__eq__`, `__hash__`, a
`__setattr__`/`__delattr__` that refuse, `__match_args__`), as `dataclasses` does, by
compiling them once. The class answers `dataclasses.fields/replace/asdict/is_dataclass` as
any frozen dataclass does: its `__dataclass_fields__` is made by `dataclasses` itself, on
first use, by whoever asks for it (`import dataclasses` is then theirs).

Fields are the class's own annotations, in order; a class attribute of the same name is the
default. Only immutable defaults (no default factories, no `__post_init__`): a record is a
value.
"""

from __future__ import annotations

_MUTABLE = (list, dict, set, bytearray)


def record(cls):
    """Class decorator: `cls` as a frozen record (see the module docstring)."""
    names = tuple(cls.__dict__.get("__annotations__", {}))
    defaults = {n: cls.__dict__[n] for n in names if n in cls.__dict__}
    for name, value in defaults.items():
        if isinstance(value, _MUTABLE):
            raise ValueError(f"mutable default {type(value).__name__} for field {name!r} of a record")
    if "__post_init__" in cls.__dict__:
        raise TypeError("records have no __post_init__")
    seen_default = False
    params = []
    for name in names:
        if name in defaults:
            seen_default = True
            params.append(f"{name}=_d_{name}")
        elif seen_default:
            raise TypeError(f"non-default field {name!r} follows a default one")
        else:
            params.append(name)
    # Only __init__ is written as text (for its real signature and Python's own argument
    # errors); the rest are shared functions over the field names. Parsing text is the costly
    # part of making a record: ~1 ms for RankInfo's 19 fields when every method was text.
    # exec of the text, not of compile(): the compile() builtin's first call in a process
    # costs ~0.8 ms more (measured, CPython 3.11).
    scope = {"_fill": _fill, **{f"_d_{n}": v for n, v in defaults.items()}}
    exec(f"def __init__(self, {', '.join(params)}):\n    _fill(self, ({''.join(n + ', ' for n in names)}))\n",
         scope)  # noqa: S102 - our own text
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {**cls.__dict__.get("__annotations__", {}), "return": None}
    methods = {"__init__": init, "__repr__": _repr, "__eq__": _eq, "__hash__": _hash,
               "__setattr__": _refuse_set, "__delattr__": _refuse_del}
    for name, fn in methods.items():
        setattr(cls, name, fn)
    cls.__match_args__ = names
    cls.__dataclass_fields__ = _Fields()
    return cls


def _fill(self, values: tuple) -> None:
    for name, value in zip(type(self).__match_args__, values):
        object.__setattr__(self, name, value)


def _values(self) -> tuple:
    return tuple(getattr(self, name) for name in type(self).__match_args__)


def _repr(self) -> str:
    fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in type(self).__match_args__)
    return f"{type(self).__qualname__}({fields})"


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


class _Fields:
    """`__dataclass_fields__`, made by `dataclasses` from the record's annotations on first use."""

    def __get__(self, obj, owner):
        import dataclasses  # lazy: only code that introspects a record pays for the module

        twin = type(owner.__name__, (), {"__annotations__": dict(owner.__dict__["__annotations__"]),
                                         "__module__": owner.__module__,
                                         **{n: owner.__dict__[n] for n in owner.__match_args__
                                            if n in owner.__dict__}})
        fields = dataclasses.dataclass(frozen=True)(twin).__dataclass_fields__
        type.__setattr__(owner, "__dataclass_fields__", fields)
        type.__setattr__(owner, "__dataclass_params__", twin.__dataclass_params__)
        return fields
