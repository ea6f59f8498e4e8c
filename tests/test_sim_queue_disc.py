"""The ns-3 DLCP queue disc against the shared P4 switch vectors (classification, selective drop, trimming).

A queue disc decides queue, drop and trim; it does not route. So each vector's
routing and ECMP entries are skipped, and outputs are compared from the IPv4
payload on (UDP, DLCP header, payload) plus the IPv4 total length and TOS; the
next-hop rewrite (MACs, TTL, checksum) is the router's part. A stalled queue is
modelled by not dequeuing until the case's packets are all in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_support import VECTORS, needs_ns3

from dlcp.p4 import vectors

FILES = ("classification.json", "selective_drop.json", "trimming.json")
CASES = [c for f in FILES for c in vectors.load_file(VECTORS / "switch" / f)]
ACTIONS = {"set_queue": 0, "mark_drop_eligible": 1, "use_packet_priority": 2}
ON_CONGESTION = {"admit_all": 0, "drop_above": 1, "trim_above": 2}
KEYS = ("job_id", "packet_type", "priority", "drop_class", "kind")
ETH = 14


def _harness(case: vectors.Case, port_model: bool):  # type: ignore[no-untyped-def]
    from dlcp.simulations import engine

    ns = engine.load()
    h = ns.QueueDiscHarness(1000, port_model)
    for e in case.entries:
        table = e.table.rsplit(".", 1)[-1]
        assert e.action is not None or table == "next_hops"
        if table == "dlcp_ports":
            h.AddDlcpPort(e.match["dst_port"]["exact"])
        elif table == "dlcp_classes":
            assert e.action is not None
            vm = [int(x) for k in KEYS for x in e.match[k]["ternary"]]
            action = e.action.name.rsplit(".", 1)[-1]
            h.AddClassRule(e.priority or 0, vm, ACTIONS[action], int(e.action.params.get("queue", 0)))
        elif table == "dlcp_drop_thresholds":
            assert e.action is not None
            action = e.action.name.rsplit(".", 1)[-1]
            h.SetThreshold(
                e.match["queue"]["exact"],
                e.match["drop_class"]["exact"],
                ON_CONGESTION[action],
                int(e.action.params.get("threshold", 0)),
            )
        # ipv4_routes / next_hops: routing, not the queue disc's business
    return h


def _view(frame_ip: bytes) -> tuple[bytes, bytes, int]:
    """(L4 onwards, IPv4 total length, TOS) of an IPv4 packet."""
    return frame_ip[20:], frame_ip[2:4], frame_ip[1]


@needs_ns3
@pytest.mark.parametrize("port_model", [False, True], ids=["queue_disc", "port_model"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_queue_disc_matches_switch_vectors(case: vectors.Case, port_model: bool) -> None:
    # Both DLCP queues: ns-3's queue disc (queue_disc.h) and the port model's (port.h).
    h = _harness(case, port_model)
    stalled = bool(case.stalled_queues)
    expected_late: list[tuple[bytes, bytes, int]] = []
    for p in case.packets:
        assert p.expect is not None, "queue-disc vectors have exact expectations"
        q = h.Enqueue(p.frame.data[ETH:].hex())
        if not p.expect:
            assert q == -1, f"{case.name}: {p.note}: should be dropped"
            continue
        assert q >= 0, f"{case.name}: {p.note}: should be admitted"
        want = _view(p.expect[0].data[ETH:])
        if stalled and not p.settle:
            expected_late.append(want)
            continue
        got = bytes.fromhex(str(h.Dequeue()))
        assert _view(got) == want, f"{case.name}: {p.note}"
    # Drain what the stall held: strict priority order, the same packets as expected.
    drained, classes = [], []
    while out := str(h.Dequeue()):
        drained.append(_view(bytes.fromhex(out)))
        classes.append(h.LastDequeuedQueue())
    assert sorted(drained) == sorted(expected_late), case.name
    assert classes == sorted(classes, reverse=True), f"{case.name}: not strict priority: {classes}"
    for c in case.counters:
        name = c.counter.rsplit(".", 1)[-1]
        got_n = {"forwarded": h.Forwarded, "dropped": h.Dropped, "trimmed": h.Trimmed}[name](c.klass)
        assert got_n == c.packets, f"{case.name}: {name}[{c.klass}]"


def test_vector_files_present() -> None:
    for f in FILES:
        assert Path(VECTORS / "switch" / f).exists()
