"""Quantities with units as configuration files write them: rates, sizes, durations.

``"10gbit"``, ``"512KiB"``, ``"100us"``; a bare number is bit/s, bytes or seconds.
Errors are :class:`ValueError` naming ``what`` (the field), the text and the units
that are understood.
"""

from __future__ import annotations

import re

_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_TIME_UNITS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9}
_SIZE_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def _quantity(value: object, units: dict[str, int], what: str, bare: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{what}: expected a number or a string with a unit, got {value!r}")
    if isinstance(value, int | float):
        return float(value) * units[bare]
    m = _NUMBER.match(value)
    unit = (m.group(2) if m else "").lower() or bare
    if m is None or unit not in units:
        raise ValueError(f"{what}: cannot read {value!r} (units: {', '.join(u for u in units if u)})")
    return float(m.group(1)) * units[unit]


def parse_rate(value: object, what: str = "rate") -> int:
    """Bits per second, at least 1 kbit/s: ``"1gbit"``, ``"2.5gbit"``, ``100e6``."""
    bps = _quantity(value, _RATE_UNITS, what, "bit")
    if bps < 1000:
        raise ValueError(f"{what}: {value!r} is below 1kbit")
    return int(bps)


def parse_size(value: object, what: str = "size") -> int:
    """Bytes, at least 1: ``"4MiB"``, ``"256KiB"``, ``65536``."""
    n = _quantity(value, _SIZE_UNITS, what, "")
    if n < 1:
        raise ValueError(f"{what}: {value!r} is not a positive size")
    return int(n)


def parse_duration(value: object, what: str = "delay") -> int:
    """Nanoseconds, at least 0: ``"100us"``, ``"1.5ms"``; a bare number is seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = f"{value}s"
    ns = _quantity(value, _TIME_UNITS, what, "s")
    return int(ns)


def format_size(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def format_rate(bps: int) -> str:
    for unit, size in (("Gbit/s", 10**9), ("Mbit/s", 10**6), ("kbit/s", 10**3)):
        if bps >= size:
            return f"{bps / size:g} {unit}"
    return f"{bps} bit/s"
