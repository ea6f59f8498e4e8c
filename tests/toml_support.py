"""Configuration documents with a value of a wrong type put in one place at a time (tests of the loaders)."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Any

WRONG: tuple[object, ...] = ([1], {"a": 1}, True, math.nan, math.inf, 10**30, -5, 0, "x", "", 1.5)
"""What TOML can hold where a loader expects something else: tables, arrays, booleans, non-finite, huge,
negative, zero, text, empty text, fractions."""


def leaves(doc: object, path: tuple[object, ...] = ()) -> Iterator[tuple[object, ...]]:
    """The path of every value in ``doc``, tables and arrays included (a whole table can be wrong too)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from leaves(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from leaves(v, (*path, i))
    if path:
        yield path


def wrong_everywhere(doc: dict[str, Any]) -> Iterator[tuple[tuple[object, ...], object, dict[str, Any]]]:
    """``(path, value, copy of doc with value at path)`` for every path and every value of :data:`WRONG`."""
    for path in leaves(doc):
        for value in WRONG:
            d = copy.deepcopy(doc)
            node: Any = d
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            yield path, value, d
