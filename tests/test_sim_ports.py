"""DLCP's port model (simulations/cpp/port.h) against the ns-3 devices and queue discs it replaces.

The port model must be a faster engine for the same simulation, not another one: every
scenario below runs once with ``ports = "ns3"`` (point-to-point devices, channels, queue
discs, the hosts' UDP/IP stack) and once with ``ports = "dlcp"``, and the two summaries must
be equal, number for number (flow completion times, drops, trims, pushes-out, ECN marks,
retransmissions, event counts), for DLCP's queues and for the TCP baselines' RED/ECN and drop-tail
FIFO queues alike. Its DLCP queue also runs the shared switch and buffer vectors
(tests/test_sim_queue_disc.py, tests/test_sim_buffer.py).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from sim_support import SMALL_PS, needs_ns3

from dlcp.simulations import runner, scenario

# One worker runs the module (under pytest -n): a scenario's run is kept for the tests after (run_once).
pytestmark = [needs_ns3, pytest.mark.slow, pytest.mark.xdist_group("sim_ports")]

LEAF_SPINE = {"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 8, "delay_us": 1.0, "mtu": 9000}
INCAST = {"type": "incast", "senders": 8, "bytes": 400_000, "rounds": 2, "gap_us": 500}
FRONT = {"type": "incast", "senders": 6, "receiver": 15, "bytes": 300_000, "layer": 0, "num_layers": 6, "tag": "front"}
BACK = dict(FRONT, layer=5, tag="back")
BACKGROUND = {"type": "background", "load": 0.3, "duration_us": 2000, "max_flow_bytes": 500_000}
NS3_TCP = {"stack": "ns3"}


def table(**kw: Any) -> dict[str, Any]:
    # Senders at line rate: paced at their share (the default) these incasts lose nothing, and the drops,
    # trims and pushes-out the engines must agree on would not happen ("paced" below keeps the default).
    t: dict[str, Any] = {"name": "t", "seed": 1, "stop_s": 0.05, "topology": dict(LEAF_SPINE), "host_pacing": "line"}
    t.update(copy.deepcopy(kw))
    return t


SCENARIOS = {
    # A lone flow: its FCT is serialisation (with ns-3's 2-byte PPP header), pacing and propagation.
    "lone_flow": table(workload=[{"type": "incast", "senders": 1, "receiver": 15, "bytes": 4_000_000}]),
    # Priorities with selective drops, then with trimming (TRIM_QUEUE, cut on the way out).
    "priority_drop": table(
        switch={"buffer_packets": 1000, "drop_thresholds": [4]},
        dlcp={"policy": {"push": {"loss_bound": 0.05}}},
        workload=[FRONT, BACK],
    ),
    "priority_trim": table(
        switch={"buffer_packets": 1000, "drop_thresholds": [4], "congestion_action": "trim"},
        dlcp={"policy": {"push": {"loss_bound": 0.05}}},
        workload=[FRONT, BACK],
    ),
    # A harsh incast into small buffers: overflow and push-out, probes and retransmissions.
    "harsh_incast": table(switch={"buffer_packets": 64, "drop_thresholds": [8]}, workload=[INCAST]),
    # A star with one slow switch-to-host port (each end of a link its own rate), and a fat-tree.
    "star_bottleneck": table(
        topology={"kind": "star", "hosts": 6, "bottleneck_host": 0, "bottleneck_gbps": 10.0, "mtu": 9000},
        switch={"buffer_packets": 64},
        workload=[{"type": "incast", "senders": 4, "receiver": 0, "bytes": 200_000, "rounds": 2, "gap_us": 200}],
    ),
    "fat_tree": table(
        topology={"kind": "fat_tree", "k": 4, "mtu": 9000},
        workload=[{"type": "permutation", "bytes": 200_000, "rounds": 2, "gap_us": 50}],
    ),
    # Senders paced at their share (the default), with their random start phase.
    "paced": table(host_pacing="share", workload=[INCAST]),
    # TCP background (DCTCP, ECN-marked by DLCP's queues) beside DLCP: the hosts' IP stack over DLCP ports (on
    # ns-3's sockets both ways, as the baselines below).
    "tcp_background": table(tcp=NS3_TCP, workload=[INCAST, BACKGROUND]),
    # The TCP baselines: DCTCP on RED/ECN switch queues (marks drawn from each port's random stream), NewReno
    # on drop-tail FIFOs small enough to overflow, and a DCTCP parameter server (connections used both ways).
    # On ns-3's TCP sockets both ways, so that the ports alone differ (the lean TCP against those sockets:
    # tests/test_sim_lean_tcp.py).
    "dctcp": table(baseline="dctcp", tcp=NS3_TCP, workload=[INCAST, BACKGROUND]),
    "tcp": table(baseline="tcp", tcp=NS3_TCP, switch={"buffer_packets": 64}, workload=[INCAST, BACKGROUND]),
    "dctcp_ps": table(baseline="dctcp", tcp=NS3_TCP, workload=[SMALL_PS]),
    # K = 2: most arrivals in RED's random band (K to 2K + 2), so most marks are drawn.
    "dctcp_low_k": table(
        baseline="dctcp", tcp=NS3_TCP, switch={"ecn_threshold_packets": 2}, workload=[INCAST, BACKGROUND]
    ),
}


_RUNS: dict[str, dict[str, Any]] = {}


def run_once(t: dict[str, Any]) -> dict[str, Any]:
    """The summary of ``t``'s run (a copy): runs are seeded, so the same table gives the same summary, and the
    claims below are checked on the runs the comparisons made."""
    key = json.dumps(t, sort_keys=True)
    if key not in _RUNS:
        _RUNS[key] = runner.run(t)
    return copy.deepcopy(_RUNS[key])


def on_ports(t: dict[str, Any]) -> dict[str, Any]:
    """``t`` on DLCP's port model (the default ``ports``), the run :func:`_both` compares."""
    return run_once(t | {"ports": "dlcp"})


def _both(t: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    old = run_once(t | {"ports": "ns3"})
    new = on_ports(t)
    assert old["perf"]["port_model"] is False
    assert new["perf"]["port_model"] is True, (
        "the run must really use the port model for the comparison to mean anything"
    )
    return old, new


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_port_model_reproduces_ns3_devices_exactly(name: str) -> None:
    old, new = _both(SCENARIOS[name])
    assert old["perf"]["events"] == new["perf"]["events"], "the same events, one for one"
    for key in ("packets", "packet_hops"):
        assert old["perf"][key] == new["perf"][key], key
    old.pop("perf"), new.pop("perf")
    for r in (old, new):  # the port model's own statistics: ns-3's queue discs do not count them
        r["counters"].pop("queue_at_arrival_mean"), r["counters"].pop("queue_at_arrival_peak")
    assert old == new


def test_the_differential_scenarios_exercise_what_they_claim() -> None:
    # So that equality above is not equality of two idle runs.
    lone, _ = _both(SCENARIOS["lone_flow"])
    assert lone["flows"]["gradient"]["completed"] == 1
    drop = on_ports(SCENARIOS["priority_drop"])["counters"]["per_class"]
    assert drop["dropped"][1] > 0 and drop["forwarded"][6] > 0
    trim = on_ports(SCENARIOS["priority_trim"])["counters"]
    assert sum(trim["per_class"]["trimmed"]) > 0 and trim["dlcp_trimmed_received"] > 0
    harsh = on_ports(SCENARIOS["harsh_incast"])["counters"]
    assert sum(harsh["per_class"]["pushed_out"]) + sum(harsh["per_class"]["overflow"]) > 0
    star = on_ports(SCENARIOS["star_bottleneck"])
    assert star["flows"]["gradient"]["completed"] == 8 and star["counters"]["qdisc_dropped"] > 0
    tcp = on_ports(SCENARIOS["tcp_background"])
    assert sum(tcp["counters"]["per_class"]["marked"]) > 0, "ECN marks on the TCP background"
    assert tcp["flows"]["background"]["completed"] > 0
    dctcp = on_ports(SCENARIOS["dctcp"])
    assert dctcp["perf"]["port_model"] and dctcp["counters"]["per_class"]["marked"][0] > 0, "RED's marks"
    assert dctcp["flows"]["gradient"]["completed"] == dctcp["flows"]["gradient"]["count"]
    newreno = on_ports(SCENARIOS["tcp"])
    assert newreno["counters"]["per_class"]["overflow"][0] > 0, "drop-tail losses"
    ps = on_ports(SCENARIOS["dctcp_ps"])
    assert all(t > 0 for t in ps["jobs"][0]["iteration_s"]), "every iteration finished"
    assert ps["counters"]["tcp_connections"] == 4 * 2, "one per worker and server, pushes and pulls both ways"


@pytest.mark.parametrize(
    ("change", "uses"),
    [
        ({}, True),
        ({"baseline": "pfabric"}, True),
        ({"ports": "ns3"}, False),
        ({"routing": "global"}, False),  # stock ns-3: the benchmark's baseline
        ({"baseline": "dctcp"}, True),  # RED/ECN switch queues
        ({"baseline": "tcp"}, True),  # drop-tail FIFO switch queues
        ({"baseline": "dctcp", "ports": "ns3"}, False),
    ],
)
def test_port_model_where_it_applies(change: dict[str, Any], uses: bool) -> None:
    t = table(stop_s=0.002, workload=[{"type": "incast", "senders": 2, "bytes": 20_000}]) | change
    assert runner.run(t)["perf"]["port_model"] is uses


def test_unknown_ports_refused_naming_the_field() -> None:
    with pytest.raises(scenario.ScenarioError, match="ports"):
        scenario.from_table(table(ports="fast"))
