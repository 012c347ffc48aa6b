"""slurmtorch.protocol: each line's writer and parser agree, and the templates use its names."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from slurmtorch import protocol
from slurmtorch import rankfiles

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def test_an_exit_note_reads_back_as_written():
    line = rankfiles.exit_line(3, "node4", -9, 2)
    assert rankfiles.parse_exit(line) == rankfiles.RankExit(3, "node4", -9, 2)
    assert rankfiles.parse_exit(line[:-8]) is None  # torn


def test_a_heartbeat_reads_back_as_written():
    line = rankfiles.beat_line(1795.5, 1790.25, "own", 3, "node4")
    assert rankfiles.parse_beat(line) == rankfiles.Beat(1795.5, 1790.25, "own", 3, "node4")
    assert rankfiles.parse_beat(line.replace("own", "elsewhere")) is None


def test_a_failure_header_and_a_restart_line_are_found_where_written():
    header = rankfiles.failure_header(5, "node2")
    assert rankfiles.FAILURE_HEADER_RE.match(header)["rank"] == "5"
    assert rankfiles.FAILURE_HEADER_RE.match(rankfiles.failure_header("?(RANK=5)", "node2"))["rank"] == "?(RANK=5)"
    log = "old\n" + protocol.start_line(1, ["node3", "node4"], "rank 1 on node2: hung") + "new\n"
    assert [m.group() for m in protocol.START_RE.finditer(log)] == [
        "slurmtorch: start 1 on node3,node4, after: rank 1 on node2: hung"]
    assert re.match(protocol.START_PREFIX, protocol.start_line(12, ["n"], "x"))


def test_a_consequence_is_told_from_a_cause():
    assert rankfiles.is_consequence("Traceback (most recent call last):\nRuntimeError: Connection closed by peer")
    assert not rankfiles.is_consequence("Traceback (most recent call last):\nKeyError: 'x'")


def test_every_slurmtorch_variable_the_templates_name_is_the_protocols():
    names = {v for k, v in vars(protocol).items() if k.isupper() and isinstance(v, str)
             and v.startswith("SLURMTORCH_")}
    used = set()
    for path in (*TEMPLATES.glob("*.j2"), *TEMPLATES.glob("*.sh")):
        used |= set(re.findall(r"SLURMTORCH_[A-Z_]*[A-Z]", path.read_text()))
    # SLURMTORCH_SWEEP_* is named by its prefix (sweeps.sweep_var)
    assert used - names - {protocol.SWEEP_PREFIX.rstrip("_")} == set()


def test_the_templates_write_the_lines_and_files_the_protocol_reads():
    from slurmtorch.submit import sites
    from slurmtorch.submit.launch import render
    from slurmtorch.submit.launch.spec import build_spec

    sys.path.insert(0, str(Path(__file__).resolve().parent / "submit"))
    from test_render import golden_options, required_options

    site = sites.load_site("lumi-g")  # a node prologue, under die's "slurmtorch: error: "
    text = render.render_sbatch(build_spec(site, golden_options("lumi-g", **required_options(site))))
    text += "".join(p.read_text() for p in (*TEMPLATES.glob("*.j2"), *TEMPLATES.glob("*.sh")))
    assert f'die "{protocol.PROLOGUE_FAILED.replace("slurmtorch: error: ", "")} (' in text
    assert "die() { printf 'slurmtorch: error: %s\\n'" in text
    for name in (protocol.EXIT_CODE, protocol.NODE_PROLOGUE_ERR, protocol.started_marker(0).rstrip("0")):
        assert name in text
