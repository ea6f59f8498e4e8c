"""Shared fixtures and the skip rules for tests that need tools this machine may lack."""

from __future__ import annotations

import os
import shutil

import pytest
from support import JOB, TOKEN

from dlcp.assembler import Assembler


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needs = {
        "p4c": (shutil.which("p4test") or shutil.which("p4c-bm2-ss"), "p4c (p4test/p4c-bm2-ss) is not installed"),
        "bmv2": (shutil.which("simple_switch"), "BMv2 simple_switch is not installed"),
        "root": (os.geteuid() == 0, "needs root for network namespaces"),
    }
    for item in items:
        for marker, (present, why) in needs.items():
            if marker in item.keywords and not present:
                item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture
def assembler() -> Assembler:
    a = Assembler()
    a.add_job(JOB, TOKEN)
    return a
