"""The simulator at scale: memory refused before any process starts, and DLCP's switch path.

Tiny fabrics (16 hosts); the speed itself is a benchmark (`dlcp sim bench`), not a test.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from sim_support import needs_ns3

from dlcp import resources
from dlcp.simulations import runner, scenario, simulate

LEAF_SPINE = {"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 8, "delay_us": 1.0, "mtu": 9000}
INCAST = {"type": "incast", "senders": 8, "bytes": 400_000, "rounds": 2, "gap_us": 500}
PS = {
    "type": "ps",
    "model": "resnet50",
    "workers": 4,
    "servers": 2,
    "bucket_bytes": 4 << 20,
    "max_buckets": 2,
}


def table(name: str = "t", **kw: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"name": name, "seed": 1, "stop_s": 0.05, "topology": dict(LEAF_SPINE)}
    t.update(kw)
    return t


class Started(Exception):
    """Raised instead of starting a simulation process."""


def _no_process(*args: Any, **kwargs: Any) -> Any:
    raise Started(args)


def _mb(n: float) -> int:
    return int(n * 2**20)


def test_a_run_over_the_memory_is_refused_before_its_process_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    est = simulate.memory_estimate(scenario.from_table(table(workload=[INCAST])))
    monkeypatch.setattr(subprocess, "run", _no_process)
    # 80% of what is available is just below the estimate: refused, with the estimate, nothing started.
    monkeypatch.setattr(resources, "available_memory", lambda: _mb(est / 0.8 * 0.99))
    with pytest.raises(simulate.MemoryRefused, match=rf"'t' needs about {est:.0f} MB by estimate"):
        runner.run(table(workload=[INCAST]))
    # Just above: the check passes and the process would start.
    monkeypatch.setattr(resources, "available_memory", lambda: _mb(est / 0.8 * 1.01))
    with pytest.raises(Started):
        runner.run(table(workload=[INCAST]))


@pytest.mark.parametrize(
    "topo",
    [
        LEAF_SPINE,
        {"kind": "leaf_spine", "leaves": 3, "spines": 5, "hosts_per_leaf": 7},
        {"kind": "fat_tree", "k": 4},
        {"kind": "fat_tree", "k": 6},
        {"kind": "star", "hosts": 5},
    ],
)
def test_a_fabrics_counts_are_those_of_the_fabric_built(topo: dict[str, Any]) -> None:
    spec = scenario.from_table(table(topology=topo, workload=[INCAST | {"senders": 3}])).topology
    size, fabric = spec.size(), spec.fabric()
    assert (size.hosts, size.switches, size.nodes, size.links) == (
        fabric.hosts, fabric.switches, fabric.nodes, len(fabric.links)
    )  # fmt: skip


def test_a_fabric_too_large_is_refused_before_it_or_its_traffic_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """A million hosts: validated and refused from the fabric's counts alone, in well under a second."""
    from dlcp.simulations import topology, workloads

    def built(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("built")

    for name in ("leaf_spine", "fat_tree", "star"):
        monkeypatch.setattr(topology, name, built)
    monkeypatch.setattr(workloads, "generate", built)
    monkeypatch.setattr(subprocess, "run", _no_process)
    big = table(topology=LEAF_SPINE | {"hosts_per_leaf": 100_000}, workload=[INCAST])
    with pytest.raises(simulate.MemoryRefused, match=r"'t' needs about \d+ MB by estimate"):
        runner.run(big)


def test_a_sweep_is_refused_for_what_its_parallel_runs_need_together(monkeypatch: pytest.MonkeyPatch) -> None:
    tables = [table("a", workload=[INCAST]), table("b", seed=2, workload=[INCAST])]
    est = max(simulate.memory_estimate(scenario.from_table(t)) for t in tables)
    monkeypatch.setattr(subprocess, "run", _no_process)
    monkeypatch.setattr(resources, "available_memory", lambda: _mb(est * 1.5 / 0.8))  # one fits, two do not
    with pytest.raises(simulate.MemoryRefused, match="2 simulations at a time need about"):
        runner.sweep(tables, parallel=2)
    # One at a time fits: the sweep is admitted and each point's process would start (a point that fails, here
    # by the stand-in's exception, is reported with its table and does not stop the others).
    results = runner.sweep(tables, parallel=1)
    assert [r[runner.FAILED].split(":")[0] for r in results] == ["Started", "Started"]


@pytest.mark.slow
@needs_ns3
def test_the_estimate_is_above_the_measured_peak() -> None:
    # Deliberately high: a run the check admits must not run out of memory. A PS job (torch's import)
    # and an incast with drops, the two shapes of memory the estimate charges. The simulation's
    # process is started while this one holds more than the estimate: its peak must be its own.
    t = table(workload=[INCAST, PS | {"first_host": 8}], switch={"buffer_packets": 64})
    ballast = bytearray(int((simulate.memory_estimate(scenario.from_table(t)) + 100) * 2**20))
    r = runner.run(t)
    del ballast
    p = r["perf"]
    assert r["jobs"] and r["flows"]["gradient"]["completed"] > 0
    assert p["peak_rss_mb"] <= p["memory_estimate_mb"], p


@needs_ns3
def test_dlcp_switches_route_every_hop_and_match_stock_ns3_delivery() -> None:
    # With DLCP routing the switches run no IP stack: every switch hop is one DlcpSwitch lookup, and
    # every packet a host sends one DlcpRouting lookup. Stock ns-3 (global routing) delivers the same
    # messages over the same fabric.
    dlcp = runner.run(table(workload=[INCAST]))
    stock = runner.run(table(routing="global", workload=[INCAST]))
    c = dlcp["counters"]
    sent = c["dlcp_data_sent"] + c["dlcp_control_sent"]
    assert c["route_lookups"] == c["switch_forwarded"] + c["qdisc_dropped"] + sent, c
    assert c["switch_dropped"] == 0
    assert stock["counters"]["route_lookups"] == 0  # ns-3's own routing did the work there
    for r in (dlcp, stock):
        assert r["flows"]["gradient"]["completed"] == 16
    assert dlcp["perf"]["cpu_s"] > 0 and dlcp["perf"]["packets_per_cpu_s"] > 0
