"""Host transport and collectives on loopback: exactness, bounded loss, replicas, jobs, faults."""

import dataclasses
import socket
import time

import numpy as np
import pytest

from dlcp.config import TransportConfig
from dlcp.drops import DropReason
from dlcp.host.collectives import Collectives
from dlcp.host.endpoint import Endpoint, free_port
from dlcp.host.errors import PeerTimeoutError
from dlcp.host.local import local_endpoints, run_ranks
from dlcp.host.loss import LossSpec
from dlcp.message import dtype_code, elems_per_packet
from dlcp.packetizer import build_packets
from dlcp.policy import KindPolicy, Policy
from dlcp.protocol import HEADER_SIZE, Flag, MessageKind, PacketType
from dlcp.wire import Header

SMALL = TransportConfig(port=0, payload_bytes=1024, peer_timeout_s=3.0)


def group(world, policy=None, loss=None, servers=(0,), workers=None, transport=SMALL, job_id=1, token=None):
    eps = local_endpoints(world, job_id=job_id, token=token, transport=transport,
                          loss=loss, control_class=(policy or Policy()).control_class)  # fmt: skip
    colls = [Collectives(ep, world, policy, server_ranks=servers, worker_ranks=workers) for ep in eps]
    return eps, colls


def close(eps):
    for ep in eps:
        ep.close()


def inputs(world, n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n).astype(np.float32) for _ in range(world)]


NUMPY_PATH = pytest.param(dataclasses.replace(SMALL, fast_path=False), id="numpy")
"""The data path without the C module (what runs where it could not be built)."""
C_PATH = pytest.param(SMALL, id="c", marks=pytest.mark.fastpath)
"""The C data path (skipped where it was not built, failed under make test)."""


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("mode", ["ring", "ps"])
@pytest.mark.parametrize("transport", [C_PATH, NUMPY_PATH])
def test_exact_without_loss(world, mode, transport) -> None:
    n = 50_001  # not a multiple of anything: uneven chunks and short last packets
    eps, colls = group(world, servers=tuple(range(world)) if mode == "ps" else (0,), transport=transport)
    try:
        xs = inputs(world, n)
        expected = np.sum(xs, axis=0, dtype=np.float64)

        def rank(r):
            x = xs[r].copy()
            for _ in range(2):  # two rounds: rounds must not mix
                x[:] = xs[r]
                colls[r].allreduce(x, mode=mode)
            return x

        out = run_ranks(rank, world)
        for r in range(world):
            assert not isinstance(out[r], BaseException), out[r]
            np.testing.assert_allclose(out[r], expected, rtol=1e-5, atol=1e-5)
            assert colls[r].stats.loss_fraction == 0.0
        assert all(np.array_equal(out[0], o) for o in out), "replicas are bit-identical"
    finally:
        close(eps)


def test_dedicated_parameter_server() -> None:
    world, n = 3, 20_000  # ranks 0, 1 are workers; rank 2 only serves
    eps, colls = group(world, servers=(2,), workers=(0, 1))
    try:
        xs = inputs(2, n)

        def rank(r):
            x = xs[r].copy() if r < 2 else np.zeros(n, dtype=np.float32)
            colls[r].allreduce_ps(x, average=True)
            return x

        out = run_ranks(rank, world)
        for r in range(world):
            np.testing.assert_allclose(out[r], (xs[0] + xs[1]) / 2, rtol=1e-5, atol=1e-6)
    finally:
        close(eps)


def powers_of_two(world, n):
    # Rank r contributes 2**r everywhere: a result's bits say whose contribution arrived.
    return [np.full(n, float(2**r), dtype=np.float32) for r in range(world)]


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("transport", [C_PATH, NUMPY_PATH])
def test_ring_under_injected_loss_stays_within_bound(world, transport) -> None:
    n, bound = 200_000, 0.02
    policy = Policy(kinds={**Policy().kinds, MessageKind.REDUCE_SCATTER: KindPolicy(loss_bound=bound)})
    eps, colls = group(world, policy=policy, loss=LossSpec(rate=0.01, seed=3), transport=transport)
    try:
        xs = powers_of_two(world, n)
        out = run_ranks(lambda r: colls[r].allreduce_ring(xs[r].copy()), world)
        full = 2**world - 1
        for r in range(world):
            assert not isinstance(out[r], BaseException), out[r]
            assert colls[r].stats.by_kind["reduce_scatter"][0] <= bound * colls[r].stats.by_kind["reduce_scatter"][1]
            assert colls[r].stats.by_kind.get("all_gather", [0, 1])[0] == 0, "the all-gather is reliable"
        assert all(np.array_equal(out[0], o) for o in out), "replicas stay identical under loss"
        res = out[0]
        assert np.all((res >= 1) & (res <= full) & (res == np.round(res))), "a gap adds nothing, never garbage"
        inexact = np.count_nonzero(res != full) / n
        assert inexact <= (world - 1) * bound, inexact
        injected = sum(ep.loss.dropped for ep in eps)
        assert injected > 0
    finally:
        close(eps)


def test_loss_above_bound_is_retransmitted() -> None:
    world, n, bound = 2, 100_000, 0.005
    policy = Policy(kinds={**Policy().kinds, MessageKind.REDUCE_SCATTER: KindPolicy(loss_bound=bound)})
    eps, colls = group(world, policy=policy, loss=LossSpec(rate=0.05, seed=1))
    try:
        xs = powers_of_two(world, n)
        out = run_ranks(lambda r: colls[r].allreduce_ring(xs[r].copy()), world)
        assert sum(ep.send_stats.retransmitted for ep in eps) > 0
        for r in range(world):
            lost, total = colls[r].stats.by_kind["reduce_scatter"]
            assert lost <= bound * total, "5% loss with a 0.5% bound: the rest must be retransmitted"
        assert np.count_nonzero(out[0] != 3) <= bound * n
    finally:
        close(eps)


def test_bursty_loss_pattern() -> None:
    world, n = 2, 100_000
    eps, colls = group(world, loss=LossSpec(rate=0.02, pattern="bursty", burst_len=8, seed=2))
    try:
        out = run_ranks(lambda r: colls[r].allreduce_ring(powers_of_two(world, n)[r]), world)
        assert all(not isinstance(o, BaseException) for o in out), out
        assert np.array_equal(out[0], out[1])
    finally:
        close(eps)


def test_ps_lossy_pull_keeps_stale_values_until_resync() -> None:
    """Replicas drift only where pulls were lost, by exactly the stale values, and a broadcast ends it.

    Rank r contributes 2**r in round 1 and 8 * 2**r in round 2, so every value
    says where it came from: an aggregate of round 1 is odd (the server's own 1
    is always there), a worker's own input is 2 or 4, an aggregate of round 2
    is 8 or more. A worker's pulled packet therefore holds, whole, either the
    server's aggregate of that round or its previous value for the tag (round 1:
    its own input; round 2: its round-1 result), and nothing else.
    """
    world, n, bound = 3, 60_000, 0.05
    kinds = {**Policy().kinds, MessageKind.PULL: KindPolicy(loss_bound=bound), MessageKind.PUSH: KindPolicy(bound)}
    policy = Policy(kinds=kinds)
    eps, colls = group(world, policy=policy, servers=(0,), loss=LossSpec(rate=0.03, seed=5))
    try:
        xs = powers_of_two(world, n)
        epp = elems_per_packet(SMALL.payload_bytes, dtype_code(np.dtype(np.float32)))

        def rank(r):
            first = colls[r].allreduce_ps(xs[r].copy(), tag="w").copy()
            second = colls[r].allreduce_ps(8 * xs[r], tag="w").copy()
            synced = colls[r].broadcast(second.copy(), root=0)
            return first, second, synced

        out = run_ranks(rank, world)
        for o in out:
            assert not isinstance(o, BaseException), o
        server_first, server_second, _ = out[0]  # rank 0 serves the whole tensor: its results are the aggregates
        assert np.all(np.isin(server_first, [1, 3, 5, 7])) and np.all(np.isin(server_second, [8, 24, 40, 56]))
        assert np.count_nonzero(server_first != 7) <= 2 * bound * n, "each push within its bound"

        def packets_of(a):
            pad = (-a.size) % epp
            return np.concatenate([a, np.full(pad, np.nan, a.dtype)]).reshape(-1, epp)

        drifted = 0
        for r in range(1, world):
            first, second, synced = out[r]
            for got, fresh, previous in ((first, server_first, xs[r]), (second, server_second, first)):
                g, f, p = packets_of(got), packets_of(fresh), packets_of(previous)
                is_fresh = np.all((g == f) | np.isnan(f), axis=1)
                is_stale = np.all((g == p) | np.isnan(p), axis=1)
                assert np.all(is_fresh | is_stale), "a pulled packet is the aggregate or the previous value, whole"
                stale = np.count_nonzero(got != fresh)
                assert stale <= bound * n, "pull loss within the bound"
                drifted += stale
            # Every element the worker accounted as lost in a pull is one that stayed stale, and vice versa.
            assert colls[r].stats.by_kind["pull"][0] == np.count_nonzero(first != server_first) + np.count_nonzero(
                second != server_second
            )
            np.testing.assert_array_equal(synced, server_second, "the broadcast re-synchronises to the root's values")
        assert drifted > 0, "some pull lost packets: the replicas drifted before the broadcast"
    finally:
        close(eps)


def test_two_concurrent_jobs_do_not_mix() -> None:
    world, n = 2, 80_000
    eps_a, colls_a = group(world, job_id=1, token=111)
    eps_b, colls_b = group(world, job_id=2, token=222)
    try:

        def rank(i):
            job, r = divmod(i, world)
            colls = colls_a if job == 0 else colls_b
            x = np.full(n, float(job * 10 + r + 1), dtype=np.float32)
            for _ in range(3):
                x[:] = job * 10 + r + 1
                colls[r].allreduce_ring(x)
            return x

        out = run_ranks(rank, 2 * world)
        assert np.all(out[0] == 3) and np.all(out[1] == 3)
        assert np.all(out[2] == 23) and np.all(out[3] == 23)
    finally:
        close(eps_a + eps_b)


def test_foreign_and_malformed_datagrams_are_dropped_and_counted() -> None:
    world, n = 2, 100_000
    eps, colls = group(world, job_id=5, token=0xABCD)
    other, _ = group(world, job_id=6, token=0x1234)
    target = eps[1].address
    noise = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        good = Header(PacketType.DATA, job_id=5, token=0xABCD, msg_id=1, round=1, pkt_count=10, length=8)
        garbage = [
            b"",
            b"\x00",
            b"\xff" * 39,
            bytes(200),
            good.replace(token=1).pack() + bytes(8),  # spoofed: right job, wrong token
            good.replace(job_id=9).pack() + bytes(8),  # unknown job
            good.replace(version=2).pack() + bytes(8),
            good.replace(length=4000).pack() + bytes(8),  # truncated
            good.replace(seq=99, offset=10**9).pack() + bytes(8),  # out of range (once expected)
        ]

        def rank(r):
            if r == 1:
                for _ in range(20):
                    for g in garbage:
                        noise.sendto(g, target)
            x = np.full(n, float(r + 1), dtype=np.float32)
            # A misdirected peer of another job sends into this job's socket too.
            if r == 0:
                other[0].sock.sendto(Header(PacketType.PROBE, job_id=6, token=0x1234).pack(), target)
            return colls[r].allreduce_ring(x)

        out = run_ranks(rank, world)
        assert np.all(out[0] == 3) and np.all(out[1] == 3)
        c = eps[1].asm.counters
        assert c[DropReason.BAD_TOKEN] >= 20 and c[DropReason.UNKNOWN_JOB] >= 21
        assert c[DropReason.TRUNCATED] >= 40 and c[DropReason.BAD_VERSION] >= 20
    finally:
        noise.close()
        close(eps + other)


def test_peer_death_raises_naming_the_peer() -> None:
    world = 3
    transport = TransportConfig(port=0, payload_bytes=1024, peer_timeout_s=1.0)
    eps, colls = group(world, transport=transport)
    eps[2].close()  # rank 2 dies before the collective

    def rank(r):
        if r == 2:
            return "dead"
        start = time.monotonic()
        try:
            colls[r].allreduce_ring(np.ones(50_000, dtype=np.float32))
        except PeerTimeoutError as exc:
            return exc, time.monotonic() - start
        return "no error"

    try:
        out = run_ranks(rank, world, timeout_s=30)
        for r in (0, 1):
            assert isinstance(out[r], tuple), out[r]
            exc, waited = out[r]
            assert exc.rank == 2 and "rank 2" in str(exc)
            assert waited < 1.0 + 3.0, "detected within the configured bound (plus the probe back-off)"
    finally:
        close(eps[:2])


def _send_reliable(transport, drop_classes, window):
    """One reliable message (bound 0) from rank 0 to rank 1 with 3% loss injected at rank 1."""
    from dlcp.message import MessageKey, MessageSpec

    transport = dataclasses.replace(transport, reorder_window=window)
    eps = [
        Endpoint(rank=r, job_id=1, token=7, addresses=addresses, transport=transport,
                 loss=LossSpec(rate=0.03, seed=4) if r == 1 else None)
        for addresses in [{r: ("127.0.0.1", free_port()) for r in range(2)}] for r in range(2)
    ]  # fmt: skip
    try:
        spec = MessageSpec(MessageKey(1, 0, 1, 0), MessageKind.ALL_GATHER, 256 * 20000, 256)  # many batches
        values = np.random.default_rng(0).standard_normal(spec.num_elems).astype(np.float32)
        out = np.zeros_like(values)
        handle = eps[1].post_recv(spec, out)
        classes = None if drop_classes is None else (np.arange(spec.pkt_count) % 2).astype(np.uint8)
        eps[0].send(spec, values, 1, priority=3, drop_classes=classes)
        eps[1].wait(handle)
        np.testing.assert_array_equal(out, values)
        return eps[1].early_nacks, eps[0].send_stats.retransmitted, eps[1].loss.dropped
    finally:
        close(eps)


@pytest.mark.parametrize("transport", [C_PATH, NUMPY_PATH])
def test_reliable_message_losses_are_nacked_during_the_first_pass(transport) -> None:
    nacks, retransmitted, dropped = _send_reliable(transport, None, window=64)
    assert nacks > 0, "gaps a window behind the newest packet are reported before the sender probes"
    # Each gap is named once: retransmissions cover the drops (and drops of retransmissions), no more.
    assert dropped <= retransmitted <= 2 * dropped
    nacks, retransmitted, dropped = _send_reliable(transport, None, window=0)
    assert nacks == 0 and dropped <= retransmitted <= 2 * dropped  # off: the probe rounds alone recover


def test_reliable_message_is_sent_in_order_whatever_its_drop_classes() -> None:
    """Drop classes would reorder the first pass (one batch per class), so a reliable message has none."""
    nacks, retransmitted, dropped = _send_reliable(SMALL, "alternating", window=64)
    assert nacks > 0 and dropped <= retransmitted <= 2 * dropped  # no spurious NACKs of unsent packets


def test_a_bitmap_before_the_first_pass_ends_is_not_acted_on() -> None:
    """Acting on it would probe, and a probe tells the receiver the pass is over."""
    from dlcp.host.endpoint import _Out
    from dlcp.message import MessageKey, MessageSpec

    eps = local_endpoints(2, token=7, transport=SMALL)
    try:
        spec = MessageSpec(MessageKey(1, 0, 1, 0), MessageKind.ALL_GATHER, 256 * 16, 256)
        values = np.zeros(spec.num_elems, dtype=np.float32)
        out = _Out(spec, values, 1, np.zeros(spec.pkt_count, dtype=np.uint8), time.monotonic(), 7)
        bitmap = Header(PacketType.BITMAP, Flag.FINAL, job_id=1, src=0, token=7, msg_id=1, length=2, seq=0)
        with eps[0]._cond:
            eps[0]._on_bitmap(out, bitmap, b"\x0f\x00", time.monotonic())  # 12 of 16 missing
            assert (eps[0].send_stats.retransmitted, out.probe_id) == (0, 0), "mid-pass: ignored"
            out.passed = True
            eps[0]._on_bitmap(out, bitmap, b"\x0f\x00", time.monotonic())
            assert (eps[0].send_stats.retransmitted, out.probe_id) == (12, 1), "after the pass: served"
    finally:
        close(eps)


def test_a_probe_in_the_batch_that_completed_its_message_gets_no_second_stop() -> None:
    """The STOP sent on completion answers a probe sent before it; a later probe is answered again."""
    from dlcp.message import MessageKey, MessageSpec

    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    raw.bind(("127.0.0.1", 0))
    raw.settimeout(0.3)
    ep = Endpoint(rank=1, job_id=1, token=7, addresses={0: raw.getsockname(), 1: ("127.0.0.1", 0)}, transport=SMALL)

    def replies() -> list[PacketType]:
        got = []
        try:
            while True:
                got.append(Header.unpack(raw.recv(65536)[:HEADER_SIZE]).type)
        except TimeoutError:
            return got

    try:
        spec = MessageSpec(MessageKey(1, 0, 5, 0), MessageKind.ALL_GATHER, 256 * 4, 256)
        values = np.arange(spec.num_elems, dtype=np.float32)
        handle = ep.post_recv(spec, np.zeros_like(values))
        for d in build_packets(spec, values, token=7, priority=3, last=True).packets():
            raw.sendto(d, ep.address)
        np.testing.assert_array_equal(ep.wait(handle).view.view(np.float32), values)
        assert replies() == [PacketType.STOP]
        probe = Header(PacketType.PROBE, job_id=1, src=0, token=7, msg_id=5, seq=1)
        with ep._cond:  # as if the probe had come in the batch that completed the message
            ep._on_probe(probe, time.monotonic())
        assert replies() == [] and ep.stops_saved == 1
        raw.sendto(probe.pack(), ep.address)  # a later batch: the first STOP may have been lost
        assert replies() == [PacketType.STOP]
    finally:
        ep.close()
        raw.close()


@pytest.mark.parametrize("mode", ["ps", "ring"])
def test_no_packet_is_drop_eligible_in_a_message_whose_bound_allows_no_packet(mode, monkeypatch) -> None:
    """A 1% bound on a 25-packet message lets no packet go missing: every trim or drop of an eligible
    packet would be retransmitted, so such a message goes out all protected (drop class 0); a message
    large enough for its bound to cover packets keeps its drop classes."""
    sent: list[tuple[MessageKind, int, np.ndarray | None]] = []
    real = Endpoint.send_start

    def spy(self, spec, values, dst, priority, drop_classes=None):
        sent.append((spec.kind, spec.pkt_count, drop_classes))
        return real(self, spec, values, dst, priority, drop_classes)

    monkeypatch.setattr(Endpoint, "send_start", spy)
    eps, colls = group(2)
    per_packet = elems_per_packet(SMALL.payload_bytes, dtype_code(np.float32))
    try:
        for packets in (25, 2000):  # per rank: 1% of 25 packets < 1 packet; 1% of 1000-packet halves > 1 packet
            sent.clear()
            xs = inputs(2, packets * per_packet)
            out = run_ranks(lambda r, xs=xs: colls[r].allreduce(xs[r].copy(), mode=mode), 2)
            assert not any(isinstance(o, BaseException) for o in out), out
            lossy = [(n, d) for kind, n, d in sent if kind in (MessageKind.PUSH, MessageKind.REDUCE_SCATTER)]
            assert lossy
            for n, drops in lossy:
                may_lose = int(0.01 * n * per_packet) >= per_packet
                eligible = drops is not None and bool(np.any(drops > 0))
                assert eligible == may_lose, (packets, n, drops)
    finally:
        close(eps)


@pytest.mark.parametrize("mode", ["ring", "ps"])
def test_deferred_acknowledgements_never_read_a_tensor_the_caller_changed(mode) -> None:
    """With ``defer_acks`` a collective returns before its last STOPs; the caller then overwrites its tensor at
    once (as DDP does with the next iteration's gradients) while data packets are being lost: every rank still
    ends each round with the same sum, and ``settle`` leaves nothing outstanding."""
    world, n = 3, 40_000
    policy = Policy(kinds={**Policy().kinds, MessageKind.ALL_GATHER: KindPolicy(loss_bound=0.0)})
    eps, colls = group(world, policy=policy, loss=LossSpec(rate=0.05, seed=11), servers=(0, 1, 2))
    try:
        rounds = [inputs(world, n, seed=s) for s in range(4)]

        def rank(r):
            colls[r].defer_acks = True
            x = np.empty(n, dtype=np.float32)
            out = []
            for xs in rounds:
                x[:] = xs[r]
                colls[r].allreduce(x, mode=mode, tag="bucket", average=True)
                out.append(x.copy())
                x[:] = np.nan  # what a retransmission must never send
            colls[r].settle()
            return out, sum(len(v) for v in colls[r]._unacked.values())

        results = run_ranks(rank, world)
        for r in range(world):
            assert not isinstance(results[r], BaseException), results[r]
            assert results[r][1] == 0, "settle collected every deferred send"
            for k in range(len(rounds)):
                assert not np.isnan(results[r][0][k]).any()
                np.testing.assert_array_equal(results[r][0][k], results[0][0][k])
    finally:
        close(eps)


@pytest.mark.parametrize("transport", [C_PATH, NUMPY_PATH])
def test_a_ring_with_a_slow_hop_sends_less_over_it_and_stays_exact(transport) -> None:
    """Rank 2's hop (toward rank 0) is paced at a fifth of the others': its chunk is empty, so that hop carries the
    tensor once instead of 4/3 times (dlcp.ring_shares), in segments, and the sum is still exact and the same on
    every rank."""
    world, n = 3, 300_001  # 1.2 MB: 4 segments
    fast, slow = 2_000_000_000, 400_000_000
    rates = {"127.0.0.1": fast, "127.0.0.2": fast, "127.0.0.3": slow}
    cfg = dataclasses.replace(transport, send_rate_bps=rates)
    eps = local_endpoints(world, transport=cfg, distinct_hosts=True)
    colls = [Collectives(ep, world) for ep in eps]
    try:
        assert colls[0].ring_weights == pytest.approx((0.5, 0.5, 0.0))
        xs = inputs(world, n)
        expected = np.sum(xs, axis=0, dtype=np.float64)
        sent_before = [ep.send_stats.packets for ep in eps]

        def rank(r):
            x = xs[r].copy()
            colls[r].allreduce(x, mode="ring")
            return x

        out = run_ranks(rank, world)
        for r in range(world):
            assert not isinstance(out[r], BaseException), out[r]
            np.testing.assert_allclose(out[r], expected, rtol=1e-5, atol=1e-5)
        assert all(np.array_equal(out[0], o) for o in out), "replicas are bit-identical"
        sent = [ep.send_stats.packets - b for ep, b in zip(eps, sent_before, strict=True)]
        tensor = n * 4 / cfg.payload_bytes  # packets of the whole tensor
        assert sent[2] <= tensor + 8, f"the slow hop carries the tensor once, not 4/3 times: {sent} ({tensor:.0f})"
        assert sent[0] >= 1.5 * tensor - 8, sent  # a fast hop carries what the slow one does not
    finally:
        close(eps)


def _staggered(colls, mode, rounds, tag="bucket", lag_s=0.03, ahead=True):
    """Each rank r starts every call r * lag_s after rank 0 (it computed longer), with receives posted ahead or not:
    every round's result per rank."""

    def rank(r):
        colls[r].post_ahead = ahead
        colls[r].defer_acks = True
        out = []
        for xs in rounds:
            x = xs[r].copy()
            time.sleep(lag_s * r)
            colls[r].allreduce(x, mode=mode, tag=tag)
            out.append(x)
        colls[r].settle()
        return out

    return run_ranks(rank, len(colls))


@pytest.mark.parametrize("mode", ["ring", "ps"])
@pytest.mark.parametrize("transport", [C_PATH, NUMPY_PATH])
def test_receives_posted_ahead_are_taken_by_their_call_and_sum_bit_for_bit(mode, transport) -> None:
    """Ranks that start each call later than their peers find the call's reduce-on-receive data posted ahead
    (``post_ahead``) and placed as it arrived: once the tag's calls repeat, every later call takes every such
    receive, none is forgotten, and every rank's result is the one without posting ahead: bit for bit in a ring
    (signed zeros included: a buffer posted ahead starts at -0.0)."""
    world, n, calls = 3, 30_001, 6
    servers = (0, 1, 2) if mode == "ps" else (0,)
    rounds = [inputs(world, n, seed=s) for s in range(calls)]
    for xs in rounds:
        for x in xs:
            x[:50] = -0.0  # the sum of signed zeros is -0.0 only if every addend is
            x[50:100] = 0.0
    results = {}
    for ahead in (False, True):
        eps, colls = group(world, servers=servers, transport=transport)
        try:
            results[ahead] = _staggered(colls, mode, rounds, ahead=ahead)
            stats = [c.stats for c in colls]
        finally:
            close(eps)
    per_call = world - 1  # receives a rank reduces on in a call: ring steps, or the other workers' pushes
    for r in range(world):
        assert not isinstance(results[True][r], BaseException), results[True][r]
        for k in range(calls):
            if mode == "ring":  # one sender per message: the same additions in the same order
                assert results[True][r][k].tobytes() == results[False][r][k].tobytes(), (r, k)
            else:  # a server adds the pushes in the order they arrive, posted ahead or not
                np.testing.assert_allclose(results[True][r][k], results[False][r][k], rtol=1e-6, atol=1e-6)
                assert (np.signbit(results[True][r][k]) == np.signbit(results[False][r][k]))[:100].all()
        # Calls 1 and 2 show the tag's pattern; calls 3..6 post ahead for 4..7, and 4..6 take theirs.
        assert stats[r].ahead_posted == (calls - 2) * per_call, stats[r]
        assert stats[r].ahead_adopted == (calls - 3) * per_call, stats[r]
        assert stats[r].ahead_dropped == 0, stats[r]
    assert np.signbit(results[True][0][0][:50]).all() and not np.signbit(results[True][0][0][50:100]).any()


@pytest.mark.parametrize("transport", [C_PATH, NUMPY_PATH])
def test_a_receive_posted_ahead_that_meets_another_message_holds_it_for_that_call(transport) -> None:
    """A call that did not come as foreseen: after steady calls of one tag, the ranks call another tag with another
    size and layer, so that its reduce-scatter messages carry the keys posted ahead for the first tag. The late
    rank's receives posted ahead hold those packets as early ones (nothing counted as malformed), the call forgets
    them and posts its own, and every sum is exact."""
    world, n, other = 2, 20_000, 7_001
    eps, colls = group(world, transport=transport)
    try:
        steady = [inputs(world, n, seed=s) for s in range(3)]
        odd = inputs(world, other, seed=9)

        def rank(r):
            colls[r].post_ahead = True
            out = []
            for xs in steady:
                x = xs[r].copy()
                colls[r].allreduce(x, mode="ring", tag="a", layer=0, num_layers=2)
                out.append(x)
            x = odd[r].copy()
            time.sleep(0.3 * r)  # rank 1 starts late: rank 0's packets meet rank 1's receives posted ahead
            colls[r].allreduce(x, mode="ring", tag="b", layer=1, num_layers=2)
            out.append(x)
            return out

        results = run_ranks(rank, world)
        for r in range(world):
            assert not isinstance(results[r], BaseException), results[r]
            for k, xs in enumerate(steady):
                np.testing.assert_allclose(results[r][k], xs[0] + xs[1], rtol=1e-6)
            np.testing.assert_allclose(results[r][-1], odd[0] + odd[1], rtol=1e-6)
        assert colls[1].stats.ahead_dropped >= 1, colls[1].stats
        bad = [DropReason.BAD_KIND, DropReason.BAD_COUNT, DropReason.BAD_LENGTH, DropReason.BAD_DTYPE]
        for ep in eps:
            assert all(ep.asm.counters.counts[b] == 0 for b in bad), ep.asm.counters.counts
    finally:
        close(eps)


@pytest.mark.parametrize("transport", [C_PATH, NUMPY_PATH])
def test_a_tag_whose_calls_come_closer_together_keeps_one_receive_posted_ahead_per_buffer(transport) -> None:
    """A tag's calls 5 rounds apart, then 2: the guess for the round 5 on is still pending when the new period posts
    ahead into the same buffer, and is forgotten then; the call that meets its key (another tag's) posts its own,
    and every sum is exact."""
    world, n = 2, 10_000
    eps, colls = group(world, transport=transport)
    try:
        xs = inputs(world, n, seed=3)
        small = inputs(world, 3_001, seed=4)
        tags = ["b", "x", "x", "x", "x"] * 3 + [
            "b",
            "x",
            "b",
            "x",
            "b",
            "x",
            "b",
        ]  # b at rounds 1, 6, 11, 16, 18, 20, 22

        def rank(r):
            colls[r].post_ahead = True
            out = []
            for tag in tags:
                x = (xs if tag == "b" else small)[r].copy()
                colls[r].allreduce(x, mode="ring", tag=tag)
                out.append(x)
            return out

        results = run_ranks(rank, world)
        for r in range(world):
            assert not isinstance(results[r], BaseException), results[r]
            for tag, got in zip(tags, results[r], strict=True):
                want = xs[0] + xs[1] if tag == "b" else small[0] + small[1]
                np.testing.assert_allclose(got, want, rtol=1e-6)
            assert colls[r].stats.ahead_dropped >= 1, colls[r].stats
    finally:
        close(eps)
