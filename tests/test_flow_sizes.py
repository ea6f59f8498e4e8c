"""The data-center flow-size distributions (dlcp.flow_sizes), and that the simulator and the testbed draw from them."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dlcp import flow_sizes
from dlcp.simulations import scenario, workloads
from dlcp.testbed import spec as testbed_spec
from dlcp.testbed import traffic


@pytest.mark.parametrize("name", flow_sizes.NAMES)
def test_each_table_is_a_cdf(name: str) -> None:
    sizes = [s for s, _ in flow_sizes.CDFS[name]]
    cum = [p for _, p in flow_sizes.CDFS[name]]
    assert sizes == sorted(sizes) and cum == sorted(cum)
    assert cum[0] == 0.0 and cum[-1] == 1.0


def test_aliases_name_the_canonical_tables() -> None:
    assert flow_sizes.canonical("websearch") == flow_sizes.canonical("web-search") == "web-search"
    assert flow_sizes.canonical("datamining") == flow_sizes.canonical("data-mining") == "data-mining"
    with pytest.raises(ValueError, match=r"'hadoop'.*known: web-search, data-mining, websearch, datamining"):
        flow_sizes.canonical("hadoop")


def test_sizes_are_the_inverse_cdf() -> None:
    # At a table's points the quantile is the point's size; between them, linear.
    assert flow_sizes.sizes("web-search", np.array([0.15, 0.53, 0.565])).tolist() == [10_000, 80_000, 140_000]
    assert flow_sizes.sizes("data-mining", 0.5).tolist() == [1_100]
    assert flow_sizes.sizes("data-mining", 0.0).tolist() == [1]  # never an empty flow
    assert flow_sizes.sizes("web-search", 0.99, cap=4_000_000).tolist() == [4_000_000]


def _exact_mean(name: str, cap: int) -> float:
    """The mean of min(size, cap) for the piecewise-linear CDF, by integrating its inverse on a fine grid."""
    pts = np.array(flow_sizes.CDFS[name], dtype=np.float64)
    grid = np.linspace(0, 1, 2_000_001)
    return float(np.minimum(np.interp(grid, pts[:, 1], pts[:, 0]), cap or np.inf).mean())


@pytest.mark.parametrize(("name", "cap"), [("web-search", 0), ("web-search", 1_000_000), ("data-mining", 4_000_000)])
def test_mean_is_close_to_the_exact_mean(name: str, cap: int) -> None:
    assert flow_sizes.mean(name, cap) == pytest.approx(_exact_mean(name, cap), rel=0.02)
    assert flow_sizes.mean(name, cap) == flow_sizes.mean(name, cap)  # the same estimate every call
    if cap:
        assert flow_sizes.mean(name, cap) < min(cap, flow_sizes.mean(name))


def test_the_simulator_and_the_testbed_read_the_same_tables() -> None:
    # Both spellings reach one table in both places; the testbed names it canonically.
    sim = scenario.Workload(type="background", distribution="datamining", load=0.5, duration_us=1000)
    assert sim.distribution in flow_sizes.ACCEPTED
    errs: list[str] = []
    settings = testbed_spec._traffic({"cdf": "datamining"}, errs)
    assert not errs and settings.cdf == "data-mining"
    assert traffic.FlowSizes("datamining").mean() == flow_sizes.mean("data-mining", traffic.MAX_FLOW_BYTES)
    rng = random.Random(3)
    drawn = [traffic.FlowSizes("web-search").draw(rng) for _ in range(2000)]
    assert max(drawn) == traffic.MAX_FLOW_BYTES and min(drawn) >= 1
    assert not hasattr(workloads, "CDFS") and not hasattr(traffic, "CDF_POINTS")


def test_an_unknown_name_is_refused_where_it_is_read() -> None:
    errs: list[str] = []
    testbed_spec._traffic({"cdf": "hadoop"}, errs)
    assert errs == ["testbed.traffic.cdf: must be one of web-search, data-mining, websearch, datamining, got 'hadoop'"]
