"""Checks of arguments and configuration values, with one message format for all of them.

Every verb of the ``dlcp`` command and every configuration dataclass checks its
values with these functions before any work starts. A bad value raises
:class:`BadValue`, whose message names the value (a command-line flag such as
``--payload`` or a job-file field such as ``transport.payload_bytes``), what it
was, and what is valid::

    --inject-loss: got 1.5, must be in [0, 1)

The CLI turns a :class:`BadValue` (a ``ValueError``) into that message on stderr
and exit code 2.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, TypeVar

N = TypeVar("N", int, float)


class BadValue(ValueError):
    """A value outside what is valid: ``name``, the ``value``, and what ``valid`` values are."""

    def __init__(self, name: str, value: Any, valid: str) -> None:
        self.name = name
        self.value = value
        self.valid = valid
        super().__init__(f"{name}: got {_show(value)}, {valid}")

    def renamed(self, name: str) -> BadValue:
        """The same error for the same value known by another name (a flag, a dotted job-file path)."""
        return BadValue(name, self.value, self.valid)


def _show(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:g}"
    return repr(value) if isinstance(value, str) else str(value)


def _number(name: str, value: Any, integer: bool) -> None:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok:
        raise BadValue(name, value, "must be an integer" if integer else "must be a number")
    if not integer and not math.isfinite(value):
        raise BadValue(name, value, "must be a finite number")


def in_range(
    name: str,
    value: N,
    lo: N | None = None,
    hi: N | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
    unit: str = "",
    note: str = "",
) -> N:
    """``value`` if ``lo <= value <= hi`` (bounds left out are unbounded; ``*_open``: strict).

    ``note`` says where a bound comes from (``"--workers x --batch-size"``).
    """
    integer = isinstance(lo if lo is not None else hi, int)
    _number(name, value, integer)
    below = lo is not None and (value <= lo if lo_open else value < lo)
    above = hi is not None and (value >= hi if hi_open else value > hi)
    if below or above:
        valid = "must be " + range_text(lo, hi, lo_open=lo_open, hi_open=hi_open, unit=unit)
        raise BadValue(name, value, f"{valid} ({note})" if note else valid)
    return value


def range_text(
    lo: float | None, hi: float | None, *, lo_open: bool = False, hi_open: bool = False, unit: str = ""
) -> str:
    """``in [0, 1)``, ``in 4..65000 bytes``, ``at least 1``, ``above 0``, ``at most 7``."""
    suffix = f" {unit}" if unit else ""
    if lo is not None and hi is not None:
        if isinstance(lo, int) and isinstance(hi, int) and not lo_open and not hi_open:
            return f"in {lo}..{hi}{suffix}"
        return f"in {'(' if lo_open else '['}{_show(lo)}, {_show(hi)}{')' if hi_open else ']'}{suffix}"
    if lo is not None:
        return f"{'above' if lo_open else 'at least'} {_show(lo)}{suffix}"
    if hi is not None:
        return f"{'below' if hi_open else 'at most'} {_show(hi)}{suffix}"
    return "any number"


def fraction(name: str, value: float) -> float:
    """A loss rate or bound: in [0, 1)."""
    return in_range(name, value, 0.0, 1.0, hi_open=True)


def at_least(name: str, value: int, lo: int, unit: str = "") -> int:
    return in_range(name, value, lo, unit=unit)


def positive(name: str, value: float) -> float:
    """A finite number above 0."""
    return in_range(name, value, 0.0, lo_open=True)


def multiple_in_range(name: str, value: int, step: int, lo: int, hi: int, unit: str = "") -> int:
    """An integer in ``lo..hi`` that is a multiple of ``step``."""
    _number(name, value, True)
    if not lo <= value <= hi or value % step:
        raise BadValue(name, value, f"must be a multiple of {step} {range_text(lo, hi, unit=unit)}")
    return value


def one_of(name: str, value: Any, choices: Iterable[Any]) -> Any:
    options = tuple(choices)
    if value not in options:
        raise BadValue(name, value, f"must be one of {', '.join(map(_show, options))}")
    return value


SEED_MAX = (1 << 32) - 1


def seed(name: str, value: int) -> int:
    """A random seed: numpy and torch take any integer in 0..2**32-1."""
    return in_range(name, value, 0, SEED_MAX)
