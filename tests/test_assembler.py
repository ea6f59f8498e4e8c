"""The bounded-loss assembler: completion rule, fill modes, bounds checks and drop accounting."""

import numpy as np
import pytest
from support import JOB, TOKEN, make_message, packets

from dlcp.assembler import Assembler
from dlcp.drops import DropReason
from dlcp.limits import Limits
from dlcp.protocol import HEADER_SIZE, DType, MessageKind, PacketType
from dlcp.wire import Header, segment_count


def feed(a: Assembler, pkts: list[bytes]):
    results = [a.ingest(p) for p in pkts]
    return results


def test_lossless_exact_in_any_order(assembler: Assembler) -> None:
    spec, values = make_message(1000, 64)
    out = np.zeros_like(values)
    assembler.expect(spec, out)
    pkts = packets(spec, values).packets()
    order = np.random.default_rng(1).permutation(len(pkts))
    done = [r for i in order for r in [assembler.ingest(pkts[i])] if r.completed]
    assert len(done) == 1 and done[0].completed[0].lost_elems == 0
    np.testing.assert_array_equal(out, values)
    assert assembler.counters[DropReason.OK] == len(pkts)


def test_gro_batch_fast_path_and_duplicates(assembler: Assembler) -> None:
    spec, values = make_message(64 * 50, 64)  # exact multiple: every packet full size
    out = np.zeros_like(values)
    assembler.expect(spec, out)
    batch = packets(spec, values)
    half = 25 * batch.seg_size
    flat = batch.buffer()
    r1 = assembler.ingest(flat[:half], seg_size=batch.seg_size)
    assert r1.accepted == 25 and not r1.completed
    r_dup = assembler.ingest(flat[:half], seg_size=batch.seg_size)
    assert r_dup.dropped == 25 and assembler.counters[DropReason.DUPLICATE] == 25
    r2 = assembler.ingest(flat[half:], seg_size=batch.seg_size)
    assert len(r2.completed) == 1
    np.testing.assert_array_equal(out, values)


def drop_some(pkts: list[bytes], lost: list[int]) -> list[bytes]:
    return [p for i, p in enumerate(pkts) if i not in set(lost)]


def test_not_complete_until_sender_done(assembler: Assembler) -> None:
    spec, values = make_message(6400, 64, bound=0.05)  # 100 packets, bound allows 5
    out = np.zeros_like(values)
    msg = assembler.expect(spec, out)
    pkts = packets(spec, values, last=False).packets()
    results = feed(assembler, drop_some(pkts, [3, 50]))
    assert not any(r.completed for r in results), "must not complete before the sender says it is done"
    assert not msg.done
    assert msg.packets_before_ready == 2  # the sender may still send both
    msg.sender_done = True
    assert msg.packets_before_ready == 1  # once it is done, any packet may be the one that completes
    msg.sender_done = False
    assert assembler.on_probe(spec.key) is msg and msg.done  # the probe says "done": 2% <= 5% completes
    assert msg.lost_elems == 128


def test_last_flag_completes_within_bound(assembler: Assembler) -> None:
    spec, values = make_message(6400, 64, bound=0.05)
    out = np.full_like(values, 9.0)
    assembler.expect(spec, out)
    results = feed(assembler, drop_some(packets(spec, values).packets(), [3, 50]))
    assert results[-1].completed, "the packet flagged LAST completes a message within its bound"
    # Zero fill for gradients: lost ranges are zero, everything else exact.
    lost = np.zeros(values.size, dtype=bool)
    lost[3 * 64 : 4 * 64] = lost[50 * 64 : 51 * 64] = True
    assert np.all(out[lost] == 0.0)
    np.testing.assert_array_equal(out[~lost], values[~lost])
    stats = assembler.stats.as_dict()
    assert stats["lost_bytes"] == 128 * 4 and stats["loss_fraction_by_layer"]["0"] == pytest.approx(0.02)


def test_over_bound_is_never_accepted(assembler: Assembler) -> None:
    spec, values = make_message(6400, 64, bound=0.01)  # bound allows 1 packet (64 elements)
    out = np.zeros_like(values)
    msg = assembler.expect(spec, out)
    all_pkts = packets(spec, values).packets()
    results = feed(assembler, drop_some(all_pkts, [3, 50]))  # 2% lost
    assert not any(r.completed for r in results)
    assert results[-1].nack == [msg], "loss over the bound asks for retransmission"
    assert msg.missing_ranges().tolist() == [[3, 4], [50, 51]]
    assert assembler.on_probe(spec.key) is msg and not msg.done
    retx = packets(spec, values, seqs=np.array([3]), retransmit=True).packets()
    assert assembler.ingest(retx[0]).completed == [msg]
    assert msg.lost_elems == 64
    np.testing.assert_array_equal(out[:3200], values[:3200])


def test_zero_bound_needs_everything(assembler: Assembler) -> None:
    spec, values = make_message(1000, 64, bound=0.0)
    out = np.zeros_like(values)
    msg = assembler.expect(spec, out)
    pkts = packets(spec, values).packets()
    feed(assembler, pkts[1:])
    assert not msg.done and assembler.on_probe(spec.key) is msg and not msg.done
    assert assembler.ingest(pkts[0]).completed == [msg]


def test_stale_fill_keeps_previous_parameters(assembler: Assembler) -> None:
    spec, values = make_message(6400, 64, kind=MessageKind.PULL, bound=0.05)
    previous = np.arange(values.size, dtype=np.float32)
    out = previous.copy()
    assembler.expect(spec, out)
    feed(assembler, drop_some(packets(spec, values).packets(), [10]))
    lost = slice(10 * 64, 11 * 64)
    np.testing.assert_array_equal(out[lost], previous[lost])
    keep = np.ones(values.size, dtype=bool)
    keep[lost] = False
    np.testing.assert_array_equal(out[keep], values[keep])


def test_short_last_packet_loss_accounts_elements(assembler: Assembler) -> None:
    spec, values = make_message(1000, 64, bound=0.05)  # 16 packets, the last holds 40 elements
    out = np.ones_like(values)
    msg = assembler.expect(spec, out)
    pkts = packets(spec, values, last=False).packets()
    feed(assembler, pkts[:-1])
    assembler.on_probe(spec.key)
    assert msg.done and msg.lost_elems == 40
    assert np.all(out[960:] == 0)


def test_bounds_checks_never_write_outside(assembler: Assembler) -> None:
    spec, values = make_message(640, 64)
    backing = np.full(values.size + 256, 5.0, dtype=np.float32)
    out = backing[128 : 128 + values.size]
    assembler.expect(spec, out)
    good = Header.unpack(packets(spec, values).packets()[0])
    payload = bytes(256)
    bad = [
        good.replace(seq=10, offset=640).pack() + payload,  # seq beyond pkt_count
        good.replace(seq=9, offset=640 - 32).pack() + payload,  # offset+length beyond the message
        good.replace(offset=1).pack() + payload,  # offset contradicts seq
        good.replace(pkt_count=11).pack() + payload,  # packet count contradicts the message
        good.replace(length=128).pack() + payload[:128],  # wrong length for this packet
        good.replace(dtype=DType.FLOAT16).pack() + payload,
        good.replace(job_id=JOB + 1).pack() + payload,
        good.replace(token=TOKEN + 1).pack() + payload,
        good.pack()[:30],
        good.replace(length=256).pack() + payload[:100],
    ]
    for raw in bad:
        r = assembler.ingest(raw)
        assert r.dropped == 1 and r.accepted == 0, Header.unpack(raw[:40]) if len(raw) >= 40 else raw
    assert np.all(backing[:128] == 5.0) and np.all(backing[128 + values.size :] == 5.0)
    assert np.all(out == 5.0), "no bad packet may write into the message"
    c = assembler.counters
    assert c[DropReason.OUT_OF_RANGE] == 2
    assert c[DropReason.BAD_LENGTH] == 2
    assert (c[DropReason.BAD_COUNT], c[DropReason.BAD_DTYPE]) == (1, 1)
    assert (c[DropReason.UNKNOWN_JOB], c[DropReason.BAD_TOKEN], c[DropReason.TRUNCATED]) == (1, 1, 2)


def test_garbage_never_raises(assembler: Assembler) -> None:
    """Random bytes, whole or cut in segments of any size (tiny GRO segments too), are dropped and counted.

    ``ingest`` has no catch-all, so an error on some input fails this test;
    each segment must be counted exactly once (an error swallowed as one drop would not be).
    """
    rng = np.random.default_rng(3)
    spec, values = make_message(640, 64)
    assembler.expect(spec, np.zeros_like(values))
    segments = 0
    for n in (0, 1, 39, 40, 41, 100, 2000):
        for seg in {max(1, n // 3), n or 1}:
            for _ in range(20):
                assembler.ingest(rng.integers(0, 256, n, dtype=np.uint8).tobytes(), seg_size=seg)
                segments += segment_count(n, seg)
    assert assembler.counters[DropReason.OK] == 0
    assert int(assembler.counters.counts.sum()) == segments


def test_early_packets_are_stashed_then_replayed(assembler: Assembler) -> None:
    spec, values = make_message(1000, 64)
    pkts = packets(spec, values).packets()
    feed(assembler, pkts[:5])
    assert assembler.counters.dropped == 0
    out = np.zeros_like(values)
    msg = assembler.expect(spec, out)
    assert msg.n_received == 5
    feed(assembler, pkts[5:])
    assert msg.done
    np.testing.assert_array_equal(out, values)


def test_early_packets_arriving_one_by_one_are_replayed_as_one_batch(assembler: Assembler, monkeypatch) -> None:
    """A sender that ran ahead of a slow receiver leaves its packets stashed one datagram each (a paced sender's
    packets each arrive alone): the post replays them in one vector batch, not one call per packet."""
    spec, values = make_message(64 * 200 + 17, 64)  # 200 full packets and a short last one
    pkts = packets(spec, values).packets()
    feed(assembler, pkts[:150] + pkts[151:])  # one missing in the middle
    calls = []
    inner = assembler._ingest_into
    monkeypatch.setattr(assembler, "_ingest_into", lambda *args: calls.append(args[2]) or inner(*args))
    out = np.zeros_like(values)
    msg = assembler.expect(spec, out)
    assert len(calls) <= 2, f"the full packets in one batch, the short last one alone: {calls}"
    assert msg.n_received == len(pkts) - 1 and not msg.done
    feed(assembler, [pkts[150]])
    assert msg.done
    np.testing.assert_array_equal(out, values)


@pytest.mark.parametrize(("at", "reason"), [(1, DropReason.BAD_KIND), (2, DropReason.BAD_DTYPE)])
def test_an_early_packet_is_judged_by_its_own_header(assembler: Assembler, at: int, reason: DropReason) -> None:
    """Early packets' wire verdicts are remembered per kind of header: a bad one that arrives after good ones of
    another message, its header otherwise the same, is still dropped and counted, not stashed."""
    good, good_values = make_message(1000, 64, msg_id=1)
    bad, bad_values = make_message(1000, 64, msg_id=2)
    feed(assembler, packets(good, good_values).packets()[:3])
    stashed = assembler.stash_bytes
    raw = bytearray(packets(bad, bad_values).packets()[0])
    raw[at] = 0xEE
    assembler.ingest(bytes(raw))
    assert assembler.counters.counts[reason] == 1
    assert assembler.stash_bytes == stashed


def test_stash_is_bounded() -> None:
    a = Assembler(Limits(max_stash_bytes=3 * (HEADER_SIZE + 256)))
    a.add_job(JOB, TOKEN)
    spec, values = make_message(1000, 64)
    feed(a, packets(spec, values).packets()[:6])
    assert a.counters[DropReason.STASH_FULL] == 3
    assert a.stash_bytes == 3 * (HEADER_SIZE + 256)


def _stash(a: Assembler, msg_id: int, n: int, now: float, gro: bool = False) -> tuple:
    spec, values = make_message(64 * 16, 64, msg_id=msg_id, seed=msg_id)
    pb = packets(spec, values, last=False, seqs=np.arange(n))
    if gro:
        a.ingest(pb.buffer(), seg_size=pb.seg_size, now=now)
    else:
        for p in pb.packets():
            a.ingest(p, now=now)
    return spec, values


@pytest.mark.parametrize("gro", [False, True], ids=["datagrams", "gro"])
def test_stash_expires_by_age_and_counts_what_it_evicts(gro: bool) -> None:
    """Early packets of a message not expected within limits.max_stash_age_s are evicted and counted.

    A message that keeps receiving packets stays; its stashed probe is forgotten
    with it; the bytes it held go back, so new early packets fit again.
    """
    size = HEADER_SIZE + 256
    a = Assembler(Limits(max_stash_bytes=9 * size, max_stash_age_s=10.0))
    a.add_job(JOB, TOKEN)
    stale, _ = _stash(a, 1, 6, now=0.0, gro=gro)
    assert a.on_probe(stale.key, now=0.0) is None
    live, live_values = _stash(a, 2, 2, now=0.0, gro=gro)
    a.ingest(packets(live, live_values, last=False, seqs=np.array([2])).packets()[0], now=9.0)  # still arriving
    assert a.stash_bytes == 9 * size
    _stash(a, 3, 1, now=9.5, gro=gro)
    assert a.counters[DropReason.STASH_FULL] == 1, "full: the newest packets are refused"
    assert a.counters[DropReason.STASH_EXPIRED] == 0 and a.expire_stash(9.99) == 0
    assert a.expire_stash(10.01) == 6, "message 1 took nothing for 10 s: its 6 packets go"
    assert a.counters[DropReason.STASH_EXPIRED] == 6
    assert a.stash_bytes == 3 * size
    # Its room is free again: new early packets are stashed, not refused.
    _stash(a, 4, 5, now=10.5, gro=gro)
    assert a.counters[DropReason.STASH_FULL] == 1 and a.stash_bytes == 8 * size
    # Expected later, message 1 starts empty, and without the forgotten probe it waits for its sender.
    msg = a.expect(stale, np.zeros(stale.num_elems, np.float32), now=11.0)
    assert msg.n_received == 0 and not msg.sender_done
    msg = a.expect(live, np.zeros(live.num_elems, np.float32), now=11.0)
    assert msg.n_received == 3, "message 2 kept its early packets"
    # Stashing or expecting evicts too, not only an explicit call: message 4 ages out here.
    _stash(a, 5, 1, now=30.0, gro=gro)
    assert a.counters[DropReason.STASH_EXPIRED] == 6 + 5 and a.stash_bytes == size


def test_a_stale_stash_does_not_block_new_early_packets() -> None:
    """Early packets of a message never expected fill the stash; once stale they give way."""
    size = HEADER_SIZE + 256
    a = Assembler(Limits(max_stash_bytes=4 * size, max_stash_age_s=10.0))
    a.add_job(JOB, TOKEN)
    _stash(a, 1, 4, now=0.0)  # never expected (say, a cancelled receive)
    _stash(a, 2, 1, now=1.0)
    assert a.counters[DropReason.STASH_FULL] == 1
    spec, values = _stash(a, 3, 4, now=20.0)
    assert a.counters[DropReason.STASH_FULL] == 1, "message 1's stale packets made room"
    msg = a.expect(spec, np.zeros_like(values), now=20.0)
    assert msg.n_received == 4


def test_stash_age_limit_is_validated() -> None:
    for bad in (0, -1.0, float("inf"), float("nan"), "10", True):
        with pytest.raises(ValueError, match="max_stash_age_s"):
            Limits(max_stash_age_s=bad)  # type: ignore[arg-type]


def test_late_packets_after_completion(assembler: Assembler) -> None:
    spec, values = make_message(1000, 64)
    out = np.zeros_like(values)
    assembler.expect(spec, out)
    pkts = packets(spec, values).packets()
    feed(assembler, pkts)
    out[:] = 1.0  # the user owns the buffer again
    feed(assembler, pkts[:3])
    assert assembler.counters[DropReason.LATE] == 3
    assert np.all(out == 1.0)
    assert assembler.is_completed(spec.key)


def test_trimmed_packets_trigger_early_nack(assembler: Assembler) -> None:
    spec, values = make_message(6400, 64, bound=0.01)
    msg = assembler.expect(spec, np.zeros_like(values))
    first = Header.unpack(packets(spec, values).packets()[0])
    r1 = assembler.ingest(first.replace(type=PacketType.TRIMMED, seq=7, offset=7 * 64).pack())
    assert r1.nack == [] and msg.trimmed[7]  # one trimmed packet is within a 1% bound
    r2 = assembler.ingest(first.replace(type=PacketType.TRIMMED, seq=8, offset=8 * 64).pack())
    assert r2.nack == [msg], "trims proving the bound is exceeded ask for retransmission at once"


def test_memory_caps() -> None:
    a = Assembler(Limits(max_message_bytes=4000, max_job_bytes=6000))
    a.add_job(JOB, TOKEN)
    spec, values = make_message(1001, 64)
    with pytest.raises(ValueError, match="max_message_bytes"):
        a.expect(spec, np.zeros_like(values))
    s1, v1 = make_message(1000, 64, msg_id=1)
    s2, v2 = make_message(1000, 64, msg_id=2)
    a.expect(s1, np.zeros_like(v1))
    with pytest.raises(ValueError, match="max_job_bytes"):
        a.expect(s2, np.zeros_like(v2))
    a.cancel(s1.key)
    a.expect(s2, np.zeros_like(v2))


def test_expect_validates_buffer(assembler: Assembler) -> None:
    spec, values = make_message(1000, 64)
    with pytest.raises(ValueError, match="bytes"):
        assembler.expect(spec, np.zeros(999, dtype=np.float32))
    with pytest.raises(ValueError, match="not registered"):
        Assembler().expect(spec, np.zeros_like(values))


def test_control_packets_are_passed_up(assembler: Assembler) -> None:
    probe = Header(PacketType.PROBE, job_id=JOB, token=TOKEN, msg_id=4).pack()
    foreign = Header(PacketType.PROBE, job_id=JOB, token=1, msg_id=4).pack()
    r = assembler.ingest(probe + bytes(0))
    assert [h.type for h, _ in r.control] == [PacketType.PROBE]
    assert assembler.ingest(foreign).control == []


def test_lone_control_packets_judged_as_in_a_batch() -> None:
    """A lone PROBE/BITMAP/STOP is decoded directly; the verdicts equal the vectorised path's."""
    bitmap = bytes(range(40))
    cases = [
        Header(PacketType.BITMAP, job_id=JOB, token=TOKEN, msg_id=4, length=40).pack() + bitmap,  # valid
        Header(PacketType.STOP, job_id=JOB, token=TOKEN, msg_id=5).pack(),  # valid, no payload
        Header(PacketType.PROBE, job_id=JOB, token=1, msg_id=4).pack(),  # wrong token
        Header(PacketType.PROBE, job_id=JOB + 1, token=TOKEN).pack(),  # unknown job
        Header(PacketType.BITMAP, job_id=JOB, token=TOKEN, length=41).pack() + bitmap,  # payload shorter than said
        bytes([0x21]) + Header(PacketType.PROBE, job_id=JOB, token=TOKEN).pack()[1:],  # version 2
    ]
    lone, batch = Assembler(), Assembler()
    for a in (lone, batch):
        a.add_job(JOB, TOKEN)
    got = [(h, p) for c in cases for h, p in lone.ingest(c).control]
    seg = max(len(c) for c in cases)
    # Padding does not change a verdict: each packet's length field says what it holds, except
    # the short one, whose padding would supply its missing byte -- send that one alone, last.
    padded = b"".join(c + bytes(seg - len(c)) for c in cases if c is not cases[4])
    want = batch.ingest(padded, seg_size=seg).control + batch.ingest(cases[4]).control
    assert [(h, p) for h, p in got] == [(h, p) for h, p in want]
    assert [h.type for h, _ in got] == [PacketType.BITMAP, PacketType.STOP]
    assert got[0][1] == bitmap
    assert lone.counters.as_dict() == batch.counters.as_dict()
    assert lone.counters[DropReason.BAD_TOKEN] == 1 and lone.counters[DropReason.UNKNOWN_JOB] == 1
    assert lone.counters[DropReason.TRUNCATED] == 1 and lone.counters[DropReason.BAD_VERSION] == 1


def test_mixed_batch_general_path(assembler: Assembler) -> None:
    s1, v1 = make_message(640, 64, msg_id=1)
    s2, v2 = make_message(640, 64, msg_id=2, seed=1)
    o1, o2 = np.zeros_like(v1), np.zeros_like(v2)
    assembler.expect(s1, o1)
    assembler.expect(s2, o2)
    p1, p2 = packets(s1, v1).packets(), packets(s2, v2).packets()
    interleaved = b"".join(p for pair in zip(p1, p2, strict=True) for p in pair)
    r = assembler.ingest(interleaved, seg_size=len(p1[0]))
    assert len(r.completed) == 2
    np.testing.assert_array_equal(o1, v1)
    np.testing.assert_array_equal(o2, v2)


def test_stalled_messages(assembler: Assembler) -> None:
    spec, values = make_message(1000, 64)
    assembler.expect(spec, np.zeros_like(values), now=10.0)
    assert assembler.stalled(now=12.0, timeout=5.0) == []
    assert [m.key for m in assembler.stalled(now=16.0, timeout=5.0)] == [spec.key]


def test_accumulate_adds_each_packet_once(assembler: Assembler) -> None:
    spec, values = make_message(6400, 64, kind=MessageKind.REDUCE_SCATTER, bound=0.05)
    base = np.ones_like(values)
    out = base.copy()
    msg = assembler.expect(spec, out, accumulate=True)
    pkts = packets(spec, values).packets()
    batch = packets(spec, values, seqs=np.arange(10, 20))
    assembler.ingest(batch.buffer(), seg_size=batch.seg_size)
    assembler.ingest(batch.buffer(), seg_size=batch.seg_size)  # duplicates must not add twice
    feed(assembler, [p for i, p in enumerate(pkts) if not 10 <= i < 20 and i != 42])
    assert msg.done and msg.lost_elems == 64
    lost = slice(42 * 64, 43 * 64)
    np.testing.assert_array_equal(out[lost], base[lost]), "a lost packet contributes nothing"
    keep = np.ones(values.size, dtype=bool)
    keep[lost] = False
    np.testing.assert_allclose(out[keep], base[keep] + values[keep], rtol=1e-6)
    assert assembler.counters[DropReason.DUPLICATE] == 10


def test_stashed_probe_does_not_complete_before_replay(assembler: Assembler) -> None:
    """A probe that arrived while all packets sat in the stash must not cut the replay short."""
    spec, values = make_message(6400, 64, bound=0.05)  # 100 packets; the bound allows 5 missing
    pkts = packets(spec, values, last=False).packets()
    feed(assembler, pkts)  # every packet arrives before the receiver expects the message
    assert assembler.on_probe(spec.key) is None  # the probe is remembered for the stash
    out = np.zeros_like(values)
    msg = assembler.expect(spec, out)
    assert msg.done and msg.lost_elems == 0
    np.testing.assert_array_equal(out, values)
    assert assembler.counters[DropReason.LATE] == 0
