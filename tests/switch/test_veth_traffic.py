"""The running switch under real traffic on veths: a rate-limited port under overload, and table
updates from Python while the data-plane thread forwards (every frame forwarded, none lost to an update)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from switch_support import dlcp_frame, eligible_by_priority, entry, exact, route_to

from dlcp.p4 import names
from dlcp.testbed.rig import VethSwitch, host_if
from dlcp.testbed.switch import _dataplane
from dlcp.testbed.switch.entries import Op, ProfileGroup

pytestmark = pytest.mark.root

RATE = 100_000_000
THRESHOLD = 20


@pytest.fixture
def rig() -> Iterator[VethSwitch]:
    with VethSwitch([1, 2, 3], buffer=512 << 10, host_sockets=False) as r:
        yield r


def blast(rig: VethSwitch, frames: list[bytes], seconds: float) -> int:
    with rig.ns.entered():
        return int(_dataplane.blast(host_if(1), frames, 1 << 40, seconds, 32))


def wait_idle(rig: VethSwitch, timeout: float = 10) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = rig.switch.stats()
        busy = any(p["queued_bytes"] or p["inflight_bytes"] for p in st["ports"].values())
        if not busy or time.monotonic() > deadline:
            return st
        time.sleep(0.05)


def test_overload_of_a_rate_limited_port(rig: VethSwitch) -> None:
    dp = rig.switch
    dp.configure_port(replace(dp.ports[2], rate_bps=RATE))
    route_to(dp, [2])
    eligible_by_priority(dp)
    dp.write_entry(
        Op.INSERT,
        entry(
            names.DLCP_DROP_THRESHOLDS,
            [exact("queue", 1), exact("drop_class", 3)],
            names.DROP_ABOVE,
            threshold=THRESHOLD,
        ),
    )
    # 1 frame in 64 is class 6 (protected), the rest class 1 drop class 3: far more than 100 Mbit/s offered
    frames = [dlcp_frame(1000, priority=6 if i == 0 else 1, drop_class=0 if i == 0 else 3, seq=i) for i in range(64)]
    t0 = time.monotonic()
    s0 = dp.stats()["ports"][2]["classes"]
    sent = blast(rig, frames, 1.0)
    elapsed = time.monotonic() - t0
    s1 = dp.stats()["ports"][2]["classes"]
    st = wait_idle(rig)
    c1, c6 = st["ports"][2]["classes"][1], st["ports"][2]["classes"][6]
    assert st["ports"][1]["rx"] >= 0.9 * sent
    bits = sum(s1[q]["sent_bytes"] - s0[q]["sent_bytes"] + 24 * (s1[q]["sent"] - s0[q]["sent"]) for q in (1, 6)) * 8
    # the port stands for a 100 Mbit/s link: never faster; slower only while the shared machine starves
    # the data-plane thread for longer than the shaper's bucket covers (1 ms), hence the wide lower margin
    assert 0.4 * RATE <= bits / elapsed <= 1.1 * RATE, bits / elapsed
    assert c1["enqueued"] > 0 and c1["dropped"].get("selective", 0) > 0
    assert c1["depth_hwm"] <= THRESHOLD + 1  # admitted while the queue holds <= THRESHOLD packets
    assert c1["dropped"].keys() == {"selective"}, c1["dropped"]  # dropped at the threshold, never by the buffer
    assert c6["dropped"] == {} and c6["sent"] == c6["enqueued"] > 0  # the high class loses nothing


def test_table_updates_during_traffic_lose_no_frame(rig: VethSwitch) -> None:
    dp = rig.switch
    route_to(dp, [2, 3])
    frames = [dlcp_frame(300, priority=1, seq=i) for i in range(64)]
    stop = threading.Event()
    updates = 0

    def flap() -> None:
        nonlocal updates
        groups = (((102, 1),), ((103, 1),), ((102, 1), (103, 1)))
        while not stop.is_set():
            dp.write_group(Op.MODIFY, ProfileGroup(names.ECMP_SELECTOR, 1, groups[updates % 3]))
            updates += 1

    t = threading.Thread(target=flap)
    t.start()
    try:
        sent = blast(rig, frames, 1.0)
    finally:
        stop.set()
        t.join()
    st = wait_idle(rig)
    rx = st["ports"][1]["rx"]
    out = sum(st["ports"][p]["classes"][1]["sent"] for p in (2, 3))
    assert updates > 50 and sent > 0
    assert st["ports"][1]["rx_dropped"] == {}, st["ports"][1]["rx_dropped"]
    assert out == rx, (out, rx)
    assert min(st["ports"][p]["classes"][1]["sent"] for p in (2, 3)) > 0
