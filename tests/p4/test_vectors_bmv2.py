"""The switch test vectors on BMv2 simple_switch, in a network namespace of our own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dlcp.p4 import vectors
from dlcp.testbed import bmv2
from dlcp.testbed.bmv2 import Bmv2Switch

ROOT = Path(__file__).resolve().parents[2]
CASES = vectors.load_dir(ROOT / "tests/vectors/switch")

pytestmark = [pytest.mark.p4c, pytest.mark.bmv2, pytest.mark.root, pytest.mark.slow]


@pytest.fixture(scope="module")
def switch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bmv2Switch]:
    reason = bmv2.missing_reason()
    if reason:
        pytest.skip(reason)
    ports = sorted(set().union(*(c.ports() for c in CASES)))
    with Bmv2Switch.compiled(tmp_path_factory.mktemp("p4"), ports) as sw:
        yield sw


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_vector(switch: Bmv2Switch, case: vectors.Case) -> None:
    result = switch.run_case(case)
    assert result.passed, "\n".join(result.failures)
