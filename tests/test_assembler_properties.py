"""Property-based tests: the assembler under random order, duplication and loss."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support import JOB, TOKEN, make_message, packets

from dlcp.assembler import Assembler
from dlcp.protocol import MessageKind


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
