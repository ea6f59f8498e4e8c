"""Helpers for the simulator's tests: whether ns-3 is here, and the shared vectors' locations."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

VECTORS = Path(__file__).resolve().parent / "vectors"
COMPLETION = VECTORS / "transport" / "completion.json"

SMALL_PS = {
    "type": "ps",
    "workers": 4,
    "servers": 2,
    "layer_bytes": [400_000, 200_000, 800_000],
    "compute_us": 300,
    "iterations": 3,
    "tag": "job",
}
"""A parameter-server job for 16-host fabrics: 3 iterations of 3 layers, each TCP connection used both ways."""

HAVE_NS3 = importlib.util.find_spec("ns3") is not None
needs_ns3 = pytest.mark.skipif(not HAVE_NS3, reason="ns3 wheel not installed (pip install 'dlcp[sim]'; make test does)")
