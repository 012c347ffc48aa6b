"""`cli._common.with_options`: a verb's options come from `Options` fields; a field the
table cannot offer is refused by name when the verb is declared, never a bare KeyError."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import pytest

from slurmtorch.cli import _common


@dataclass(frozen=True)
class Extended:
    nodes: int | None = field(default=None, metadata={"flags": ("--nodes",), "help": "h", "metavar": None})
    ratio: complex | None = field(default=None, metadata={"flags": ("--ratio",), "help": "h", "metavar": None})
    python: str = "python3"  # no flags: not a CLI option


def verb():
    """A fresh verb function (with_options rewrites the signature of the one it is given)."""
    def run(ctx, script_and_args, **given):
        return 0
    return run


@pytest.fixture
def extended(monkeypatch):
    monkeypatch.setattr(_common, "_FIELDS", {f.name: f for f in fields(Extended)})


def test_a_field_type_the_cli_has_no_option_type_for_is_named_with_the_fix(extended):
    with pytest.raises(TypeError, match=r"Options\.ratio is 'complex \| None'.*_CLI_TYPES"):
        _common.with_options("nodes", "ratio")(verb())


@pytest.mark.parametrize("name", ["python", "nodez"])
def test_a_name_that_is_no_cli_option_is_named(extended, name):
    with pytest.raises(TypeError, match=f"Options.{name} is not a CLI option"):
        _common.with_options(name)(verb())


def test_every_option_the_verbs_declare_has_a_cli_type():
    offered = [f.name for f in fields(_common.Options) if "flags" in f.metadata]
    assert offered and _common.with_options(*offered)(verb())


def test_every_front_end_reads_its_options_off_the_one_table():
    """An #SBATCH option passed on is offered by `sbatch` and taken by the Distributor, and
    each of the Distributor's keywords is a field of the table: no front end lists them."""
    from slurmtorch.api import distributor
    from slurmtorch.cli.sbatch import SBATCH_OPTIONS
    from slurmtorch.submit.launch import sbatch_options
    from slurmtorch.options import API_KEYWORDS, SBATCH_PASSED_ON, Options

    names = {f.name for f in fields(Options)}
    assert sbatch_options.PASSED_ON is SBATCH_PASSED_ON and distributor.SCHEDULER_OPTIONS is API_KEYWORDS
    assert set(SBATCH_PASSED_ON) <= set(SBATCH_OPTIONS) & set(API_KEYWORDS)
    assert set(API_KEYWORDS) <= names and set(distributor.PASSED_ON) >= set(SBATCH_PASSED_ON)
    assert SBATCH_PASSED_ON["mail_user"] == "mail-user" and "partition" in API_KEYWORDS
