"""The shared P4 test vectors on the software switch's C pipeline, through virtual ports (no root needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlcp.p4 import names, p4info, vectors
from dlcp.testbed.switch import vector_run
from dlcp.testbed.switch.dataplane import KEYS, PARAMS

ROOT = Path(__file__).resolve().parents[2]
CASES = vectors.load_dir(ROOT / "tests/vectors/switch")
INFO = p4info.load(ROOT / "p4src/v1model/dlcp.p4info.txtpb")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_vector(case: vectors.Case) -> None:
    result = vector_run.run_virtual(case)
    assert result.passed, "\n".join(result.failures)


def test_a_wrong_expectation_fails() -> None:
    """The runner can fail: the routing case with one expected output moved to another port."""
    case = next(c for c in CASES if c.name.startswith("routing"))
    i, p = next((i, p) for i, p in enumerate(case.packets) if p.expect)
    moved = vectors.Frame(p.expect[0].port + 1, p.expect[0].data)
    packets = list(case.packets)
    packets[i] = vectors.PacketIn(p.frame, (moved,))
    bad = vectors.Case(**{**case.__dict__, "packets": tuple(packets)})
    result = vector_run.run_virtual(bad)
    assert not result.passed
    assert any("expected out of port" in f for f in result.failures)
    assert any("unexpected frame" in f for f in result.failures)


def test_backend_names_exist_in_the_p4info() -> None:
    for table, keys in KEYS.items():
        assert [f.name for f in INFO.tables[table].match_fields] == list(keys), table
    for action, params in PARAMS.items():
        assert [p for p, _ in INFO.actions[action].params] == list(params), action


def test_the_class_keys_fit_the_c_key_layout() -> None:
    """Each dlcp_classes key, at its P4Info width, fits between its shift in C's 64-bit key and the next
    key's: the backend cannot mix two keys' bits."""
    from dlcp.testbed.switch.dataplane import class_key_layout

    layout = class_key_layout()
    assert [k for k, _, _ in layout] == [f.name for f in INFO.tables[names.DLCP_CLASSES].match_fields]
    tops = [64] + [shift for _, _, shift in layout[:-1]]
    for (key, width, shift), top in zip(layout, tops, strict=True):
        assert 0 < width and shift + width <= top, key
