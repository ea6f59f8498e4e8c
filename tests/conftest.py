"""Shared fixtures and the skip rules for tests that need tools this machine may lack."""

from __future__ import annotations

import os

import pytest
from support import JOB, TOKEN

from dlcp.assembler import Assembler
from dlcp.p4 import tools as p4tools


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needs = {
        # P4 tools are looked up in $DLCP_P4_BIN_DIR, then PATH (dlcp.p4.tools); tests needing one
        # particular tool also skip on their own with the exact reason.
        "p4c": (p4tools.find("p4test") or p4tools.find("p4c-bm2-ss"), p4tools.missing_reason("p4test", "p4c-bm2-ss")),
        "bmv2": (p4tools.find("simple_switch"), p4tools.missing_reason("simple_switch")),
        "root": (os.geteuid() == 0, "needs root for network namespaces"),
    }
    for item in items:
        why = [w for marker, (present, w) in needs.items() if marker in item.keywords and not present]
        if why:
            item.add_marker(pytest.mark.skip(reason="; ".join(str(w) for w in why)))


@pytest.fixture
def assembler() -> Assembler:
    a = Assembler()
    a.add_job(JOB, TOKEN)
    return a
