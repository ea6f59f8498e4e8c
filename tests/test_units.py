"""Quantities with units (dlcp.units): what configuration files write, and what they may not."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlcp.units import format_rate, format_size, parse_duration, parse_rate, parse_size


@pytest.mark.parametrize(
    ("parse", "text", "value"),
    [
        (parse_rate, "1gbit", 10**9),
        (parse_rate, "2.5Gbit", 25 * 10**8),
        (parse_rate, 100e6, 10**8),
        (parse_size, "4MiB", 4 << 20),
        (parse_size, "1mb", 10**6),
        (parse_size, 65536, 65536),
        (parse_duration, "100us", 100_000),
        (parse_duration, "1.5ms", 1_500_000),
        (parse_duration, 2, 2 * 10**9),
        (parse_duration, 0, 0),
    ],
)
def test_quantities(parse: object, text: object, value: int) -> None:
    assert parse(text, "x") == value  # type: ignore[operator]


@pytest.mark.parametrize("parse", [parse_rate, parse_size, parse_duration])
@pytest.mark.parametrize(
    "bad", [math.inf, -math.inf, math.nan, "1e400", "1e400gbit", "1e400MiB", "1e400s", 10**400, True, [1], None, "x"]
)
def test_what_is_not_a_finite_quantity_is_refused_naming_the_field(parse: object, bad: object) -> None:
    with pytest.raises(ValueError, match=r"^link\.rate: "):
        parse(bad, "link.rate")  # type: ignore[operator]


def test_lower_bounds() -> None:
    for parse, bad in ((parse_rate, "999bit"), (parse_size, 0), (parse_duration, -1), (parse_duration, -0.5)):
        with pytest.raises(ValueError, match=r"^f: "):
            parse(bad, "f")


@given(st.integers(min_value=1000, max_value=10**6), st.sampled_from(["bit", "kbit", "mbit", "gbit"]))
def test_a_rate_reads_back_from_its_own_text(n: int, unit: str) -> None:
    scale = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}[unit]
    assert parse_rate(f"{n}{unit}") == n * scale


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(max_size=12)))
def test_any_input_gives_a_number_or_a_value_error(value: object) -> None:
    for parse in (parse_rate, parse_size, parse_duration):
        try:
            out = parse(value, "f")
        except ValueError as exc:
            assert str(exc).startswith("f: ")
        else:
            assert isinstance(out, int) and out >= 0


def test_formats() -> None:
    assert format_size(4 << 20) == "4 MiB" and format_size(100) == "100 B"
    assert format_rate(10**9) == "1 Gbit/s" and format_rate(500) == "500 bit/s"
