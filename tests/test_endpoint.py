"""One endpoint's waits, timeouts and packet marking, on loopback.

These are the transport's promises that a collective's result does not show:
a waiting thread sleeps, a live peer is never declared dead, a silent one is
within the configured bound, and control packets carry the TOS byte the
documentation gives them.
"""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

from dlcp.config import TransportConfig
from dlcp.host.endpoint import Endpoint, free_port
from dlcp.host.errors import PeerTimeoutError
from dlcp.host.local import local_endpoints
from dlcp.host.pacing import PacingConfig
from dlcp.message import MessageKey, MessageSpec
from dlcp.packetizer import build_packets
from dlcp.protocol import MessageKind, PacketType
from dlcp.wire import Header

TOKEN = 7


def _spec(msg_id: int, n: int, src: int = 0, kind: MessageKind = MessageKind.ALL_GATHER) -> MessageSpec:
    return MessageSpec(MessageKey(1, src, msg_id, 0), kind, n, 256)


def _close(eps: list[Endpoint]) -> None:
    for ep in eps:
        ep.close()


@pytest.mark.parametrize("fast_path", [True, False], ids=["c", "numpy"])
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


@pytest.mark.parametrize("fast_path", [True, False], ids=["c", "numpy"])
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
    """Rank 0 as a plain UDP socket: sends what the test says, answers nothing."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))

    @property
    def address(self) -> tuple[str, int]:
        return self.sock.getsockname()

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
        assert timeout <= silent < timeout + 1.0, f"raised {silent:.2f} s after the last data packet"
    finally:
        stop.set()
        if prober.is_alive():
            prober.join()
        ep.close()
        peer.close()
