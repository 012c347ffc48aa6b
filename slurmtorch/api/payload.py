"""What the ranks get for a `run()`: a file and its arguments, or a pickled call, and
when a call cannot be pickled, the piece of it that cannot, named as the user wrote it.

cloudpickle ships `__main__` (scripts, notebooks) by value; a function from a module
that is not installed (a test file, a module next to a notebook) is sent by value too,
with the rest of its package, rather than as an import the ranks might fail.
"""

from __future__ import annotations

import functools
import inspect
import os
import site
import sys
import sysconfig
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurmtorch.errors import SlurmtorchError, SpecError
from slurmtorch.options import split_script


def prepare(target: Any, args: tuple, kwargs: dict) -> tuple[dict, bytes | None, str]:
    """(meta, payload, name) for a function or a file; raises before anything is written."""
    if isinstance(target, (str, os.PathLike)):
        if kwargs:
            raise SpecError(f"a file takes command-line arguments only, got keyword arguments {sorted(kwargs)}",
                            tip='pass them as strings, e.g. run("train.py", "--lr", "0.1")')
        script, argv = split_script([os.fspath(target), *(str(a) for a in args)], None)
        assert script is not None  # without a module, split_script returns the SCRIPT
        return {"kind": "file", "script": script, "args": argv}, None, Path(script).name
    if not callable(target):
        raise SpecError(f"run() takes a function or the path of a Python file, got {type(target).__name__}")
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    meta = {"kind": "function", "name": name, "python": list(sys.version_info[:2])}
    return meta, pickle_call(target, args, kwargs), name


def pickle_call(fn: Callable, args: tuple, kwargs: dict) -> bytes:
    """cloudpickle `(fn, args, kwargs)`, or a SpecError naming what cannot be sent."""
    try:
        import cloudpickle  # lazy: an optional extra (slurmtorch[api]) that a file's run never needs
    except ImportError:
        raise SlurmtorchError("running a function needs cloudpickle",
                              tip="pip install 'slurmtorch[api]' (or pass a file: run('train.py', ...))") from None
    package = _by_value_package(fn)
    registered = package is not None and package.__name__ in cloudpickle.list_registry_pickle_by_value()
    if package is not None and not registered:
        cloudpickle.register_pickle_by_value(package)
    try:
        try:
            return cloudpickle.dumps((fn, args, kwargs))
        except Exception as exc:  # noqa: BLE001 - reported with its culprit below
            name = getattr(fn, "__qualname__", None) or type(fn).__name__
            candidates = [(name, fn), *[(f"argument {i}", a) for i, a in enumerate(args)],
                          *[(f"keyword argument {k!r}", v) for k, v in kwargs.items()]]
            found = None
            for label, value in candidates:
                try:
                    cloudpickle.dumps(value)
                except Exception as inner:  # noqa: BLE001
                    found = _culprit(value, label, cloudpickle.dumps) or (label, value, inner)
                    break
            label, value, err = found or (name, fn, exc)
            raise SpecError(
                f"cannot send {name} to the ranks: {label} ({type(value).__module__}.{type(value).__qualname__}) "
                f"cannot be pickled: {err}",
                tip="create it inside the function (each rank opens its own lock, file or socket), "
                    "or pass what is needed to build it") from None
    finally:
        if package is not None and not registered:
            cloudpickle.unregister_pickle_by_value(package)


def _installed(module) -> bool:
    """Whether a module comes from the interpreter's own library folders (importable on the ranks)."""
    path = getattr(module, "__file__", None)
    if not path:
        return True  # built-in or namespace package: leave it to cloudpickle
    roots = [*site.getsitepackages(), site.getusersitepackages()]
    roots += [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    path = os.path.realpath(path)
    return any(path.startswith(os.path.realpath(r) + os.sep) for r in roots if r)


def _by_value_package(fn: Any):
    """The top-level package to ship by value: user code the ranks may not be able to import
    (see the module docstring). Installed packages travel by reference, as imports."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)
    name = getattr(fn, "__module__", None) or type(fn).__module__
    if not name or name == "__main__" or name not in sys.modules:
        return None
    top = name.partition(".")[0]
    module = sys.modules.get(top)
    if module is None or top == "slurmtorch" or _installed(module):
        return None
    return module


def _code_names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _code_names(const)
    return names


def _parts(obj: Any, label: str) -> list[tuple[str, Any]]:
    """What `obj` drags into its pickle, each with a name a user recognises."""
    if isinstance(obj, functools.partial):
        return ([(f"{label} (partial's function)", obj.func)]
                + [(f"argument {i} of {label}", a) for i, a in enumerate(obj.args)]
                + [(f"keyword argument {k!r} of {label}", v) for k, v in obj.keywords.items()])
    if inspect.ismethod(obj):
        return [(f"the object {label} is bound to", obj.__self__), *_parts(obj.__func__, label)]
    if isinstance(obj, types.FunctionType):
        qual = obj.__qualname__
        out = []
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
            try:
                out.append((f"variable {name!r} captured by {qual}", cell.cell_contents))
            except ValueError:  # an empty cell
                pass
        for name in sorted(_code_names(obj.__code__)):
            if name in obj.__globals__ and not isinstance(obj.__globals__[name], types.ModuleType):
                out.append((f"global {name!r} used by {qual}", obj.__globals__[name]))
        for i, value in enumerate(obj.__defaults__ or ()):
            out.append((f"default argument {i} of {qual}", value))
        for name, value in (obj.__kwdefaults__ or {}).items():
            out.append((f"default of keyword {name!r} of {qual}", value))
        return out
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        return [(f"attribute {k!r} of {label}", v) for k, v in attrs.items()]
    return []


def _culprit(obj: Any, label: str, dumps: Callable[[Any], bytes], depth: int = 0) -> tuple[str, Any, Exception] | None:
    """The innermost named piece of `obj` that does not pickle (None when all do)."""
    for part_label, value in _parts(obj, label):
        try:
            dumps(value)
        except Exception as exc:  # noqa: BLE001 - any pickling failure names a culprit
            if depth < 3:
                deeper = _culprit(value, part_label, dumps, depth + 1)
                if deeper is not None:
                    return deeper
            return part_label, value, exc
    return None
