"""Reading the Tofino compiler's reports (dlcp.p4.tofino_report), without the compiler.

What is tested here is the reader's own logic and its errors. Its reading of
real report files runs in test_tofino.py wherever the compiler is installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlcp.p4 import tofino_report
from dlcp.p4.tofino_report import Report, ReportError, Resource


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
