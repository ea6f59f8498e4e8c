"""The running switch under real traffic on veths: a rate-limited port under overload, and table
updates from Python while the data-plane thread forwards (every frame forwarded, none lost to an update)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from switch_support import dlcp_frame, eligible_by_priority, entry, exact, route_to

from dlcp.p4 import names
from dlcp.testbed.rig import VethSwitch, host_if
from dlcp.testbed.switch import _dataplane
from dlcp.testbed.switch.entries import Op, ProfileGroup

pytestmark = [pytest.mark.root, pytest.mark.timing]  # the port's rate

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


ATTEMPTS = 3
"""Windows tried before the overload test gives up on its premise (and skips, saying why)."""
MAX_STALL_SHARE = 0.25
"""The share of a window the data-plane thread may spend off the CPU (with work) for the rate to count."""


def overload_window(rig: VethSwitch, frames: list[bytes]) -> dict[str, Any]:
    """One second of overload from port 1 to port 2: what was offered, what came out, how starved the switch was."""
    dp = rig.switch
    times0 = dp.thread_times()
    t0 = time.monotonic()
    s0 = dp.stats()["ports"][2]["classes"]
    sent = blast(rig, frames, 1.0)
    elapsed = time.monotonic() - t0
    s1 = dp.stats()["ports"][2]["classes"]
    times1 = dp.thread_times()
    assert times0 is not None and times1 is not None
    st = wait_idle(rig)
    delta = {
        q: {
            "sent": st["ports"][2]["classes"][q]["sent"] - s0[q]["sent"],
            "enqueued": st["ports"][2]["classes"][q]["enqueued"] - s0[q]["enqueued"],
            "dropped": dict(Counter(st["ports"][2]["classes"][q]["dropped"]) - Counter(s0[q]["dropped"])),
        }
        for q in (1, 6)
    }
    bits = sum(s1[q]["sent_bytes"] - s0[q]["sent_bytes"] + 24 * (s1[q]["sent"] - s0[q]["sent"]) for q in (1, 6)) * 8
    return {
        "sent": sent, "elapsed": elapsed, "bps": bits / elapsed, "delta": delta, "end": st,
        "cpu_s": times1[0] - times0[0], "stall_s": times1[1] - times0[1],
    }  # fmt: skip


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
    buffer = rig.buffer
    room = buffer - (THRESHOLD + 1) * len(frames[1])  # what class 6 may fill before class 1 meets a full buffer
    missed = []
    for _ in range(ATTEMPTS):
        w = overload_window(rig, frames)
        st, c1, c6 = w["end"], w["delta"][1], w["delta"][6]
        # The switch's own rules, whatever the load:
        assert st["ports"][1]["rx"] >= 0.9 * w["sent"]
        assert w["bps"] <= 1.1 * RATE, w["bps"]  # the port stands for a 100 Mbit/s link: never faster
        assert c1["enqueued"] > 0 and c1["dropped"].get("selective", 0) > 0
        assert st["ports"][2]["classes"][1]["depth_hwm"] <= THRESHOLD + 1  # admitted while it holds <= THRESHOLD
        assert c1["dropped"].keys() <= {"selective", "buffer", "pushed_out"}, c1["dropped"]
        if c1["dropped"].keys() - {"selective"}:  # the buffer drops only when it is full
            assert st["ports"][2]["buffer_hwm"] + len(frames[1]) > buffer, (st["ports"][2]["buffer_hwm"], buffer)
        # The premise of the rest: the data-plane thread kept up. Class 6 is never drop-eligible, and while
        # the thread waits for a CPU the port sends nothing, so class 6 backs up at its offered rate (the
        # frames wait in the kernel's ring and are queued at once when the thread runs). The selective
        # threshold, not the buffer, does all the dropping only while that backlog stays within `room`: sure
        # when even all the waiting in the window, back to back, backs up less. The port reaches its rate
        # only if the thread waited for a small part of the window.
        c6_offered = w["sent"] / len(frames) * len(frames[0]) / w["elapsed"]  # bytes/s
        if w["stall_s"] * c6_offered < room and w["stall_s"] < MAX_STALL_SHARE * w["elapsed"]:
            assert w["bps"] >= 0.4 * RATE, w  # slower only while the machine starves the thread
            assert c1["dropped"].keys() == {"selective"}, c1["dropped"]  # dropped at the threshold, not the buffer
            assert c6["dropped"] == {} and c6["sent"] == c6["enqueued"] > 0, c6  # the high class loses nothing
            return
        missed.append(
            f"waited {1e3 * w['stall_s']:.0f} ms for a CPU in {1e3 * w['elapsed']:.0f} ms, the buffer holds "
            f"{1e3 * room / c6_offered:.0f} ms of class 6"
        )
    pytest.skip(
        f"premise not met in {ATTEMPTS} windows: the data-plane thread was starved of CPU ({'; '.join(missed)})"
    )


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


SPACED_RATE = 40_000_000
"""Port 2's rate in the arrival-time test: a 1000-byte frame takes 0.2 ms of it."""
SPACED_GAP_S = 0.001
SPACED_FRAMES = 300
SPACED_THRESHOLD = 2
BLOCK_TIMEOUT_MS = 100
"""The stopped switch's ring holds the frames in blocks the kernel closes on this timer (or when full)."""


def implied_drops(arrivals: list[float], service_s: float, threshold: int) -> int:
    """Frames a queue served one per ``service_s`` would refuse at ``threshold``, given when they arrived.

    A frame waits in the queue until its transmission starts; one that finds ``threshold`` or more waiting is
    refused (one fewer than the switch needs, so the count errs towards more refusals).
    """
    starts: list[float] = []
    refused = 0
    for t in arrivals:
        if sum(1 for s in starts if s > t) >= threshold:
            refused += 1
            continue
        starts.append(max(t, starts[-1] + service_s) if starts else t)
    return refused


def test_frames_are_admitted_as_they_arrived() -> None:
    """Frames that arrived a millisecond apart and are taken together (here: sent while the data-plane thread
    is stopped, as a loaded machine keeps it from a CPU) are each admitted against the queue as it stood when
    they arrived, by the kernel's receive timestamp. Into a port that sends one in 0.2 ms, frames 1 ms apart
    never find 2 waiting: the selective threshold of 2 refuses only what the sender's own timing bunched up
    (measured from its send times); taken at once by their order alone, all but the first few would be."""
    with VethSwitch([1, 2], buffer=512 << 10, start=False, rx_block_timeout_ms=BLOCK_TIMEOUT_MS) as rig:
        dp = rig.switch
        dp.configure_port(replace(dp.ports[2], rate_bps=SPACED_RATE))
        route_to(dp, [2])
        eligible_by_priority(dp)
        threshold = [exact("queue", 1), exact("drop_class", 3)]
        dp.write_entry(
            Op.INSERT, entry(names.DLCP_DROP_THRESHOLDS, threshold, names.DROP_ABOVE, threshold=SPACED_THRESHOLD)
        )
        frames = [dlcp_frame(1000, priority=1, drop_class=3, seq=i) for i in range(SPACED_FRAMES)]
        sent_at: list[float] = []
        due = time.monotonic()
        for frame in frames:
            while (now := time.monotonic()) < due:
                time.sleep(min(due - now, 0.0005))
            rig.send(1, frame)
            sent_at.append(time.monotonic())  # after the send: the frame arrived by then (a late one no sooner)
            due += SPACED_GAP_S
        time.sleep(2 * BLOCK_TIMEOUT_MS / 1000)  # the kernel closes the last block on its timer
        dp.start()
        assert rig.wait_received(SPACED_FRAMES, timeout=10)
        assert rig.wait_idle()
        st = dp.stats()
        c1 = st["ports"][2]["classes"][1]
        service = (len(frames[0]) + 24) * 8 / SPACED_RATE
        implied = implied_drops(sent_at, service, SPACED_THRESHOLD)
        if implied > SPACED_FRAMES // 10:
            pytest.skip(f"premise not met: the sender's own timing bunched {implied} frames (the machine is loaded)")
        refused = c1["dropped"].get("selective", 0)
        assert c1["enqueued"] + refused == SPACED_FRAMES
        assert st["late_frames"] >= SPACED_FRAMES // 2  # the premise: taken late, together
        assert refused <= implied + SPACED_FRAMES // 100, (refused, implied)
