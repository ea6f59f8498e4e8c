"""Fixtures for the controller tests (helpers in tests/controller_support.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from controller_support import Switches


@pytest.fixture
def switches() -> Iterator[Switches]:
    logging.getLogger("finsy").setLevel(logging.ERROR)  # the software switch has no gNMI: expected
    made = Switches()
    try:
        yield made
    finally:
        for sw in made.made:
            sw.stop()
