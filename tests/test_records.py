"""`slurmtorch.records`: a record behaves as the frozen dataclass it replaces (pure)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import subprocess
import sys

import pytest

from slurmtorch.bootstrap.rankinfo import RankInfo
from slurmtorch.records import field, fields, record, replace
from slurmtorch.roles import parse_roles


@record
class Point:
    """A record."""

    x: int
    y: str
    tags: tuple[str, ...] = ()
    note: str | None = None


@dataclasses.dataclass(frozen=True)
class Twin:
    """The same fields as a frozen dataclass."""

    x: int
    y: str
    tags: tuple[str, ...] = ()
    note: str | None = None


def test_a_record_is_built_compared_hashed_and_shown_as_a_frozen_dataclass():
    p, t = Point(1, "a", tags=("t",)), Twin(1, "a", tags=("t",))
    assert repr(p) == repr(t).replace("Twin", "Point")
    assert p == Point(1, "a", ("t",)) and p != Point(2, "a", ("t",)) and p != t
    assert hash(p) == hash(Point(1, "a", ("t",)))
    assert str(inspect.signature(Point)) == str(inspect.signature(Twin))
    assert Point.__match_args__ == Twin.__match_args__
    match p:
        case Point(1, "a"):
            pass
        case _:
            pytest.fail("positional match")


@pytest.mark.parametrize("args, kwargs", [((1,), {}), ((1, "a"), {"x": 2}), ((1, "a", (), None, 5), {}),
                                          ((1, "a"), {"nope": 1})])
def test_wrong_arguments_fail_as_they_do_for_the_dataclass(args, kwargs):
    with pytest.raises(TypeError) as ours:
        Point(*args, **kwargs)
    with pytest.raises(TypeError) as theirs:
        Twin(*args, **kwargs)
    assert str(ours.value).replace("Point", "Twin") == str(theirs.value)


def test_a_record_is_frozen_and_answers_the_dataclasses_functions():
    p = Point(1, "a")
    for write in (lambda: setattr(p, "x", 2), lambda: setattr(p, "other", 2), lambda: delattr(p, "x")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            write()
    assert dataclasses.is_dataclass(p) and dataclasses.is_dataclass(Point)
    assert [f.name for f in dataclasses.fields(Point)] == ["x", "y", "tags", "note"]
    assert dataclasses.replace(p, y="b") == Point(1, "b")
    assert dataclasses.asdict(p) == {"x": 1, "y": "a", "tags": (), "note": None}
    assert pickle.loads(pickle.dumps(p)) == p and copy.deepcopy(p) == p and copy.copy(p) == p


def test_rank_info_and_role_layout_are_records_a_script_can_introspect():
    info = RankInfo(rank=1, world_size=2, local_rank=1, local_world_size=2, node_rank=0, num_nodes=1,
                    master_addr="h", master_port=1, hostname="h", source="env", layout=parse_roles("master=1,ps=1"))
    assert dataclasses.asdict(info)["layout"] == {"roles": (("master", 1), ("ps", 1))}
    assert dataclasses.replace(info, rank=0).rank == 0 and info.rank == 1


def test_fields_carry_their_metadata_with_or_without_dataclasses():
    @record
    class Flagged:
        plain: int = 0
        flagged: str | None = field(default=None, metadata={"flags": ("--x",)})

    ours = {f.name: (f.type, f.default, dict(f.metadata)) for f in fields(Flagged)}
    assert ours == {"plain": ("int", 0, {}), "flagged": ("str | None", None, {"flags": ("--x",)})}
    assert Flagged.flagged is None and Flagged().flagged is None  # the class attribute is the default
    theirs = {f.name: (f.type, f.default, dict(f.metadata)) for f in dataclasses.fields(Flagged)}
    assert theirs == ours


def test_replace_without_dataclasses_is_dataclasses_replace():
    p = Point(1, "a", ("t",))
    assert replace(p, note="n") == dataclasses.replace(p, note="n") == Point(1, "a", ("t",), "n")
    with pytest.raises(TypeError, match="no field 'nope'"):
        replace(p, nope=1)


def test_mutable_defaults_and_misordered_fields_are_refused():
    with pytest.raises(ValueError, match="mutable default"):
        record(type("Bad", (), {"__annotations__": {"x": "list"}, "x": []}))
    with pytest.raises(TypeError, match="non-default field 'y'"):
        record(type("Bad", (), {"__annotations__": {"x": "int", "y": "int"}, "x": 1}))
    with pytest.raises(TypeError, match="cannot extend a record"):
        record(type("Sub", (Point,), {"__annotations__": {"z": "int"}}))


def test_defining_records_imports_neither_dataclasses_nor_inspect():
    code = ("import sys; import slurmtorch.bootstrap.rankinfo, slurmtorch.bootstrap.mpiworld; "
            "print(sorted(m for m in ('dataclasses', 'inspect') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"
