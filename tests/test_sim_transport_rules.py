"""The simulated DLCP sender's rules that differ from a plain reading of the host stack (docs/simulations.md).

Tiny runs (16 hosts, one incast); each test states the property it checks.
"""

from __future__ import annotations

from typing import Any

from sim_support import needs_ns3

from dlcp.rate_control import headroom
from dlcp.simulations import runner

pytestmark = [needs_ns3]

LEAF_SPINE = {"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 8, "delay_us": 1.0, "mtu": 9000}


def incast(packets: int, **kw: Any) -> dict[str, Any]:
    load = {"type": "incast", "senders": 6, "receiver": 15, "bytes": packets * 8192}
    return {
        "name": "rules", "seed": 1, "stop_s": 0.05, "topology": dict(LEAF_SPINE),
        "switch": {"buffer_packets": 128, "drop_thresholds": [4]},  # drop class 1 dropped above 4 queued
        "dlcp": {"policy": {"push": {"loss_bound": 0.01, "drop_quantiles": [0.5]}}},
        "workload": [load], **kw,
    }  # fmt: skip


def selective_drops(r: dict[str, Any]) -> int:
    return sum(r["counters"]["per_class"]["dropped"])


def test_a_message_whose_bound_covers_no_packet_is_sent_protected() -> None:
    # 1% of 50 packets is half a packet: every packet drop class 0, nothing for the switch to cut;
    # 1% of 200 packets is 2: half the packets eligible, and a 6:1 incast cuts them.
    # Senders at the line: paced at their share they would give the switch nothing to cut.
    small, large = runner.run(incast(50, host_pacing="line")), runner.run(incast(200, host_pacing="line"))
    assert selective_drops(small) == 0
    assert selective_drops(large) > 0
    assert small["flows"]["gradient"]["completed"] == large["flows"]["gradient"]["completed"] == 6


def test_pfabric_times_out_in_round_trips_not_milliseconds() -> None:
    # pFabric's senders stay at line rate and time out after 3 base round trips (41 us here): p99
    # 2.5 ms on this run. Its old approximation (senders halving on lossy passes, 1 ms probe
    # timeouts doubling to 20 ms) gave 3.6 ms here (and 22.9 ms on the incast_tail figure).
    t = incast(32, baseline="pfabric", stop_s=0.1)
    t["workload"][0] |= {"rounds": 3, "gap_us": 1000}
    bg = {"type": "background", "distribution": "websearch", "load": 0.5, "duration_us": 3000, "max_flow_bytes": 10**6}
    t["workload"].append(bg)
    g = runner.run(t)["flows"]["gradient"]
    assert g["completed"] == 18 and g["retransmitted_packets"] > 0, "the buffers must overflow to test anything"
    assert g["fct_p99_s"] < 3e-3, g["fct_p99_s"]


def test_senders_paced_at_their_share_do_not_overflow_an_incast() -> None:
    # 6 senders x 200 packets into one 100 Gbit/s port: at the line the first pass overflows it and
    # is retransmitted; paced at a sixth of the port (less the wire's overheads) nothing is lost and the incast ends
    # within 10% of the port's own time for the bytes.
    paced, line = runner.run(incast(200)), runner.run(incast(200, host_pacing="line"))
    assert line["flows"]["gradient"]["retransmitted_packets"] > 0, "unpaced, the incast must overflow"
    g = paced["flows"]["gradient"]
    assert g["completed"] == 6 and g["retransmitted_packets"] == 0
    assert sum(paced["counters"]["per_class"]["dropped"]) == sum(paced["counters"]["per_class"]["overflow"]) == 0
    ideal = 6 * 200 * 8192 * 8 / 100e9
    assert ideal < g["fct_max_s"] < 1.1 * ideal / headroom(8192), g["fct_max_s"]
    assert g["fct_max_s"] < line["flows"]["gradient"]["fct_max_s"]
    share = int(100e9 / 6 * headroom(8192))
    senders = [h for h, r in enumerate(paced["host_rate_bps"]) if r != 100e9]
    assert len(senders) == 6 and all(abs(paced["host_rate_bps"][h] - share) <= 8 for h in senders), "at their share"


def test_senders_paced_over_the_active_senders_use_the_port_when_few_of_the_possible_are_busy() -> None:
    # Each round a different 6 of the 15 other hosts send 100 packets to host 15: the static share counts every
    # host that sends there in some round (12 of them in these 3 rounds), so a round takes about 12/6 of the
    # port's time for its bytes; counting
    # the senders active now, each sends at a sixth and the round takes the port's time. Nothing is lost.
    rounds = {"rounds": 3, "gap_us": 1000}
    static, active = incast(100, stop_s=0.1), incast(100, stop_s=0.1, host_pacing="active")
    for t in (static, active):
        t["workload"][0] |= rounds
    s, a = runner.run(static)["flows"]["gradient"], runner.run(active)
    g = a["flows"]["gradient"]
    assert g["completed"] == s["completed"] == 18 and g["retransmitted_packets"] == 0
    assert sum(a["counters"]["per_class"]["dropped"]) == sum(a["counters"]["per_class"]["overflow"]) == 0
    ideal = 6 * 100 * 8192 * 8 / 100e9
    assert ideal < g["fct_max_s"] < 1.15 * ideal / headroom(8192), g["fct_max_s"]
    assert s["fct_max_s"] > 1.5 * g["fct_max_s"], "the static share waits for 15 senders that are not all there"
