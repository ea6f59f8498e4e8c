"""Property-based tests: the assembler under random order, duplication and loss."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support import JOB, TOKEN, make_message, packets

from dlcp.assembler import Assembler
from dlcp.protocol import HEADER_SIZE, MessageKind, PacketType
from dlcp.wire import Header, segment_count


@st.composite
def scenarios(draw):
    num = draw(st.integers(1, 3000))
    epp = draw(st.integers(1, 300))
    bound = draw(st.sampled_from([0.0, 0.01, 0.05, 0.2]))
    kind = draw(st.sampled_from([MessageKind.PUSH, MessageKind.PULL]))
    n = -(-num // epp)
    lost = draw(st.sets(st.integers(0, n - 1), max_size=n))
    dups = draw(st.lists(st.integers(0, n - 1), max_size=10))
    seed = draw(st.integers(0, 2**31))
    batch = draw(st.integers(1, 12))
    return num, epp, bound, kind, sorted(lost), dups, seed, batch


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_random_order_duplication_loss(sc) -> None:
    num, epp, bound, kind, lost, dups, seed, batch = sc
    spec, values = make_message(num, epp, kind=kind, bound=bound, seed=seed % 1000)
    a = Assembler()
    a.add_job(JOB, TOKEN)
    previous = np.full(num, -3.0, dtype=np.float32)
    out = previous.copy()
    msg = a.expect(spec, out)
    pb = packets(spec, values, last=False)
    pkts = pb.packets()
    keep = [i for i in range(len(pkts)) if i not in set(lost)] + [d for d in dups if d not in set(lost)]
    rng = np.random.default_rng(seed)
    order = rng.permutation(keep)
    # Deliver in random order, sometimes several at once as one GRO-like buffer of equal segments.
    i = 0
    while i < len(order):
        group = [pkts[j] for j in order[i : i + batch]]
        if all(len(g) == pb.seg_size for g in group):
            a.ingest(b"".join(group), seg_size=pb.seg_size)
        else:
            for g in group:
                a.ingest(g)
        i += batch
    a.on_probe(spec.key)

    lost_mask = np.zeros(num, dtype=bool)
    for s in lost:
        lost_mask[s * epp : (s + 1) * epp] = True
    missing = int(lost_mask.sum())
    assert msg.done == (missing <= int(bound * num)), "completion rule"
    np.testing.assert_array_equal(out[~lost_mask], values[~lost_mask])
    if msg.done:
        assert msg.lost_elems == missing
        fill = 0.0 if kind == MessageKind.PUSH else -3.0
        assert np.all(out[lost_mask] == fill)
    else:
        assert np.all(out[lost_mask] == -3.0), "an incomplete message is not filled"
        assert sorted(msg.missing_seqs().tolist()) == lost


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 40), st.integers(1, 64), st.integers(0, 2**31), st.data())
def test_fast_and_general_paths_agree(npk, epp, seed, data) -> None:
    """A batch processed whole (fast path) leaves the same state as its packets one by one (general path)."""
    spec, values = make_message(npk * epp, epp, seed=seed % 1000)
    if data.draw(st.booleans()):
        start = data.draw(st.integers(0, npk - 1))
        seqs = np.arange(start, data.draw(st.integers(start + 1, npk)))
    else:  # a sparse, increasing set: one drop class of a message
        seqs = np.array(sorted(data.draw(st.sets(st.integers(0, npk - 1), min_size=1))))
    count = seqs.size
    pb = packets(spec, values, seqs=seqs)
    corrupt = data.draw(st.sampled_from([None, "seq", "offset", "token", "length"]))
    raw = bytearray(pb.buffer())
    if corrupt is not None and count > 1:
        at = {"seq": 32, "offset": 36, "token": 8, "length": 22}[corrupt]
        row = data.draw(st.integers(1, count - 1))
        raw[row * pb.seg_size + at + 1] ^= 0x5A
    states = []
    for whole in (True, False):
        a = Assembler()
        a.add_job(JOB, TOKEN)
        out = np.zeros_like(values)
        msg = a.expect(spec, out)
        if whole:
            a.ingest(bytes(raw), seg_size=pb.seg_size)
        else:
            for i in range(count):
                a.ingest(bytes(raw[i * pb.seg_size : (i + 1) * pb.seg_size]))
        states.append((out.copy(), msg.received.copy(), a.counters.counts.copy(), msg.done))
    (o1, r1, c1, d1), (o2, r2, c2, d2) = states
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(c1, c2)
    assert d1 == d2


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 40), st.integers(1, 64), st.integers(0, 2**31), st.data())
def test_early_batches_are_stashed_as_the_general_path_would(npk, epp, seed, data) -> None:
    """A GRO batch of a message not expected yet: the stash's shortcut (``_fast_stash``) leaves the same counters
    and stash, and after the replay the same message state, as the general path; corrupt rows included, and after
    the shortcut judged another message's packets with the same wire fields."""
    spec, values = make_message(npk * epp, epp, seed=seed % 1000)
    start = data.draw(st.integers(0, npk - 2))
    seqs = np.arange(start, data.draw(st.integers(start + 1, npk - 1)))  # full-size packets only
    pb = packets(spec, values, seqs=seqs, last=False)
    raw = bytearray(pb.buffer())
    corrupt = data.draw(st.sampled_from([None, "seq", "token", "length", "kind", "msg_id", "version"]))
    if corrupt is not None:
        at = {"seq": 32, "token": 8, "length": 22, "kind": 1, "msg_id": 15, "version": 0}[corrupt]
        row = data.draw(st.integers(0, seqs.size - 1))
        raw[row * pb.seg_size + at] ^= 0xE0 if corrupt in ("kind", "version") else 0x5A
    completed = data.draw(st.booleans())  # a message that already completed here gets late packets instead
    # Early packets of another message with the same wire fields first: the shortcut remembers its verdict on them.
    warm = data.draw(st.booleans())
    other, other_values = make_message(npk * epp, epp, msg_id=2, seed=seed % 1000 + 1)
    states = []
    for shortcut in (True, False):
        a = Assembler()
        a.add_job(JOB, TOKEN)
        if not shortcut:
            a._fast_stash = lambda *args: False  # type: ignore[method-assign]
        if warm:
            a.ingest(packets(other, other_values, seqs=seqs, last=False).buffer(), seg_size=pb.seg_size, now=0.5)
        out = np.zeros_like(values)
        if completed:
            done = a.expect(spec, out)
            a.ingest(packets(spec, values).buffer(), seg_size=pb.seg_size)
            assert done.done
        r = a.ingest(bytes(raw), seg_size=pb.seg_size, now=1.0)
        stashed = (a.counters.counts.copy(), a.stash_bytes, r.accepted, r.dropped, sorted(r.sources))
        msg = a.expect(spec, np.zeros_like(values), now=2.0) if not completed else done
        states.append((stashed, msg.received.copy(), msg.n_received, a.counters.counts.copy()))
    (s1, r1, n1, c1), (s2, r2, n2, c2) = states
    np.testing.assert_array_equal(s1[0], s2[0])
    assert s1[1:] == s2[1:]
    np.testing.assert_array_equal(r1, r2)
    assert n1 == n2
    np.testing.assert_array_equal(c1, c2)


@st.composite
def hostile_datagrams(draw):
    """Valid packets of one message (data and control), then header bytes overwritten, cut or padded.

    Mostly of the right job and token, so they get past the wire checks into
    placement, stashing and control handling, where a bug would hide.
    """
    epp = draw(st.sampled_from([1, 3, 16]))
    num = draw(st.integers(1, 20 * epp))
    spec, values = make_message(num, epp, bound=draw(st.sampled_from([0.0, 0.5])), seed=draw(st.integers(0, 99)))
    pb = packets(spec, values)
    raw = [bytearray(p) for p in pb.packets()]
    for ptype in (PacketType.PROBE, PacketType.BITMAP, PacketType.STOP, PacketType.TRIMMED):
        h = Header(ptype, job_id=JOB, src=0, token=TOKEN, msg_id=1, pkt_count=spec.pkt_count, length=2)
        raw.append(bytearray(h.pack() + b"\x0f\x00"))
    picked = draw(st.lists(st.integers(0, len(raw) - 1), min_size=1, max_size=30))
    out = []
    for i in picked:
        d = bytearray(raw[i])
        for _ in range(draw(st.integers(0, 3))):
            at = draw(st.integers(0, HEADER_SIZE - 1))
            if at not in (0, 4, 5, 8, 9, 10, 11) or draw(st.booleans()):  # keep version, job, token mostly
                d[at] = draw(st.integers(0, 255))
        cut = draw(st.sampled_from([None, "short", "long"]))
        if cut == "short":
            d = d[: draw(st.integers(0, len(d)))]
        elif cut == "long":
            d += bytes(draw(st.integers(1, 64)))
        out.append(bytes(d))
    how = draw(st.sampled_from(["one by one", "as one GRO buffer", "arbitrary segments"]))
    seg = draw(st.integers(1, 2 * pb.seg_size)) if how == "arbitrary segments" else pb.seg_size
    return spec, out, how, seg, draw(st.sampled_from(["expected", "not yet", "completed"]))


@settings(max_examples=300, deadline=None)
@given(hostile_datagrams())
def test_hostile_datagrams_never_raise_are_all_counted_and_stay_in_bounds(case) -> None:
    """Whatever the bytes, ingest returns, counts every segment once, and writes only inside the message.

    ``ingest`` has no catch-all: a bug that raises on some input fails here.
    """
    spec, datagrams, how, seg, state = case
    a = Assembler()
    a.add_job(JOB, TOKEN)
    guard = 64
    backing = np.full(spec.num_elems + 2 * guard, 5.0, dtype=np.float32)
    out = backing[guard:-guard]
    if state == "completed":  # later packets are late
        a.expect(spec, out)
        a.on_probe(spec.key)
        for p in packets(spec, np.zeros(spec.num_elems, np.float32)).packets():
            a.ingest(p)
        assert a.is_completed(spec.key)
        out[:] = 5.0
    msg = a.expect(spec, out) if state == "expected" else None
    before = int(a.counters.counts.sum())
    if how == "one by one":
        segments = sum(segment_count(len(d), len(d)) if d else 0 for d in datagrams)
        for d in datagrams:
            a.ingest(d)
    else:
        blob = b"".join(d.ljust(seg, b"\x00")[:seg] if how == "as one GRO buffer" else d for d in datagrams)
        segments = segment_count(len(blob), seg) if blob else 0
        a.ingest(blob, seg_size=seg)
    if state == "not yet":  # the stashed packets are replayed now
        msg = a.expect(spec, out)
    assert int(a.counters.counts.sum()) - before >= segments, "every segment is counted (stashed ones again on replay)"
    if state != "not yet":
        assert int(a.counters.counts.sum()) - before == segments, "every segment is counted exactly once"
    assert np.all(backing[:guard] == 5.0) and np.all(backing[-guard:] == 5.0), "nothing written outside the buffer"
    if msg is not None:
        assert msg.n_received == int(np.count_nonzero(msg.received))
