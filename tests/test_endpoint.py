"""One endpoint's waits, timeouts and packet marking, on loopback.

These are the transport's promises that a collective's result does not show:
a waiting thread sleeps, a live peer is never declared dead, a silent one is
within the configured bound, and control packets carry the TOS byte the
documentation gives them.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import numpy as np
import pytest

from dlcp.config import TransportConfig
from dlcp.drops import DropReason
from dlcp.host.endpoint import Endpoint, free_port
from dlcp.host.errors import PeerTimeoutError
from dlcp.host.local import local_endpoints
from dlcp.host.loss import LossSpec
from dlcp.host.pacing import PacingConfig
from dlcp.limits import Limits
from dlcp.message import MessageKey, MessageSpec
from dlcp.packetizer import build_packets
from dlcp.protocol import CONTROL_PRIORITY, HEADER_SIZE, Flag, MessageKind, PacketType, tos_for
from dlcp.wire import Header

pytestmark = pytest.mark.timing  # CPU and wall time of waits, pacing rates, timeouts

TOKEN = 7
C_PATH = pytest.param(True, id="c", marks=pytest.mark.fastpath)
NUMPY_PATH = pytest.param(False, id="numpy")


def _spec(msg_id: int, n: int, src: int = 0, kind: MessageKind = MessageKind.ALL_GATHER) -> MessageSpec:
    return MessageSpec(MessageKey(1, src, msg_id, 0), kind, n, 256)


def _close(eps: list[Endpoint]) -> None:
    for ep in eps:
        ep.close()


@pytest.mark.parametrize("fast_path", [C_PATH, NUMPY_PATH])
def test_send_wait_sleeps_while_another_send_is_stopped(fast_path: bool) -> None:
    """A STOPped send whose deadline passed must not make a wait on another send spin.

    Send A completes (STOP) but stays started until its own ``send_wait``; send B
    waits about a second for its receiver to post. Waiting on B must cost next
    to no CPU: the thread's CPU time over the wait is compared with the wall time.
    """
    transport = TransportConfig(port=0, payload_bytes=1024, peer_timeout_s=5.0, fast_path=fast_path)
    eps = local_endpoints(2, token=TOKEN, transport=transport)
    try:
        a, b = _spec(1, 256 * 8), _spec(2, 256 * 8)
        va, vb = np.ones(a.num_elems, np.float32), np.full(b.num_elems, 2.0, np.float32)
        out_a, out_b = np.zeros_like(va), np.zeros_like(vb)
        handle_a = eps[1].post_recv(a, out_a)
        started_a = eps[0].send_start(a, va, 1, priority=3)
        eps[1].wait(handle_a)
        deadline = time.monotonic() + 2.0
        while not started_a.stopped and time.monotonic() < deadline:
            time.sleep(0.01)
        assert started_a.stopped, "A was acknowledged"
        started_b = eps[0].send_start(b, vb, 1, priority=3)
        late = threading.Timer(1.0, lambda: eps[1].post_recv(b, out_b))
        late.start()
        try:
            wall0, cpu0 = time.monotonic(), time.thread_time()
            eps[0].send_wait(started_b)
            wall, cpu = time.monotonic() - wall0, time.thread_time() - cpu0
        finally:
            late.join()
        eps[0].send_wait(started_a)
        np.testing.assert_array_equal(out_b, vb)
        assert wall > 0.8, "the wait lasted until B's receiver posted"
        # A sleeping wait wakes for each probe (every 10 ms doubling to 200 ms) and
        # each reply: a few milliseconds of CPU. A spinning one uses the CPU it gets.
        assert cpu < 0.15 * wall, f"send_wait used {cpu:.3f} s of CPU in {wall:.3f} s"
    finally:
        _close(eps)


@pytest.mark.parametrize("fast_path", [C_PATH, NUMPY_PATH])
def test_a_receive_outlasts_the_timeout_while_its_peer_keeps_sending(fast_path: bool) -> None:
    """A receive posted long before its data comes does not time out while the peer is busy sending.

    Rank 1 posts every receive up front (as the ring all-reduce does) and waits on
    the last one first; rank 0, paced, sends the others first. The wait lasts
    more than twice the peer timeout, with data arriving all along.
    """
    timeout = 1.0
    transport = TransportConfig(port=0, payload_bytes=1024, peer_timeout_s=timeout, fast_path=fast_path)
    rate = 100e3  # bytes/s: a 16-packet message every ~0.17 s
    pacing = PacingConfig(max_rate=rate, min_rate=rate, increase=0.0, burst=4096)
    addresses = {r: ("127.0.0.1", free_port()) for r in range(2)}
    eps = [
        Endpoint(rank=r, job_id=1, token=TOKEN, addresses=addresses, transport=transport, pacing=pacing)
        for r in range(2)
    ]
    try:
        specs = [_spec(i, 256 * 16) for i in range(16)]
        values = [np.full(s.num_elems, float(i), np.float32) for i, s in enumerate(specs)]
        outs = [np.zeros_like(v) for v in values]
        handles = [eps[1].post_recv(s, o) for s, o in zip(specs, outs, strict=True)]

        failed: list[BaseException] = []

        def sender() -> None:
            try:
                for s, v in zip(specs, values, strict=True):
                    eps[0].send(s, v, 1, priority=3)
            except BaseException as exc:  # reported below (after a receive error, the endpoints close)
                failed.append(exc)

        t = threading.Thread(target=sender, daemon=True)
        start = time.monotonic()
        t.start()
        eps[1].wait(handles[-1])
        waited = time.monotonic() - start
        for h in handles[:-1]:
            eps[1].wait(h)
        t.join(10.0)
        assert not failed, failed
        assert waited > 2 * timeout, f"the last message arrived after {waited:.2f} s: the test needs > {2 * timeout}"
        for o, v in zip(outs, values, strict=True):
            np.testing.assert_array_equal(o, v)
    finally:
        _close(eps)


class RawPeer:
    """A rank as a plain UDP socket: sends what the test says, answers nothing, sees each datagram's TOS byte."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)

    @property
    def address(self) -> tuple[str, int]:
        return self.sock.getsockname()

    def receive(self, quiet_s: float = 0.3) -> list[tuple[Header, int]]:
        """(header, TOS byte) of every datagram until none came for ``quiet_s``."""
        got = []
        self.sock.settimeout(quiet_s)
        try:
            while True:
                data, anc, _, _ = self.sock.recvmsg(65536, socket.CMSG_SPACE(4))
                tos = [d[0] for level, kind, d in anc if (level, kind) == (socket.IPPROTO_IP, socket.IP_TOS)]
                assert len(tos) == 1, anc
                got.append((Header.unpack(data[:HEADER_SIZE]), tos[0]))
        except TimeoutError:
            return got

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("probing", [False, True], ids=["quiet", "probing"])
def test_a_silent_peer_times_out_within_the_bound_and_is_named(probing: bool) -> None:
    """Rank 0 sends half a message, then no data: rank 1's wait raises within the bound, naming rank 0.

    Probes do not keep a receive alive ("probing"): a peer's receive thread
    sends them while its application may be stuck (a deadlock would never end).
    """
    timeout = 1.0
    peer = RawPeer()
    ep = Endpoint(
        rank=1, job_id=1, token=TOKEN, addresses={0: peer.address, 1: ("127.0.0.1", 0)},
        transport=TransportConfig(port=0, payload_bytes=1024, peer_timeout_s=timeout),
    )  # fmt: skip
    stop = threading.Event()

    def probe_another_message() -> None:
        probe = Header(PacketType.PROBE, job_id=1, src=0, token=TOKEN, msg_id=99, pkt_count=1, seq=1).pack()
        while not stop.wait(0.1):
            peer.sock.sendto(probe, ep.address)

    prober = threading.Thread(target=probe_another_message, daemon=True)
    try:
        spec = _spec(5, 256 * 32)
        values = np.ones(spec.num_elems, np.float32)
        handle = ep.post_recv(spec, np.zeros_like(values))
        datagrams = build_packets(spec, values, token=TOKEN, priority=3).packets()
        for d in datagrams[:16]:
            peer.sock.sendto(d, ep.address)
        last_data = time.monotonic()
        if probing:
            prober.start()
        raised: list[tuple[BaseException, float]] = []

        def waiter() -> None:
            try:
                ep.wait(handle)
            except BaseException as exc:  # checked below
                raised.append((exc, time.monotonic()))

        t = threading.Thread(target=waiter, daemon=True)
        t.start()
        t.join(timeout + 3.0)  # a wait that never ends fails here rather than hanging the suite
        assert raised, f"no error {timeout + 3.0:.1f} s after the peer's last data packet"
        exc, when = raised[0]
        assert isinstance(exc, PeerTimeoutError), exc
        assert exc.rank == 0 and "rank 0" in str(exc)
        silent = when - last_data
        # The error reports the silence that timed it out (data), not the probes' liveness.
        assert exc.waited_s >= timeout and f"silent for {exc.waited_s:.1f} s" in str(exc), str(exc)
        assert timeout <= silent < timeout + 1.0, f"raised {silent:.2f} s after the last data packet"
    finally:
        stop.set()
        if prober.is_alive():
            prober.join()
        ep.close()
        peer.close()


CONTROL_TOS = tos_for(CONTROL_PRIORITY, 0)


@pytest.mark.parametrize("fast_path", [C_PATH, NUMPY_PATH])
def test_packets_carry_the_tos_of_their_class_on_the_wire(fast_path: bool) -> None:
    """Control packets (BITMAP, STOP) and retransmissions in the control class, data and its PROBEs in its own.

    docs/transport.md: control travels at the top priority class (CS7 by
    default) and is never drop-eligible; ``protocol.tos_for`` gives the byte. A
    PROBE asks what arrived of a pass, so it travels in the pass's class (header
    and TOS): a switch queues it behind its data, never ahead of it nor below it.
    """
    assert CONTROL_TOS >> 5 == CONTROL_PRIORITY == 7, "class selector 7 (CS7) in the precedence bits"
    # The raw peer never answers, so the send probes (every max_rto_s at most) until the peer timeout: 1 s of it.
    transport = TransportConfig(port=0, payload_bytes=1024, fast_path=fast_path, peer_timeout_s=1.0)
    peer = RawPeer()
    ep = Endpoint(rank=1, job_id=1, token=TOKEN, addresses={0: peer.address, 1: ("127.0.0.1", 0)}, transport=transport)
    try:
        # As a sender to the raw peer: data at its priority and drop classes, then a PROBE.
        spec = MessageSpec(MessageKey(1, 1, 1, 0), MessageKind.PUSH, 256 * 8, 256, loss_bound=0.5)
        classes = (np.arange(8) % 2).astype(np.uint8)
        ep.send_start(spec, np.ones(spec.num_elems, np.float32), 0, priority=3, drop_classes=classes)
        got = peer.receive()
        data = [(h.seq, tos) for h, tos in got if h.type == PacketType.DATA]
        assert sorted(data) == [(s, tos_for(3, int(classes[s]))) for s in range(8)]
        probes = [(h.priority, tos) for h, tos in got if h.type == PacketType.PROBE]
        assert probes and set(probes) == {(3, tos_for(3, 0))}
        # A BITMAP naming every packet missing: retransmissions in the control class, then a new PROBE.
        probe_id = max(h.seq for h, _ in got if h.type == PacketType.PROBE)
        bitmap = Header(PacketType.BITMAP, Flag.FINAL, job_id=1, src=1, token=TOKEN, msg_id=1, seq=probe_id,
                        pkt_count=8, length=1)  # fmt: skip
        peer.sock.sendto(bitmap.pack() + b"\x00", ep.address)
        got = peer.receive()
        retx = [tos for h, tos in got if h.type == PacketType.DATA]
        assert retx and all(h.flags & Flag.RETX for h, _ in got if h.type == PacketType.DATA)
        assert set(retx) == {CONTROL_TOS}
        assert {(h.priority, tos) for h, tos in got if h.type == PacketType.PROBE} == {(3, tos_for(3, 0))}

        # As a receiver: an empty BITMAP answers a probe for a message not expected yet, STOP a completion.
        peer.sock.sendto(Header(PacketType.PROBE, job_id=1, src=0, token=TOKEN, msg_id=9, seq=1).pack(), ep.address)
        rspec = _spec(2, 256 * 4)
        values = np.arange(rspec.num_elems, dtype=np.float32)
        handle = ep.post_recv(rspec, np.zeros_like(values))
        for d in build_packets(rspec, values, token=TOKEN, priority=3).packets():
            peer.sock.sendto(d, ep.address)
        ep.wait(handle)
        got = peer.receive()
        replies = {(h.type, h.msg_id): tos for h, tos in got}  # (the send above still probes meanwhile)
        assert replies[(PacketType.BITMAP, 9)] == replies[(PacketType.STOP, 2)] == CONTROL_TOS
        assert {(h.priority, tos) for h, tos in got if h.type != PacketType.PROBE} == {(CONTROL_PRIORITY, CONTROL_TOS)}
        # A late PROBE of the completed message: its STOP (answered in C on the fast path) is marked too.
        late = Header(PacketType.PROBE, kind=rspec.kind, job_id=1, src=0, token=TOKEN, msg_id=2,
                      pkt_count=rspec.pkt_count, seq=2)  # fmt: skip
        peer.sock.sendto(late.pack(), ep.address)
        got = peer.receive()
        assert [(h.type, tos) for h, tos in got if h.msg_id == 2] == [(PacketType.STOP, CONTROL_TOS)], got
    finally:
        ep.close()
        peer.close()


@pytest.mark.parametrize("fast_path", [C_PATH, NUMPY_PATH])
def test_an_idle_endpoint_evicts_stale_early_packets(fast_path: bool) -> None:
    """Early packets of a message never posted are evicted once stale by the receive thread, nothing else coming."""
    peer = RawPeer()
    ep = Endpoint(
        rank=1, job_id=1, token=TOKEN, addresses={0: peer.address, 1: ("127.0.0.1", 0)},
        transport=TransportConfig(port=0, payload_bytes=1024, fast_path=fast_path),
        limits=Limits(max_stash_age_s=0.3),
    )  # fmt: skip
    try:
        spec = _spec(3, 256 * 8)
        for d in build_packets(spec, np.ones(spec.num_elems, np.float32), token=TOKEN, priority=3).packets():
            peer.sock.sendto(d, ep.address)
        deadline = time.monotonic() + 2.0
        while ep.asm.counters[DropReason.OK] < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        with ep._lock:
            assert ep.asm.stash_bytes == 8 * (HEADER_SIZE + 1024), "stashed: the message is not expected"
        time.sleep(1.0)
        with ep._lock:
            assert ep.asm.stash_bytes == 0
            assert ep.asm.counters[DropReason.STASH_EXPIRED] == 8
    finally:
        ep.close()
        peer.close()


def test_a_wait_does_not_probe_a_send_still_in_its_first_pass() -> None:
    """Another thread's send that is still transmitting has no deadline yet: a wait neither probes it nor spins."""
    rate = 200e3
    pacing = PacingConfig(max_rate=rate, min_rate=rate, increase=0.0, burst=4096)
    addresses = {r: ("127.0.0.1", free_port()) for r in range(2)}
    transport = TransportConfig(port=0, payload_bytes=1024, peer_timeout_s=5.0)
    eps = [
        Endpoint(rank=r, job_id=1, token=TOKEN, addresses=addresses, transport=transport, pacing=pacing)
        for r in range(2)
    ]
    try:
        # Many small batches: the first pass takes about a second.
        big = _spec(1, 256 * 200)
        eps[1].post_recv(big, np.zeros(big.num_elems, np.float32))
        eps[0]._per_build = 8
        sender = threading.Thread(
            target=eps[0].send_start, args=(big, np.ones(big.num_elems, np.float32), 1), kwargs={"priority": 3}
        )
        small = _spec(2, 256, src=1)
        handle = eps[0].post_recv(small, np.zeros(small.num_elems, np.float32))
        sender.start()
        time.sleep(0.1)
        threading.Timer(0.8, lambda: eps[1].send(small, np.ones(small.num_elems, np.float32), 0, priority=3)).start()
        wall0, cpu0 = time.monotonic(), time.thread_time()
        eps[0].wait(handle)
        wall, cpu = time.monotonic() - wall0, time.thread_time() - cpu0
        sender.join(5.0)
        assert wall > 0.5
        assert cpu < 0.15 * wall, f"wait used {cpu:.3f} s of CPU in {wall:.3f} s"
        assert eps[0].send_stats.probes <= 3, "only the send's own probes, after its first pass"
    finally:
        _close(eps)


@pytest.mark.fastpath
def test_a_message_goes_out_in_as_few_send_calls_as_the_pacer_allows() -> None:
    """At the full rate a 4 MB first pass is one C call; paced at 100 MB/s it is one C call too, which spaces
    the bursts itself at the rate (the pass lasts its bytes over the rate, less the first burst), and the
    pacer's bucket is debited the whole pass: a second message waits for it.

    Premise: the receiver takes the whole first pass (on a loaded machine its thread may lose datagrams on the
    loopback, and the retransmissions are calls of their own); otherwise the window is run again."""
    transport = TransportConfig(port=0, payload_bytes=8192, peer_timeout_s=5.0)
    burst = 1_000_000
    for rate in (12.5e9, 100e6):
        pacing = PacingConfig(max_rate=rate, min_rate=1e6, burst=burst)
        missed = []
        for _ in range(3):
            eps = local_endpoints(2, token=TOKEN, transport=transport, pacing=pacing)
            try:
                spec = MessageSpec(MessageKey(1, 0, 1, 0), MessageKind.ALL_GATHER, 1 << 20, 2048)
                values = np.arange(spec.num_elems, dtype=np.float32)
                got = np.zeros_like(values)
                handle = eps[1].post_recv(spec, got)
                nbytes = spec.pkt_count * (HEADER_SIZE + 8192)
                t0 = time.monotonic()
                out = eps[0].send_start(spec, values, 1, priority=3)
                took = time.monotonic() - t0
                first_pass_calls = eps[0]._tx.calls  # type: ignore[attr-defined]
                eps[0].send_wait(out)
                eps[1].wait(handle)
                np.testing.assert_array_equal(got, values)
                if eps[0].send_stats.retransmitted:
                    missed.append(eps[0].send_stats.retransmitted)
                    continue  # premise not met: packets of the first pass were lost
                assert first_pass_calls == eps[0]._tx.calls == 1, (rate, first_pass_calls)  # type: ignore[attr-defined]
                if rate < 1e9:
                    first = eps[0]._per_call(1) * (HEADER_SIZE + 8192)
                    assert took >= 0.95 * (nbytes - first) / rate, (took, nbytes, first)
                    assert eps[0].pacer(1).slept > 0.5 * (nbytes - first) / rate
                break
            finally:
                _close(eps)
        else:
            pytest.skip(f"premise not met in 3 windows: the receiver lost packets of the first pass ({missed})")


@pytest.mark.fastpath
def test_sends_side_by_side_take_turns_a_burst_each() -> None:
    """Several first passes at once (a server's pulls) are not paced in C: each call is one burst of one
    destination's pacer, so they go out side by side rather than one after the other."""
    transport = TransportConfig(port=0, payload_bytes=8192, peer_timeout_s=5.0)
    pacing = PacingConfig(max_rate=100e6, min_rate=1e6, burst=100_000, max_call=100_000)
    eps = local_endpoints(3, token=TOKEN, transport=transport, pacing=pacing)
    try:
        specs = [MessageSpec(MessageKey(1, 0, 1 + d, 0), MessageKind.PULL, 1 << 18, 2048) for d in (1, 2)]
        values = np.arange(1 << 18, dtype=np.float32)
        gots = [np.zeros_like(values) for _ in specs]
        handles = [eps[d].post_recv(s, g) for d, s, g in zip((1, 2), specs, gots, strict=True)]
        outs = eps[0].send_start_many([(s, values, d, 3, None) for d, s in zip((1, 2), specs, strict=True)])
        for o in outs:
            eps[0].send_wait(o)
        for d, h in zip((1, 2), handles, strict=True):
            eps[d].wait(h)
        for g in gots:
            np.testing.assert_array_equal(g, values)
        per_burst = 100_000 // (HEADER_SIZE + 8192)
        assert eps[0]._tx.calls >= 2 * (specs[0].pkt_count // per_burst), eps[0]._tx.calls  # type: ignore[attr-defined]
    finally:
        _close(eps)


@pytest.mark.parametrize("fast_path", [C_PATH, NUMPY_PATH])
def test_retransmissions_beyond_one_call_are_paced_by_the_sender(fast_path: bool) -> None:
    """A BITMAP naming more missing packets than one send call carries: the receive thread sends one call's
    worth, the waiting sender thread the rest, paced, then probes; the message arrives whole."""
    from dlcp.host.loss import LossSpec

    seg = 1024 + HEADER_SIZE
    transport = TransportConfig(port=0, payload_bytes=1024, peer_timeout_s=10.0, fast_path=fast_path)
    pacing = PacingConfig(max_rate=20e6, min_rate=1e6, burst=4 * seg, max_call=2 * seg)
    eps = local_endpoints(2, token=TOKEN, transport=transport, pacing=pacing, loss=LossSpec(rate=0.3, seed=3))
    owed: list[int] = []
    sender = eps[0]
    real = sender._retransmit_owed

    def spy(out: object) -> None:
        owed.append(int(out.retx.size))  # type: ignore[attr-defined]
        real(out)  # type: ignore[arg-type]

    sender._retransmit_owed = spy  # type: ignore[method-assign]
    try:
        spec = _spec(1, 256 * 400)  # 400 packets, bound 0: every loss is sent again
        values = np.arange(spec.num_elems, dtype=np.float32)
        got = np.zeros_like(values)
        handle = eps[1].post_recv(spec, got)
        receiver = threading.Thread(target=eps[1].wait, args=(handle,), daemon=True)
        receiver.start()
        out = sender.send_start(spec, values, 1, priority=3)
        sender.send_wait(out)  # the waiting sender thread owes the retransmissions
        receiver.join(10.0)
        assert handle.event.is_set() and np.array_equal(got, values)
        assert sender.send_stats.retransmitted >= 100
        assert owed and max(owed) > 2, "the sender thread sent owed retransmissions, two packets a call"
    finally:
        _close(eps)


@pytest.mark.parametrize("fast_path", [C_PATH, NUMPY_PATH])
def test_a_receive_posted_after_its_senders_probe_answers_that_probe_at_once(fast_path: bool) -> None:
    """A first pass that arrived before its receive was posted, with loss above the bound: the sender's
    probe was answered with an empty BITMAP (not expected yet), and the sender's next probe is a
    retransmission timeout away (30 s here). Posting the receive answers that probe with what is missing,
    so the message completes without waiting for the timeout."""
    from dlcp.host.loss import LossSpec

    transport = TransportConfig(port=0, payload_bytes=1024, peer_timeout_s=120.0, fast_path=fast_path)
    eps = local_endpoints(
        2, token=TOKEN, transport=transport, loss=LossSpec(rate=0.2, seed=5), initial_rto_s=30.0, max_rto_s=30.0
    )
    try:
        spec = _spec(1, 256 * 100)  # 100 packets, bound 0: the first pass is short of it
        values = np.arange(spec.num_elems, dtype=np.float32)
        got = np.zeros_like(values)
        heard = eps[0]._heard[1]  # when the sender last heard from the receiver (the endpoint's start)
        out = eps[0].send_start(spec, values, 1, priority=3)  # the first pass, then a probe at once
        deadline = time.monotonic() + 10.0
        while eps[0]._heard[1] == heard and time.monotonic() < deadline:
            time.sleep(0.01)
        assert eps[0]._heard[1] > heard, "the receiver answered the probe (an empty BITMAP: not posted yet)"
        posted = time.monotonic()
        handle = eps[1].post_recv(spec, got)
        sender = threading.Thread(target=eps[0].send_wait, args=(out,), daemon=True)
        sender.start()
        eps[1].wait(handle)
        took = time.monotonic() - posted
        sender.join(10.0)
        assert np.array_equal(got, values)
        assert eps[1].loss is not None and eps[1].loss.dropped > 0
        assert took < 10.0, f"the receive completed {took:.1f} s after its post: the sender waited for its timeout"
    finally:
        _close(eps)


def _thread_nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


@pytest.mark.parametrize("fast_path", [C_PATH, NUMPY_PATH])
def test_the_receive_thread_takes_its_rx_nice_and_the_callers_thread_keeps_its_own(fast_path: bool) -> None:
    """``transport.rx_nice`` moves only the receive thread's nice, relative to the thread that opened the endpoint.

    A positive value needs no privilege, so the test runs anywhere; the endpoint
    still delivers with its receive thread reniced.
    """
    mine = _thread_nice(threading.get_native_id())
    transport = TransportConfig(port=0, payload_bytes=1024, rx_nice=2, fast_path=fast_path)
    eps = local_endpoints(2, token=TOKEN, transport=transport)
    try:
        for ep in eps:
            assert ep._rx_nice_set.wait(2.0)
            assert ep._thread.native_id is not None
            assert _thread_nice(ep._thread.native_id) == min(19, mine + 2)
            assert ep.rx_nice == min(19, mine + 2)
        assert _thread_nice(threading.get_native_id()) == mine, "the caller's thread is untouched"
        _one_message_arrives_exactly(eps)
    finally:
        _close(eps)


def _one_message_arrives_exactly(eps: list[Endpoint]) -> None:
    spec = _spec(1, 256 * 4)
    values, out = np.arange(spec.num_elems, dtype=np.float32), np.zeros(spec.num_elems, np.float32)
    handle = eps[1].post_recv(spec, out)
    eps[0].send(spec, values, 1, priority=3)
    eps[1].wait(handle)
    np.testing.assert_array_equal(out, values)


def test_a_refused_rx_nice_is_a_warning_and_the_endpoint_works(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without CAP_SYS_NICE a negative ``rx_nice`` is refused (EACCES): the thread keeps its priority, says so."""

    def refuse(which: int, who: int, prio: int) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "setpriority", refuse)
    transport = TransportConfig(port=0, payload_bytes=1024, rx_nice=-5)
    with caplog.at_level("WARNING", logger="dlcp.host.receiver"):
        eps = local_endpoints(2, token=TOKEN, transport=transport)
    try:
        for ep in eps:
            assert ep._rx_nice_set.wait(2.0)
            assert ep.rx_nice is None
        assert "transport.rx_nice = -5 not applied" in caplog.text
        _one_message_arrives_exactly(eps)
    finally:
        _close(eps)


@pytest.mark.parametrize("bad", [-21, 20, 100])
def test_rx_nice_out_of_range_is_named(bad: int) -> None:
    with pytest.raises(ValueError, match="rx_nice"):
        TransportConfig(rx_nice=bad)


_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
"""Linux's SO_TIMESTAMPNS (also its control message's type); Python's socket module does not name it."""


def _arrivals(sock: socket.socket, quiet_s: float = 0.5) -> list[tuple[float, Header]]:
    """(kernel receive time, header) of every datagram on ``sock`` until none came for ``quiet_s``."""
    got = []
    sock.settimeout(quiet_s)
    try:
        while True:
            data, anc, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(16))
            (stamp,) = [d for level, kind, d in anc if (level, kind) == (socket.SOL_SOCKET, _SO_TIMESTAMPNS)]
            sec, nsec = np.frombuffer(stamp[:16], dtype=np.int64)
            got.append((float(sec) + float(nsec) * 1e-9, Header.unpack(data[:HEADER_SIZE])))
    except TimeoutError:
        return got


def test_first_passes_to_different_ranks_go_side_by_side_each_at_its_rate() -> None:
    """send_start_many: each destination has its own pacer, and the passes interleave (a server's pulls).

    Two 48-packet messages to two ranks at 400 kB/s per destination: side by side they take about 0.13 s;
    one after the other (or both under one host rate), twice that. The second rank's first packet arrives
    long before the first rank's last.
    """
    seg = 1024 + HEADER_SIZE
    transport = TransportConfig(port=0, payload_bytes=1024)
    pacing = PacingConfig(max_rate=400e3, min_rate=100e3, burst=2 * seg, max_call=2 * seg)
    peers = [RawPeer(), RawPeer()]
    for p in peers:
        p.sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    addresses = {0: ("127.0.0.1", 0), 1: peers[0].address, 2: peers[1].address}
    ep = Endpoint(rank=0, job_id=1, token=TOKEN, addresses=addresses, transport=transport, pacing=pacing)
    try:
        sends = []
        for dst in (1, 2):
            spec = MessageSpec(MessageKey(1, 0, dst, 0), MessageKind.PULL, 256 * 48, 256)
            sends.append((spec, np.ones(spec.num_elems, np.float32), dst, 3, None))
        t0 = time.monotonic()
        outs = ep.send_start_many(sends)
        took = time.monotonic() - t0
        assert [o.dst for o in outs] == [1, 2] and all(o.passed for o in outs)
        one_pass = 48 * seg / 400e3  # 0.13 s
        assert 0.7 * one_pass < took < 1.6 * one_pass, took
        assert ep.pacer(1) is not ep.pacer(2)
        data = [[t for t, h in _arrivals(p.sock) if h.type == PacketType.DATA] for p in peers]
        assert [len(d) for d in data] == [48, 48]
        assert min(data[1]) < min(data[0]) + 0.25 * one_pass < max(data[0]), "the passes did not interleave"
    finally:
        ep.close()
        for p in peers:
            p.close()


def test_loss_reported_by_one_rank_slows_only_the_sends_to_it() -> None:
    """A BITMAP from rank 1 naming most of a pass missing halves the pacing toward rank 1, not toward rank 2."""
    transport = TransportConfig(port=0, payload_bytes=1024)
    pacing = PacingConfig(max_rate=50e6, min_rate=1e6, decrease_above=0.05)
    peers = [RawPeer(), RawPeer()]
    addresses = {0: ("127.0.0.1", 0), 1: peers[0].address, 2: peers[1].address}
    ep = Endpoint(rank=0, job_id=1, token=TOKEN, addresses=addresses, transport=transport, pacing=pacing)
    try:
        spec = MessageSpec(MessageKey(1, 0, 1, 0), MessageKind.PULL, 256 * 16, 256)
        ep.send_start(spec, np.ones(spec.num_elems, np.float32), 1, priority=3)
        probe_id = max(h.seq for h, _ in peers[0].receive() if h.type == PacketType.PROBE)
        bitmap = Header(PacketType.BITMAP, Flag.FINAL, job_id=1, src=0, token=TOKEN, msg_id=1, seq=probe_id,
                        pkt_count=16, length=2)  # fmt: skip
        # Packets 0 and 15 arrived: 1-14 are lost (a tail after the last one received would not count as loss).
        peers[0].sock.sendto(bitmap.pack() + b"\x01\x80", ep.address)
        deadline = time.monotonic() + 5.0
        while ep.pacer(1).rate == 50e6 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ep.pacer(1).rate == 25e6 and ep.pacer_decreases == 1
        assert ep.pacer(2).rate == 50e6
    finally:
        ep.close()
        for p in peers:
            p.close()


def test_a_send_nobody_waits_on_is_served_by_the_receive_thread() -> None:
    """A collective with deferred acknowledgements returns while its last send may still need probes and
    retransmission rounds, and its thread may then block elsewhere (DDP's bucket rebuild over gloo): the
    receive thread probes and retransmits for it, so the receiver completes well within its timeout."""
    transport = TransportConfig(port=0, payload_bytes=1024, peer_timeout_s=3.0)
    # Paced in small calls: a BITMAP's retransmissions beyond one call are owed to a waiting thread.
    pacing = PacingConfig(max_rate=50e6, min_rate=1e6, burst=4_000, max_call=4_000)
    eps = local_endpoints(2, token=TOKEN, transport=transport, pacing=pacing, loss=LossSpec(rate=0.3, seed=5))
    try:
        spec = _spec(1, 200 * 256)  # all-gather: bound 0, every lost packet is retransmitted
        values = np.arange(spec.num_elems, dtype=np.float32)
        got = np.zeros_like(values)
        handle = eps[1].post_recv(spec, got)
        out = eps[0].send_start(spec, values, 1, priority=3)  # and then nobody on rank 0 waits
        t0 = time.monotonic()
        eps[1].wait(handle)
        assert time.monotonic() - t0 < 1.5, "served at the retransmission timeouts, not at the peer timeout"
        np.testing.assert_array_equal(got, values)
        assert eps[0].send_stats.retransmitted > 0
        eps[0].send_wait(out)
    finally:
        _close(eps)


def test_a_send_whose_receiver_vanished_fails_at_its_next_wait() -> None:
    transport = TransportConfig(port=0, payload_bytes=1024, peer_timeout_s=0.5)
    eps = local_endpoints(2, token=TOKEN, transport=transport)
    try:
        eps[1].close()
        spec = _spec(2, 64 * 256)
        out = eps[0].send_start(spec, np.ones(spec.num_elems, np.float32), 1, priority=3)
        time.sleep(1.0)  # nobody waits: the receive thread probes, then gives the send up
        assert out.failed is not None
        with pytest.raises(PeerTimeoutError, match="rank 1"):
            eps[0].send_wait(out)
    finally:
        _close(eps)
