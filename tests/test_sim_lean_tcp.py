"""The lean TCP (simulations/cpp/lean_tcp.h) against ns-3's TCP sockets, which it replaces on the port model.

Every scenario runs twice on DLCP's port model, the same fabric and traffic: with ``tcp.stack = "ns3"`` (ns-3's
TcpSocketBase over the hosts' IP stacks, the reference) and with ``tcp.stack = "lean"`` (the default). The lean TCP
follows ns-3's rules at the baselines' settings but leaves some of ns-3's details out (docs/simulations.md,
"Baselines"), so runs are compared within tolerances rather than for equality:

* **No loss, no marks** (a lone flow): the same segments at the same instants; FCT within 0.5%.
* **Marks without loss** (a DCTCP incast): RED marks the same segments (at this MTU the runs agree to
  the digit; at 9,000 bytes the lean TCP's see up to a fifth more marks); FCTs within 5%, marks within 15%.
* **Loss** (NewReno incasts into small drop-tail buffers, permutations on the bench's fabric, parameter
  servers): which flow loses its last segments and waits for a timeout (1 ms here, several times a flow's
  time) turns on single events, so one run's p99 can move by a timeout either way. Compared over several
  seeds or buffer sizes: mean FCT and mean iteration time within 15%, p99 within 30%, and the queue's
  drops and marks of the same order (within a factor of 2, or both under 1% of the packets).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from sim_support import SMALL_PS, needs_ns3

from dlcp.simulations import runner

pytestmark = [needs_ns3, pytest.mark.slow, pytest.mark.xdist_group("sim_lean_tcp")]

LEAF_SPINE = {"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 8, "delay_us": 1.0}
INCAST = {"type": "incast", "senders": 8, "bytes": 400_000, "rounds": 2, "gap_us": 500}
PERMUTATION = {"type": "permutation", "bytes": 1_000_000, "rounds": 2, "gap_us": 100}


def table(seed: int = 1, mtu: int = 1500, **kw: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"name": "t", "seed": seed, "stop_s": 0.05, "topology": dict(LEAF_SPINE, mtu=mtu)}
    if mtu < 9000:
        t["dlcp"] = {"transport": {"payload_bytes": 1024}}  # unused by TCP; an MTU of 1500 must carry it
    t.update(copy.deepcopy(kw))
    return t


_RUNS: dict[str, dict[str, Any]] = {}


def run(t: dict[str, Any], stack: str) -> dict[str, Any]:
    key = json.dumps([t, stack], sort_keys=True)
    if key not in _RUNS:
        _RUNS[key] = runner.run(t | {"tcp": {"stack": stack}})
    return copy.deepcopy(_RUNS[key])


def both(t: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    ns3, lean = run(t, "ns3"), run(t, "lean")
    for r in (ns3, lean):
        assert r["perf"]["port_model"], "both on DLCP's port model: only the TCP differs"
    # Both carry the same traffic: the same packets, give or take retransmissions.
    assert lean["perf"]["packets"] == pytest.approx(ns3["perf"]["packets"], rel=0.02)
    return ns3, lean


def flows(r: dict[str, Any]) -> dict[str, Any]:
    f = r["flows"]["job" if r["jobs"] else "gradient"]
    assert f["completed"] == f["count"] > 0, "every message completes"
    return f


def queue_events(r: dict[str, Any]) -> tuple[int, int]:
    return r["counters"]["qdisc_dropped"], r["counters"]["per_class"]["marked"][0]


def same_order(a: int, b: int, packets: int) -> bool:
    return max(a, b) <= 2 * min(a, b) or max(a, b) < 0.01 * packets


def mean_ratio(pairs: list[tuple[dict[str, Any], dict[str, Any]]], key: str) -> float:
    return sum(flows(lean)[key] for _, lean in pairs) / sum(flows(ns3)[key] for ns3, _ in pairs)


@pytest.mark.parametrize("baseline", ["tcp", "dctcp"])
@pytest.mark.parametrize("mtu", [1500, 9000])
def test_a_lone_flow_takes_the_same_time(baseline: str, mtu: int) -> None:
    # The handshake, slow start from 10 segments, the peer's unscaled window until its first ACK (what holds a
    # first flight of jumbo segments back), an ACK per segment.
    t = table(mtu=mtu, baseline=baseline, workload=[{"type": "incast", "senders": 1, "receiver": 15, "bytes": 4 << 20}])
    ns3, lean = both(t)
    assert flows(lean)["fct_max_s"] == pytest.approx(flows(ns3)["fct_max_s"], rel=0.005)
    assert lean["perf"]["packets"] == ns3["perf"]["packets"]


def test_a_dctcp_window_marked_below_a_segment_does_not_stall_its_connection() -> None:
    """Marked at every queued packet (K = 1), DCTCP cuts its window by alpha/2 per window. ns-3's TcpDctcp lets it
    fall below a segment: once nothing is in flight, the next message on that persistent connection stays behind
    the silly-window check with no ACK or timer left to wake it, for good. The lean TCP floors ssthresh at 2
    segments, as Linux's DCTCP does, and every round of the incast completes."""
    switch = {"buffer_packets": 256, "ecn_threshold_packets": 1, "drop_thresholds": [32, 16, 8]}
    incast = {"type": "incast", "senders": 15, "bytes": 1_000_000, "rounds": 30, "gap_us": 2000}
    r = run(table(mtu=9000, stop_s=0.5, baseline="dctcp", switch=switch, workload=[incast]), "lean")
    assert queue_events(r)[1] > 0, "premise: the switches marked the incast"
    f = flows(r)  # every message completes
    assert f["fct_max_s"] < 0.01, "no message waited on a stalled connection"


@pytest.mark.parametrize("seed", [1, 2])
def test_dctcp_incast_is_marked_and_backs_off_alike(seed: int) -> None:
    ns3, lean = both(table(seed, baseline="dctcp", workload=[INCAST]))
    assert queue_events(ns3)[0] == queue_events(lean)[0] == 0, "ECN, not loss"
    marks_ns3, marks_lean = queue_events(ns3)[1], queue_events(lean)[1]
    assert marks_ns3 > 100 and marks_lean == pytest.approx(marks_ns3, rel=0.15)
    for key in ("fct_mean_s", "fct_p99_s"):
        assert flows(lean)[key] == pytest.approx(flows(ns3)[key], rel=0.05), key


def _agree_under_loss(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    assert mean_ratio(pairs, "fct_mean_s") == pytest.approx(1, abs=0.15)
    assert mean_ratio(pairs, "fct_p99_s") == pytest.approx(1, abs=0.30)
    for ns3, lean in pairs:
        for a, b in zip(queue_events(ns3), queue_events(lean), strict=True):
            assert same_order(a, b, ns3["perf"]["packets"]), (queue_events(ns3), queue_events(lean))


def test_newreno_incast_into_drop_tail_recovers_alike() -> None:
    # Eight senders into 64-packet buffers: SACK recovery, PRR and, for tail losses, the 1 ms timeout.
    tables = [
        table(seed, mtu, baseline="tcp", switch={"buffer_packets": 64}, workload=[INCAST])
        for seed in (1, 2, 3)
        for mtu in (1500, 9000)
    ]
    pairs = [both(t) for t in tables]
    assert all(queue_events(ns3)[0] > 50 for ns3, _ in pairs), "drop-tail losses"
    _agree_under_loss(pairs)


@pytest.mark.parametrize("baseline", ["tcp", "dctcp"])
def test_permutation_agrees(baseline: str) -> None:
    # The bench's traffic on 16 hosts: every host sends 1 MB to a partner twice, flows colliding on ECMP paths.
    pairs = [both(table(seed, baseline=baseline, workload=[PERMUTATION])) for seed in (1, 2)]
    _agree_under_loss(pairs)


def test_parameter_server_iterations_agree() -> None:
    # Connections used both ways (pushes and pulls), NewReno into buffers of several sizes and DCTCP.
    tables = [table(baseline="tcp", switch={"buffer_packets": b}, workload=[SMALL_PS]) for b in (32, 48, 64, 96)]
    tables.append(table(baseline="dctcp", workload=[SMALL_PS]))
    pairs = [both(t) for t in tables]
    _agree_under_loss(pairs)
    mean_ns3 = sum(sum(ns3["jobs"][0]["iteration_s"]) for ns3, _ in pairs)
    mean_lean = sum(sum(lean["jobs"][0]["iteration_s"]) for _, lean in pairs)
    assert all(t > 0 for _, lean in pairs for t in lean["jobs"][0]["iteration_s"]), "every iteration finished"
    assert mean_lean == pytest.approx(mean_ns3, rel=0.15)


def test_the_lean_tcp_is_what_runs() -> None:
    # The port model's runs use it by default, DLCP's for their TCP background as the baselines for all their
    # traffic, and ns-3's sockets only on request: a run on each shows the lean TCP's fewer events per packet.
    t = table(baseline="dctcp", workload=[INCAST])
    default = runner.run(t)
    ns3, lean = both(t)
    assert default["perf"]["events"] == lean["perf"]["events"] < ns3["perf"]["events"]
    dlcp_bg = table(workload=[dict(INCAST, rounds=1), {"type": "background", "load": 0.2, "duration_us": 500}])
    ns3, lean = run(dlcp_bg, "ns3"), run(dlcp_bg, "lean")
    assert runner.run(dlcp_bg)["perf"]["events"] == lean["perf"]["events"] < ns3["perf"]["events"]


@pytest.mark.parametrize("seed", [1, 2])
def test_background_beside_dlcp_agrees(seed: int) -> None:
    # DLCP's gradients in their classes, the background's DCTCP in queue 0 behind them, marked at the same K: the
    # gradients' FCTs do not depend on which TCP carries the background, and the background's agree as a DCTCP
    # incast's do (mean within 15%, marks of the same order).
    t = table(seed=seed, workload=[INCAST, {"type": "background", "load": 0.5, "duration_us": 2000}])
    ns3, lean = both(t)
    (f3, c3), (fl, cl) = ((r["flows"], r["counters"]) for r in (ns3, lean))
    assert fl["gradient"]["completed"] == f3["gradient"]["completed"] == f3["gradient"]["count"]
    assert fl["gradient"]["fct_p99_s"] == pytest.approx(f3["gradient"]["fct_p99_s"], rel=0.05)
    assert fl["background"]["completed"] == f3["background"]["completed"] == f3["background"]["count"] > 50
    assert fl["background"]["fct_mean_s"] == pytest.approx(f3["background"]["fct_mean_s"], rel=0.15)
    assert fl["background"]["fct_p99_s"] == pytest.approx(f3["background"]["fct_p99_s"], rel=0.30)
    marks3, marksl = c3["per_class"]["marked"][0], cl["per_class"]["marked"][0]
    assert marks3 > 1000, "the background is marked: the comparison covers DCTCP's reaction"
    assert same_order(marksl, marks3, lean["perf"]["packets"])
