"""The simulator's TCP: persistent connections, as gloo and NCCL keep theirs (simulations/cpp/tcp_channels.h).

One connection per pair of hosts and workload tag for the whole run, used both ways; a message is a
run of bytes on its connection's stream, complete when the receiver has read its last byte.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from sim_support import needs_ns3

from dlcp.simulations import runner

pytestmark = [needs_ns3]

PAIR = {"kind": "star", "hosts": 2, "delay_us": 1.0, "mtu": 9000}
"""Two hosts behind one switch: an incast of one sender to host 1 always comes from host 0."""
LINE_BPS = 100e9


def table(*workload: dict[str, Any], baseline: str = "tcp", **kw: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"name": "t", "seed": 1, "stop_s": 0.05, "baseline": baseline, "topology": dict(PAIR)}
    t["workload"] = copy.deepcopy(list(workload))
    return t | kw


def to(receiver: int, nbytes: int, **kw: Any) -> dict[str, Any]:
    return {"type": "incast", "senders": 1, "receiver": receiver, "bytes": nbytes} | kw


@pytest.mark.parametrize("baseline", ["tcp", "dctcp"])
def test_one_connection_per_pair_for_every_message_both_ways(baseline: str) -> None:
    r = runner.run(
        table(
            to(1, 300_000, rounds=3, gap_us=500), to(0, 200_000, rounds=2, gap_us=700, start_us=100), baseline=baseline
        )
    )
    flows = r["flows"]["gradient"]
    assert flows["count"] == 5 and flows["completed"] == 5
    assert r["counters"]["tcp_connections"] == 1


def test_a_connection_per_pair_and_tag() -> None:
    # Background flows between 4 hosts: at most one connection per pair, far fewer than flows; the
    # gradient incast (another tag) has its own.
    t = table(
        to(3, 100_000, rounds=2, gap_us=300),
        {"type": "background", "load": 0.3, "duration_us": 2000, "max_flow_bytes": 200_000},
        topology=dict(PAIR, hosts=4),
    )
    r = runner.run(t)
    bg = r["flows"]["background"]
    assert bg["completed"] == bg["count"] > 12
    pairs_used = r["counters"]["tcp_connections"] - 1  # less the incast's
    assert 1 <= pairs_used <= 6 < bg["count"]


def test_a_reused_connection_skips_the_handshake_and_slow_start() -> None:
    # The same 1 MB message alone, and once more 2 ms later on the connection the first opened.
    alone = runner.run(table(to(1, 1_000_000)))["flows"]["gradient"]
    twice = runner.run(table(to(1, 1_000_000, rounds=2, gap_us=2000)))["flows"]["gradient"]
    assert twice["completed"] == 2
    first, second = twice["fct_max_s"], 2 * twice["fct_p50_s"] - twice["fct_max_s"]
    assert first == pytest.approx(alone["fct_max_s"])
    line = 1_000_000 * 8 / LINE_BPS
    assert line <= second < first - 4e-6, "no SYN round trip (4 links of 1 us) and an open window"


def test_messages_on_one_connection_complete_in_stream_order() -> None:
    # A 2 MB message, then a 10 kB one to the same host at the same instant: the small one is read after
    # the large one's last byte (one stream), not beside it on a connection of its own.
    r = runner.run(table(to(1, 2_000_000), to(1, 10_000)))
    flows = r["flows"]["gradient"]
    assert flows["completed"] == 2 and r["counters"]["tcp_connections"] == 1
    # Both end together, the small one last: neither is shorter than the large one's bytes at the line.
    shorter, longer = 2 * flows["fct_p50_s"] - flows["fct_max_s"], flows["fct_max_s"]
    assert 2_000_000 * 8 / LINE_BPS <= shorter <= longer < shorter + 2 * 10_000 * 8 / LINE_BPS


def test_a_message_after_idle_time_completes() -> None:
    # The connection stays open between messages far apart (no timeout closes it).
    r = runner.run(table(to(1, 50_000, rounds=3, gap_us=20_000), stop_s=0.1))
    assert r["flows"]["gradient"]["completed"] == 3 and r["counters"]["tcp_connections"] == 1


def test_connections_are_open_before_the_first_message() -> None:
    # Opened at set-up (a job's rendezvous): a first message at 2 ms finds its connection established.
    at_zero = runner.run(table(to(1, 1_000_000)))["flows"]["gradient"]["fct_max_s"]
    later = runner.run(table(to(1, 1_000_000, start_us=2000)))["flows"]["gradient"]["fct_max_s"]
    assert later < at_zero - 4e-6, "no SYN round trip (4 links of 1 us)"
