"""Shared fixtures and the skip rules for tests that need tools this machine may lack."""

from __future__ import annotations

import os

import pytest
from support import JOB, TOKEN

from dlcp.assembler import Assembler
from dlcp.host import fastpath
from dlcp.testbed.toolchain import tools as p4tools

# Hypothesis's per-example deadline (200 ms) and its too-slow health check time the machine, not the code: on a
# loaded host (CI, make test-stress) a correct property flips to "Unreliable test timings". A property test checks
# values; a test that means a duration measures it and states its premise.
try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the MXNet venv (make test-mxnet) has no hypothesis, and runs no property test
    pass
else:
    settings.register_profile("dlcp", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("dlcp")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fastpath: needs the C fast path (dlcp.host._fastpath); skipped without it, failed under make test"
    )


def _fastpath_required() -> bool:
    """Whether a missing C fast path fails its tests instead of skipping them.

    ``make test`` sets ``DLCP_REQUIRE_FASTPATH=1`` (CI must build and test the C
    path); a plain ``pytest`` on a machine without a C compiler skips them. This
    is the one place the variable is read.
    """
    return os.environ.get("DLCP_REQUIRE_FASTPATH", "") == "1"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if hasattr(item.config, "workerinput") and item.config.getvalue("loadgroup") and "@" not in item.nodeid:
        if _group(item) is not None:  # pytest-xdist did not put its group in its id: it may run beside the group
            pytest.fail(
                f"pytest-xdist ignored this test's xdist_group {_group(item)!r}: --dist loadgroup does not support "
                f"this pytest ({pytest.__version__}; pyproject.toml pins the one it does)",
                pytrace=False,
            )
    if item.get_closest_marker("fastpath") is not None and not fastpath.available():
        why = f"the C fast path dlcp.host._fastpath does not import ({fastpath.unavailable_reason()})"
        if _fastpath_required():
            pytest.fail(f"{why}; DLCP_REQUIRE_FASTPATH=1 (make test) requires it: see `make fastpath`", pytrace=False)
        pytest.skip(why)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needs = {
        # P4 tools are looked up in $DLCP_P4_BIN_DIR, then PATH (dlcp.testbed.toolchain.tools); tests needing one
        # particular tool also skip on their own with the exact reason.
        "p4c": (p4tools.find("p4test") or p4tools.find("p4c-bm2-ss"), p4tools.missing_reason("p4test", "p4c-bm2-ss")),
        "bmv2": (p4tools.find("simple_switch"), p4tools.missing_reason("simple_switch")),
        "root": (os.geteuid() == 0, "needs root for network namespaces"),
    }
    for item in items:
        why = [w for marker, (present, w) in needs.items() if marker in item.keywords and not present]
        if why:
            item.add_marker(pytest.mark.skip(reason="; ".join(str(w) for w in why)))
        if item.get_closest_marker("timing") is not None:
            item.add_marker(pytest.mark.xdist_group(TIMING_GROUP))
    if hasattr(config, "workerinput"):
        items[:] = _slow_first(items)


TIMING_GROUP = "timing"
"""The xdist group of the tests marked ``timing``: under ``pytest -n`` (``make test``) they run in one worker, one
after another, never beside each other."""


def _group(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    if marker is None:
        return None
    return str(marker.args[0] if marker.args else marker.kwargs.get("name", "default"))


def _slow_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """Under pytest-xdist (``--dist loadgroup --no-loadscope-reorder``, as ``make test`` runs it): the tests marked
    ``slow``, and every test of an xdist group holding one, before the others, each part in collection order. A
    worker that takes a slow test then takes it early, and the run does not end waiting for one started last."""
    slow_groups = {_group(i) for i in items if i.get_closest_marker("slow") is not None} - {None}
    return sorted(items, key=lambda i: i.get_closest_marker("slow") is None and _group(i) not in slow_groups)


@pytest.fixture
def assembler() -> Assembler:
    a = Assembler()
    a.add_job(JOB, TOKEN)
    return a
