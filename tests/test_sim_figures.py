"""CI runs every figure's small variant and compares it with the figure's expected_small.json.

A small run is seeded, so the same build reproduces it exactly; the comparison allows
``figures.TOLERANCE`` (5%) per number for other compilers and maths libraries. A
change that moves a figure further fails here; if it is meant, regenerate the
expected output with ``dlcp sim figure NAME --scale small`` and say why in the commit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_support import needs_ns3

from dlcp.simulations import figures

pytestmark = [needs_ns3]


def test_compare_catches_a_difference() -> None:
    want = {"dlcp": {"p99_us": 100.0, "p50_us": 50.0}}
    assert figures.compare({"dlcp": {"p99_us": 104.0, "p50_us": 50.0}}, want) == []
    assert figures.compare({"dlcp": {"p99_us": 106.0, "p50_us": 50.0}}, want) == [
        "dlcp p99_us: 106, expected 100 (+-5%)"
    ]
    assert figures.compare({"tcp": {"p99_us": 100.0, "p50_us": 50.0}}, want)[0].startswith("variants")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(figures.FIGURES))
def test_small_variant_matches_expected(name: str, tmp_path: Path) -> None:
    data = figures.run(name, "small", tmp_path, parallel=2)
    want = figures.expected(name)
    assert want["figure"] == name and want["scale"] == "small"
    assert figures.compare(data["rows"], want["rows"]) == []
    png = figures.plot(figures.load(name, "small", tmp_path), tmp_path)  # --plot-only reads the saved data
    assert png.stat().st_size > 0
