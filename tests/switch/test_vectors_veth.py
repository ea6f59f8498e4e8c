"""The shared P4 test vectors on the running software switch, through real veth pairs in a namespace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dlcp.p4 import vectors
from dlcp.testbed.rig import VethSwitch

ROOT = Path(__file__).resolve().parents[2]
CASES = vectors.load_dir(ROOT / "tests/vectors/switch")

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def rig() -> Iterator[VethSwitch]:
    ports = sorted(set().union(*(c.ports() for c in CASES)))
    with VethSwitch(ports) as r:
        yield r


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_vector(rig: VethSwitch, case: vectors.Case) -> None:
    result = rig.run_case(case)
    assert result.passed, "\n".join(result.failures)


def test_no_namespace_left_behind() -> None:
    from pyroute2 import netns

    with VethSwitch([1]) as r:
        name = r.ns.name
        assert name in netns.listnetns()
    assert name not in netns.listnetns()
