"""The switch test vectors on BMv2 simple_switch, in a network namespace of our own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlcp.p4 import build, p4info, tools, vectors
from dlcp.testbed.bmv2 import Bmv2Switch

ROOT = Path(__file__).resolve().parents[2]
CASES = vectors.load_dir(ROOT / "tests/vectors/switch")

pytestmark = [pytest.mark.p4c, pytest.mark.bmv2, pytest.mark.root, pytest.mark.slow]


@pytest.fixture(scope="module")
def switch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bmv2Switch]:
    reason = tools.missing_reason(tools.P4C_BM2_SS, tools.SIMPLE_SWITCH, tools.SIMPLE_SWITCH_CLI)
    if reason:
        pytest.skip(reason)
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")
    out = tmp_path_factory.mktemp("p4")
    result = build.build_v1model(out)
    assert result.ok, result.output
    info = p4info.load(out / "v1model" / "dlcp.p4info.txtpb")
    ports = sorted(set().union(*(c.ports() for c in CASES)))
    with Bmv2Switch(out / "v1model" / "dlcp.json", info, ports) as sw:
        yield sw


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_vector(switch: Bmv2Switch, case: vectors.Case) -> None:
    result = switch.run_case(case)
    assert result.passed, "\n".join(result.failures)
