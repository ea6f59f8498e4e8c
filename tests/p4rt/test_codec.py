"""P4Runtime bytestrings and match keys (property tests): what the server accepts, refuses and returns."""

from __future__ import annotations

import pytest
from finsy.proto import p4r
from hypothesis import given
from hypothesis import strategies as st

from dlcp.testbed.switch.entries import MatchKind
from dlcp.testbed.switch.p4rt import codec, schema
from dlcp.testbed.switch.p4rt.errors import P4RuntimeError

SCHEMA = schema.Schema(schema.dlcp_p4info())
ROUTES = SCHEMA.tables[39645294]
CLASSES = SCHEMA.tables[47468225]


@given(st.integers(1, 64).flatmap(lambda w: st.tuples(st.just(w), st.integers(0, (1 << w) - 1))), st.integers(0, 3))
def test_any_padding_decodes_and_encoding_is_canonical(width_value: tuple[int, int], pad: int) -> None:
    width, value = width_value
    canonical = codec.encode_uint(value)
    assert len(canonical) == max(1, (value.bit_length() + 7) // 8)
    assert codec.decode_uint(b"\x00" * pad + canonical, width, "x") == value


@given(st.integers(1, 64).flatmap(lambda w: st.tuples(st.just(w), st.integers(1 << w, 1 << (w + 8)))))
def test_values_wider_than_the_field_are_out_of_range(width_value: tuple[int, int]) -> None:
    width, value = width_value
    with pytest.raises(P4RuntimeError) as info:
        codec.decode_uint(codec.encode_uint(value), width, "x")
    assert info.value.code.name == "OUT_OF_RANGE"


def test_empty_bytestring_is_out_of_range() -> None:
    with pytest.raises(P4RuntimeError, match="empty"):
        codec.decode_uint(b"", 8, "x")


@given(st.integers(0, (1 << 32) - 1), st.integers(1, 32))
def test_lpm_accepts_exactly_the_values_with_no_bits_past_the_prefix(addr: int, plen: int) -> None:
    fm = p4r.FieldMatch(field_id=1, lpm=p4r.FieldMatch.LPM(value=codec.encode_uint(addr), prefix_len=plen))
    clean = addr & ~((1 << (32 - plen)) - 1) == addr
    if clean:
        (m,) = codec.decode_match(ROUTES, [fm])
        assert (m.kind, m.value, m.arg) == (MatchKind.LPM, addr, plen)
        assert codec.encode_match(ROUTES, [m]) == [fm]
    else:
        with pytest.raises(P4RuntimeError, match="past the"):
            codec.decode_match(ROUTES, [fm])


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF))
def test_ternary_accepts_exactly_value_within_nonzero_mask(value: int, mask: int) -> None:
    fm = p4r.FieldMatch(
        field_id=1, ternary=p4r.FieldMatch.Ternary(value=codec.encode_uint(value), mask=codec.encode_uint(mask))
    )
    if mask and value & ~mask == 0:
        (m,) = codec.decode_match(CLASSES, [fm])
        assert (m.name, m.value, m.arg) == ("job_id", value, mask)
    else:
        with pytest.raises(P4RuntimeError) as info:
            codec.decode_match(CLASSES, [fm])
        assert info.value.code.name == "INVALID_ARGUMENT"


def test_match_fields_come_back_in_p4info_order() -> None:
    kind = p4r.FieldMatch(field_id=5, ternary=p4r.FieldMatch.Ternary(value=b"\x01", mask=b"\xff"))
    job = p4r.FieldMatch(field_id=1, ternary=p4r.FieldMatch.Ternary(value=b"\x07", mask=b"\xff"))
    assert [m.name for m in codec.decode_match(CLASSES, [kind, job])] == ["job_id", "kind"]
