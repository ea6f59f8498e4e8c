"""Reading the Tofino compiler's reports (dlcp.testbed.toolchain.tofino_report), without the compiler.

What is tested here is the reader's own logic and its errors, and its reading of
real reports: ``fixtures/tofino-9.13.4`` holds, from one compile of
``p4src/tna/dlcp.p4`` by p4c-barefoot 9.13.4 (2026-11-23), ``resources.json``
cut to its ``resources.mau`` part, ``context.json`` cut to each table's name,
gress and stage numbers, and the stage table of the compiler's own
``mau.resources.log``, which the reader's figures must equal. Full compiles run in
test_tofino.py wherever the compiler is installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlcp.testbed.toolchain import tofino_report
from dlcp.testbed.toolchain.tofino_report import Report, ReportError, Resource


def _report(ingress: tuple[int, ...], egress: tuple[int, ...]) -> Report:
    return Report("pipe", 12, {"ingress": ingress, "egress": egress}, (Resource("SRAM", 30, 960),))


def test_stages_used_reach_the_last_stage() -> None:
    report = _report((0, 1, 2, 4), ())
    assert report.stages_used("ingress") == 5  # stage 3 is empty but still passed through
    assert report.stages_used("egress") == 0
    assert report.stages_used("ghost") == 0


def test_table_and_dict() -> None:
    report = _report((0, 1), (0,))
    text = report.table()
    assert "ingress 2 of 12, egress 1 of 12" in text
    assert "SRAM" in text and "960" in text and "3.1" in text
    d = report.as_dict()
    assert d["stages_used"] == {"ingress": 2, "egress": 1}
    assert json.loads(json.dumps(d)) == d


def test_missing_output(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no pipeline folder"):
        tofino_report.read(tmp_path)


def test_missing_resources_json_is_named(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    pipe.mkdir()
    (pipe / "context.json").write_text(json.dumps({"tables": []}))
    with pytest.raises(ReportError, match=r"resources\.json: missing .*-g"):
        tofino_report.read(tmp_path)


@pytest.mark.parametrize("bad", [[], {"tables": {}}, {"tables": [{"name": "t"}]}])
def test_context_of_another_form_is_refused(bad: object) -> None:
    with pytest.raises(ReportError):
        tofino_report.stages_from_context(bad)


@pytest.mark.parametrize("bad", [{}, {"resources": {"mau": {"nStages": 12}}}, {"resources": []}])
def test_resources_of_another_form_are_refused(bad: object) -> None:
    with pytest.raises(ReportError):
        tofino_report.resources_from_json(bad)


def test_stage_numbers_at_any_depth_and_not_phase0() -> None:
    # The nesting of bf-asm's writers (tables.cpp, gateway.cpp, phase0.cpp): a match table's stages under
    # match_attributes, a gateway's directly, phase 0 (the parser's port metadata) as stage -1.
    context = {
        "tables": [
            {"direction": "ingress", "match_attributes": {"stage_tables": [{"stage_number": 3}, {"stage_number": 4}]}},
            {"direction": "ingress", "stage_tables": [{"stage_number": 0}]},
            {"direction": "ingress", "match_attributes": {"stage_tables": [{"stage_number": -1}]}},
            {"direction": "egress", "stage_tables": [{"stage_number": 0}]},
        ]
    }
    assert tofino_report.stages_from_context(context) == {"ingress": (0, 3, 4), "egress": (0,)}


FIXTURE = Path(__file__).parent / "fixtures" / "tofino-9.13.4"
# The reader's resource names -> the compiler's own column in mau.resources.log.
LOG_COLUMNS = {
    "SRAM": "SRAM",
    "TCAM": "TCAM",
    "map RAM": "Map RAM",
    "gateway": "Gateway",
    "logical table ID": "Logical TableID",
    "stateful ALU": "Meter ALU",
    "statistics ALU": "Stats ALU",
    "exact xbar byte": "Exact Match Input xbar",
    "ternary xbar byte": "Ternary Match Input xbar",
    "hash bit": "Hash Bit",
    "VLIW instruction": "VLIW Instr",
    "action bus byte": "Action Data Bus Bytes",
}


def _log_table() -> tuple[list[str], list[list[str]]]:
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in (FIXTURE / "mau.resources.totals.txt").read_text().splitlines()
        if line.startswith("|")
    ]
    return rows[0], rows[1:]


def test_a_real_compile_reads_as_the_compiler_counts_it() -> None:
    header, rows = _log_table()
    stage_rows = [r for r in rows if r[0].isdigit()]
    totals = next(r for r in rows if r[0] == "Totals")
    n_stages, resources = tofino_report.resources_from_json(json.loads((FIXTURE / "resources.json").read_text()))
    assert n_stages == len(stage_rows) == 12
    got = {r.name: r.used for r in resources}
    assert set(got) == set(LOG_COLUMNS)
    for name, column in LOG_COLUMNS.items():
        assert got[name] == int(totals[header.index(column)]), name
    stages = tofino_report.stages_from_context(json.loads((FIXTURE / "context.json").read_text()))
    report = Report("pipe", n_stages, stages, resources)
    # That compile placed the ingress in stages 0-8 and the egress in stage 0 (docs/results.md).
    assert (report.stages_used("ingress"), report.stages_used("egress")) == (9, 1)
    assert "ingress 9 of 12, egress 1 of 12" in report.table()
