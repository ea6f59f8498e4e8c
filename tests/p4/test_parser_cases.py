"""The parser's value/mask cases for short UDP datagrams cover exactly the lengths below MIN_DLCP_UDP_LENGTH.

Tofino's parser cannot compare (``length < 48``), so ``p4src/common/parser.p4``
spells the comparison as value/mask cases; this keeps them true to the constant
(``dlcp/p4/sizes.py``), which is defined once, in Python.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dlcp.p4 import sizes

PARSER = Path(__file__).resolve().parents[2] / "p4src" / "common" / "parser.p4"
_CASE = re.compile(r"^\s*(0x[0-9a-fA-F]+|\d+)\s*&&&\s*(0x[0-9a-fA-F]+|\d+)\s*:\s*(\w+)\s*;", re.MULTILINE)


def udp_length_cases(text: str) -> list[tuple[int, int, str]]:
    """(value, mask, next state) of each value/mask case in the ``parse_udp`` state's select."""
    start = text.index("state parse_udp")
    body = text[start : text.index("state ", start + 1)]
    assert "select(hdr.udp.length)" in body, "parse_udp no longer selects on hdr.udp.length"
    return [(int(v, 0), int(m, 0), state) for v, m, state in _CASE.findall(body)]


def matched(cases: list[tuple[int, int, str]], state: str) -> set[int]:
    return {n for n in range(1 << 16) if any(n & m == v & m for v, m, s in cases if s == state)}


def test_short_datagrams_are_exactly_those_below_the_minimum() -> None:
    cases = udp_length_cases(PARSER.read_text())
    assert cases, "no value/mask cases found in parse_udp"
    assert matched(cases, "accept") == set(range(sizes.MIN_DLCP_UDP_LENGTH))


@pytest.mark.parametrize(
    ("text", "lengths"),
    [("0x0000 &&& 0xffe0: accept;", set(range(32))), ("0x0020 &&& 0xfff0: accept;", set(range(32, 48)))],
)
def test_case_reading(text: str, lengths: set[int]) -> None:
    cases = udp_length_cases(f"state parse_udp {{ transition select(hdr.udp.length) {{\n{text}\n}} }}\nstate x")
    assert matched(cases, "accept") == lengths
