"""Egress queueing of the software switch on a virtual clock: strict priority, the shaper, selective
drop and trim at the configured thresholds, the buffer, and the impairments (loss, delay)."""

from __future__ import annotations

import pytest
from switch_support import PAYLOAD, dlcp_frame, eligible_by_priority, entry, exact, route_to, ternary, virtual_switch

from dlcp.p4 import names, sizes
from dlcp.testbed.switch import _dataplane  # type: ignore[attr-defined]
from dlcp.testbed.switch.config import PortConfig
from dlcp.testbed.switch.dataplane import DataPlane
from dlcp.testbed.switch.entries import Op
from dlcp.wire import Header

MBIT = 10**6
WIRE = _dataplane.WIRE_OVERHEAD  # preamble, FCS and gap the shaper charges per frame


def shaped(rate_bps: int, buffer: int = 4 << 20, **kw: object) -> DataPlane:
    dp = virtual_switch([1, 2], {2: PortConfig(port=2, interface=None, rate_bps=rate_bps, buffer_bytes=buffer, **kw)})  # type: ignore[arg-type]
    route_to(dp, [2])
    return dp


def run_until_empty(dp: DataPlane, step_ns: int, limit_ns: int = 10**10) -> list[tuple[int, int, bytes]]:
    """(time, port, frame) of every frame sent while the clock moves on in steps."""
    out = []
    t = dp.now_ns
    while t < limit_ns:
        sent = dp.drain()
        out += [(t, port, f) for port, f in sent]
        st = dp.stats()["ports"][2]
        if not sent and st["queued_bytes"] == 0 and st["inflight_bytes"] == 0:
            break
        t += step_ns
        dp.set_time(t)
    return out


def priority_of(frame: bytes) -> int:
    return Header.unpack(frame, PAYLOAD).priority


def test_strict_priority_serves_the_highest_class_first() -> None:
    dp = shaped(100 * MBIT)
    for i in range(200):
        dp.inject(1, dlcp_frame(1000, priority=1 if i % 2 else 6, seq=i))
    order = [priority_of(f) for _, _, f in run_until_empty(dp, 10_000)]
    # everything was queued before the first departure: all of class 6, then all of class 1
    assert order == [6] * 100 + [1] * 100


def test_the_shaper_sends_at_its_rate() -> None:
    dp = shaped(1000 * MBIT)
    n, size = 2000, 1500
    for i in range(n):
        dp.inject(1, dlcp_frame(size, seq=i))
    times = [t for t, _, _ in run_until_empty(dp, 1_000)]
    assert len(times) == n
    ideal = n * (size + WIRE) * 8  # ns at 1 Gbit/s
    span = times[-1] - times[0]
    burst = int(1000 * MBIT * 0.001 / 8)  # the default bucket: 1 ms at the rate
    expected = ideal - burst * 8  # the first bucket-full leaves at once
    assert abs(span - expected) / expected < 0.02, (span, expected)


def test_overload_the_highest_class_gets_its_share_first() -> None:
    """Offered 160% of a 100 Mbit/s port for 50 ms: class 6 (30%) all through; class 1 gets the rest."""
    rate = 100 * MBIT
    dp = shaped(rate, buffer=256 << 10)
    size = 1000
    step = 10_000  # 10 us
    sent = {1: 0, 6: 0}
    offered = {1: 0, 6: 0}
    t = 0
    per_step_bytes = {6: rate * 0.3 / 8 * step / 1e9, 1: rate * 1.3 / 8 * step / 1e9}
    credit = {1: 0.0, 6: 0.0}
    while t < 50_000_000:
        for cls in (6, 1):
            credit[cls] += per_step_bytes[cls]
            while credit[cls] >= size:
                credit[cls] -= size
                dp.inject(1, dlcp_frame(size, priority=cls, seq=offered[cls]))
                offered[cls] += 1
        for _, f in dp.drain():
            sent[priority_of(f)] += 1
        t += step
        dp.set_time(t)
    classes = dp.stats()["ports"][2]["classes"]
    assert classes[6]["dropped"] == {} and sent[6] >= offered[6] - 2  # at most a couple still queued
    # the lower class absorbs the overload: dropped when the buffer is full, pushed out by class 6
    assert classes[1]["dropped"].get("buffer", 0) > 0 and classes[1]["dropped"].get("pushed_out", 0) > 0
    capacity = rate * 0.05 / ((size + WIRE) * 8)
    assert sent[1] + sent[6] >= 0.97 * capacity
    assert abs(sent[1] - (capacity - sent[6])) <= 0.05 * capacity


THRESHOLDS = {1: 6, 2: 3, 3: 0}


def thresholds_switch(trim: bool) -> DataPlane:
    dp = shaped(10 * MBIT, buffer=256 << 10)
    eligible_by_priority(dp)
    action = names.TRIM_ABOVE if trim else names.DROP_ABOVE
    for dc, th in THRESHOLDS.items():
        dp.write_entry(
            Op.INSERT,
            entry(names.DLCP_DROP_THRESHOLDS, [exact("queue", 1), exact("drop_class", dc)], action, threshold=th),
        )
    return dp


@pytest.mark.parametrize("trim", [False, True])
@pytest.mark.parametrize("drop_class", [0, 1, 2, 3])
def test_selective_drop_and_trim_exactly_at_the_thresholds(trim: bool, drop_class: int) -> None:
    """An eligible packet is dropped (or trimmed) when its queue holds more than the threshold, and only
    then; drop class 0 never. Each queue depth 0..9 is probed on a fresh switch."""
    for depth in range(10):
        dp = thresholds_switch(trim)
        for i in range(depth):  # drop class 0: never eligible, fills the queue
            assert not dp.inject(1, dlcp_frame(1000, priority=1, seq=i)).dropped
        assert dp.stats()["ports"][2]["classes"][1]["depth"] == depth
        v = dp.inject(1, dlcp_frame(1000, priority=1, drop_class=drop_class, seq=99))
        should_cut = drop_class in THRESHOLDS and depth > THRESHOLDS[drop_class]
        if trim:
            assert v.trimmed == should_cut and not v.dropped, (depth, v)
            assert v.queue == (sizes.TRIM_QUEUE if should_cut else 1)
            assert v.length == (sizes.TRIMMED_FRAME_BYTES if should_cut else 1000)
        else:
            assert (v.dropped and v.reason == "selective") == should_cut and not v.trimmed, (depth, v)
        packets, _ = dp.counters(names.TRIMMED if trim else names.DROPPED)
        assert int(packets.sum()) == int(packets[2 << sizes.CLASS_BITS | 1]) == int(should_cut)


def test_non_eligible_traffic_is_never_dropped_selectively() -> None:
    dp = thresholds_switch(False)
    dp.write_entry(Op.INSERT, entry(names.DLCP_CLASSES, [ternary("priority", 1, 0xFF)], names.SET_QUEUE, 20, queue=1))
    verdicts = [dp.inject(1, dlcp_frame(1000, priority=1, drop_class=3, seq=i)) for i in range(50)]
    assert not any(v.dropped for v in verdicts)


def test_random_loss_per_class() -> None:
    loss = (0.0, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    dp = virtual_switch([1, 2], {2: PortConfig(port=2, interface=None, loss=loss)})
    route_to(dp, [2])
    n = 5000
    for i in range(n):
        dp.inject(1, dlcp_frame(200, priority=1 + 4 * (i % 2), seq=i))
    dp.drain()
    classes = dp.stats()["ports"][2]["classes"]
    lost = classes[1]["dropped"].get("loss", 0)
    assert abs(lost - 0.2 * n / 2) < 5 * (0.2 * 0.8 * n / 2) ** 0.5
    assert classes[1]["sent"] + lost == n / 2
    assert classes[5]["dropped"] == {} and classes[5]["sent"] == n / 2


def test_fixed_delay() -> None:
    dp = virtual_switch([1, 2], {2: PortConfig(port=2, interface=None, delay_ns=100_000)})
    route_to(dp, [2])
    dp.inject(1, dlcp_frame(500))
    assert dp.drain() == []
    dp.set_time(99_999)
    assert dp.drain() == []
    dp.set_time(100_000)
    assert len(dp.drain()) == 1


def test_a_full_buffer_pushes_out_lower_classes_newest_first() -> None:
    dp = shaped(10 * MBIT, buffer=64 << 10)
    low = [dp.inject(1, dlcp_frame(1000, priority=2, seq=i)) for i in range(65)]
    assert not any(v.dropped for v in low)
    high = [dp.inject(1, dlcp_frame(1000, priority=5, seq=100 + i)) for i in range(30)]
    lowest = [dp.inject(1, dlcp_frame(1000, priority=0, seq=200 + i)) for i in range(5)]
    assert not any(v.dropped for v in high)  # each pushed out one class-2 frame
    assert all(v.dropped and v.reason == "buffer" for v in lowest)  # nothing below class 0 to push out
    classes = dp.stats()["ports"][2]["classes"]
    assert classes[2]["dropped"] == {"pushed_out": 30} and classes[2]["depth"] == 35
    out = [(h.priority, h.seq) for h in (Header.unpack(f, PAYLOAD) for _, _, f in run_until_empty(dp, 100_000))]
    assert out == [(5, 100 + i) for i in range(30)] + [(2, i) for i in range(35)]  # the oldest class-2 frames stay


def test_the_lowest_class_is_pushed_out_first() -> None:
    """Classes 1 and 3 fill the buffer: class-6 arrivals take their room from class 1 until class 1
    is empty, and only then from class 3."""
    dp = shaped(10 * MBIT, buffer=64 << 10)
    queued = {1: 33, 3: 32}  # 65 frames of 1000 B: no room for one more in 64 KiB
    for p, n in queued.items():
        assert not any(dp.inject(1, dlcp_frame(1000, priority=p, seq=i)).dropped for i in range(n))
    for n in range(1, 41):
        assert not dp.inject(1, dlcp_frame(1000, priority=6, seq=100 + n)).dropped
        classes = dp.stats()["ports"][2]["classes"]
        out = {1: min(n, queued[1]), 3: max(0, n - queued[1])}
        for p in (1, 3):
            assert classes[p]["dropped"].get("pushed_out", 0) == out[p], (n, p)
            assert classes[p]["depth"] == queued[p] - out[p], (n, p)


def test_buffer_limits_the_bytes_queued() -> None:
    dp = shaped(10 * MBIT, buffer=64 << 10)
    verdicts = [dp.inject(1, dlcp_frame(1000, seq=i)) for i in range(100)]
    admitted = sum(not v.dropped for v in verdicts)
    assert all(v.reason == "buffer" for v in verdicts if v.dropped)
    st = dp.stats()["ports"][2]
    assert st["buffer_hwm"] <= 64 << 10 and admitted == (64 << 10) // 1000
    assert st["classes"][1]["dropped"] == {"buffer": 100 - admitted}
