"""Compiling the P4 programs: v1model with p4c-bm2-ss, TNA with p4test (the Tofino compiler: test_tofino.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlcp.p4 import p4info, paths
from dlcp.testbed.toolchain import build, tools

pytestmark = pytest.mark.p4c


def _need(*tool: str) -> None:
    reason = tools.missing_reason(*tool)
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def v1model(tmp_path_factory: pytest.TempPathFactory) -> build.StepResult:
    _need(tools.P4C_BM2_SS)
    return build.build_v1model(tmp_path_factory.mktemp("p4"))


def test_v1model_compiles_without_warnings(v1model: build.StepResult) -> None:
    assert v1model.ok, v1model.output
    assert v1model.unexpected_warnings == [], "\n".join(v1model.unexpected_warnings)
    # The one warning p4c-bm2-ss gives every table with an action selector (testbed/toolchain/build.py).
    assert len(v1model.warnings) <= 1 and all("DlcpIngress.ecmp.next_hops" in w for w in v1model.warnings)
    assert {a.name for a in v1model.artifacts} == {"dlcp.json", "dlcp.p4info.txtpb"}


def test_committed_p4info_is_current(v1model: build.StepResult) -> None:
    fresh = next(a for a in v1model.artifacts if a.name == "dlcp.p4info.txtpb")
    assert paths.COMMITTED_P4INFO.read_text() == fresh.read_text(), "run `dlcp p4 build --update-p4info`"
    p4info.load(fresh)


@pytest.mark.parametrize("chip", [1, 2], ids=["tna", "t2na"])
def test_tna_passes_the_front_end(chip: int, tmp_path: Path) -> None:
    _need(tools.P4TEST)
    result = build.check_tna(tmp_path, chip)
    if result.skipped:
        pytest.skip(result.skipped)
    assert result.ok, result.output
    assert result.warnings == [], "\n".join(result.warnings)
