"""Control packets on the wire: PROBE, STOP and BITMAP, through the C path and the numpy path alike.

The C path (host/_fastpath.c ``control``) answers a PROBE of a completed message
with a STOP itself, reports a PROBE of an expected message and a STOP of a
started send to Python without the assembler's decoding, and leaves everything
else (BITMAPs, anything malformed) to the assembler. The replies a peer sees
must be the same either way; the C path's counters say that C did the work.
"""

from __future__ import annotations

import dataclasses
import socket
import time

import numpy as np
import pytest
from test_endpoint import C_PATH, CONTROL_TOS, NUMPY_PATH, TOKEN, RawPeer, _spec

from dlcp.config import TransportConfig
from dlcp.drops import DropReason
from dlcp.host.endpoint import Endpoint
from dlcp.message import MessageKey, MessageSpec
from dlcp.packetizer import build_packets
from dlcp.protocol import HEADER_SIZE, Flag, MessageKind, PacketType
from dlcp.wire import Header


def _endpoint(peer: RawPeer, fast_path: bool) -> Endpoint:
    transport = TransportConfig(port=0, payload_bytes=1024, fast_path=fast_path, peer_timeout_s=5.0)
    # The test answers each probe by hand: no retransmission timeout may send another meanwhile (the receive
    # thread probes a send nobody waits on), or the answer would be to an older probe, and ignored.
    return Endpoint(
        rank=1, job_id=1, token=TOKEN, addresses={0: peer.address, 1: ("127.0.0.1", 0)}, transport=transport,
        initial_rto_s=2.0, max_rto_s=2.0,
    )  # fmt: skip


def _probe(msg_id: int, seq: int, pkt_count: int = 8) -> bytes:
    """A probe as rank 0's sender sends it for a message of ``_spec`` (kind and dtype included)."""
    return Header(
        PacketType.PROBE, job_id=1, src=0, token=TOKEN, msg_id=msg_id, kind=MessageKind.ALL_GATHER,
        pkt_count=pkt_count, seq=seq,
    ).pack()  # fmt: skip


def _control_seen(ep: Endpoint) -> tuple[int, int]:
    return (ep._fast.control, ep._fast.answered) if ep._fast is not None else (0, 0)


@pytest.mark.parametrize("fast_path", [C_PATH, NUMPY_PATH])
def test_probes_of_a_receive_before_and_after_it_completes(fast_path: bool) -> None:
    """PROBE of an incomplete message: a BITMAP of what arrived; after completion every PROBE, repeated or
    following a lost STOP, gets a STOP echoing its id, FINAL, no payload, in the control class."""
    peer = RawPeer()
    ep = _endpoint(peer, fast_path)
    try:
        spec = _spec(4, 256 * 8, src=0)  # 8 packets of 256 float32, reliable (all-gather)
        values = np.arange(spec.num_elems, dtype=np.float32)
        got = np.zeros_like(values)
        handle = ep.post_recv(spec, got)
        datagrams = build_packets(spec, values, token=TOKEN, priority=3).packets()
        for d in datagrams[:5]:
            peer.sock.sendto(d, ep.address)
        time.sleep(0.1)
        peer.sock.sendto(_probe(4, 1), ep.address)  # the sender says its first pass is over: 3 missing
        replies = peer.receive()
        assert [(h.type, h.seq, h.msg_id) for h, _ in replies] == [(PacketType.BITMAP, 1, 4)]
        bitmap = replies[0][0]
        assert bitmap.flags & Flag.FINAL and bitmap.length == 1 and replies[0][1] == CONTROL_TOS
        if fast_path:
            assert _control_seen(ep) == (1, 0), "C took the probe and told Python, which decided"

        for d in datagrams[5:]:
            peer.sock.sendto(d, ep.address)
        ep.wait(handle)
        np.testing.assert_array_equal(got, values)
        stop = peer.receive()
        assert [(h.type, h.msg_id, h.length) for h, _ in stop] == [(PacketType.STOP, 4, 0)]

        # That STOP is lost (the peer acts as if): it probes again, then once more (a duplicate).
        for _ in range(3):
            peer.sock.sendto(_probe(4, 2), ep.address)
        answers = peer.receive()
        assert len(answers) == 3
        for h, tos in answers:
            assert (h.type, h.seq, h.msg_id, h.src, h.job_id, h.token) == (PacketType.STOP, 2, 4, 0, 1, TOKEN)
            assert h.flags == Flag.FINAL and h.length == 0 and h.offset == 0 and tos == CONTROL_TOS
            assert h.priority == ep.control_class and h.drop_class == 0
        if fast_path:
            assert _control_seen(ep) == (4, 3), "C answered the three probes itself"

        # A PROBE's offset is ignored (docs/protocol.md §3): one with offset 7 is answered like the others
        # (C leaves it to Python, which answers the same).
        odd = dataclasses.replace(Header.unpack(np.frombuffer(_probe(4, 3), dtype=np.uint8)), offset=7)
        peer.sock.sendto(odd.pack(), ep.address)
        assert [(h.type, h.seq, h.offset) for h, _ in peer.receive()] == [(PacketType.STOP, 3, 0)]
    finally:
        ep.close()
        peer.close()


@pytest.mark.parametrize("fast_path", [C_PATH, NUMPY_PATH])
def test_a_message_received_whole_is_stopped_once_the_same_from_c_and_python(fast_path: bool) -> None:
    """Every packet arrives, no probe: exactly one STOP, field for field the same on both paths (on the C path
    C sent it, completing the message whole); the STOP lost, a probe and its duplicate get a STOP each."""
    peer = RawPeer()
    ep = _endpoint(peer, fast_path)
    try:
        spec = _spec(6, 256 * 8, src=0)
        values = np.arange(spec.num_elems, dtype=np.float32)
        got = np.zeros_like(values)
        handle = ep.post_recv(spec, got)
        time.sleep(0.1)  # the receive thread has the message in its table before the data comes
        for d in build_packets(spec, values, token=TOKEN, priority=3).packets():
            peer.sock.sendto(d, ep.address)
        ep.wait(handle)
        np.testing.assert_array_equal(got, values)
        stop = Header(
            PacketType.STOP, Flag.FINAL, priority=ep.control_class, job_id=1, src=0, token=TOKEN, msg_id=6,
            kind=MessageKind.ALL_GATHER, pkt_count=8,
        )  # fmt: skip
        assert peer.receive() == [(stop, CONTROL_TOS)]
        if fast_path:
            assert ep._fast is not None and ep._fast.whole_stops == 1, "C sent it"
        seen = _control_seen(ep)
        for _ in range(2):
            peer.sock.sendto(_probe(6, 4), ep.address)
        answers = peer.receive()
        # (a probe's answer need not carry the packet count: Python's says 1, C's echoes the probe's)
        assert [(dataclasses.replace(h, pkt_count=8), tos) for h, tos in answers] == [
            (dataclasses.replace(stop, seq=4), CONTROL_TOS)
        ] * 2
        if fast_path:
            assert _control_seen(ep) == (seen[0] + 2, seen[1] + 2), "both answered in C, from its ring"
    finally:
        ep.close()
        peer.close()


@pytest.mark.timing
@pytest.mark.parametrize("fast_path", [C_PATH, NUMPY_PATH])
def test_a_send_ends_on_stop_and_retransmits_on_bitmap(fast_path: bool) -> None:
    """BITMAP (Python decides): the missing packets go again; STOP: send_wait returns, the loss is booked."""
    peer = RawPeer()
    ep = _endpoint(peer, fast_path)
    try:
        spec = MessageSpec(MessageKey(1, 1, 7, 0), MessageKind.ALL_GATHER, 256 * 8, 256)
        out = ep.send_start(spec, np.ones(spec.num_elems, np.float32), 0, priority=3)
        first = peer.receive()
        assert sorted(h.seq for h, _ in first if h.type == PacketType.DATA) == list(range(8))
        probe_id = max(h.seq for h, _ in first if h.type == PacketType.PROBE)
        # Packets 2 and 5 missing.
        bits = np.ones(8, dtype=bool)
        bits[[2, 5]] = False
        payload = np.packbits(bits, bitorder="little").tobytes()
        bitmap = Header(PacketType.BITMAP, Flag.FINAL, job_id=1, src=1, token=TOKEN, msg_id=7, seq=probe_id,
                        kind=MessageKind.ALL_GATHER, pkt_count=8, length=1)  # fmt: skip
        peer.sock.sendto(bitmap.pack() + payload, ep.address)
        again = peer.receive()
        assert sorted(h.seq for h, _ in again if h.type == PacketType.DATA) == [2, 5]
        probe_id = max(h.seq for h, _ in again if h.type == PacketType.PROBE)
        seen = _control_seen(ep)
        stop = Header(PacketType.STOP, Flag.FINAL, job_id=1, src=1, token=TOKEN, msg_id=7, seq=probe_id,
                      kind=MessageKind.ALL_GATHER, pkt_count=8)  # fmt: skip
        peer.sock.sendto(stop.pack(), ep.address)
        t0 = time.monotonic()
        ep.send_wait(out)
        assert time.monotonic() - t0 < 2.0
        assert out.stopped and ep.send_stats.lost_by_drop_class == {0: [0, 8]}
        if fast_path:
            assert _control_seen(ep) == (seen[0] + 1, seen[1]), "C took the STOP; the BITMAP went to Python"
    finally:
        ep.close()
        peer.close()


@pytest.mark.parametrize("fast_path", [C_PATH, NUMPY_PATH])
def test_malformed_control_packets_are_dropped_and_counted(fast_path: bool) -> None:
    """A probe with a payload length it lacks, a wrong version, a wrong token, an unknown kind: no reply, counted."""
    peer = RawPeer()
    ep = _endpoint(peer, fast_path)
    try:
        spec = _spec(4, 256 * 8, src=0)
        values = np.arange(spec.num_elems, dtype=np.float32)
        handle = ep.post_recv(spec, np.zeros_like(values))
        for d in build_packets(spec, values, token=TOKEN, priority=3).packets():
            peer.sock.sendto(d, ep.address)
        ep.wait(handle)
        assert [h.type for h, _ in peer.receive()] == [PacketType.STOP]
        before = {r: ep.asm.counters[r] for r in DropReason}
        seen = _control_seen(ep)
        good = bytearray(_probe(4, 3))
        truncated = bytearray(good)
        truncated[22:24] = (8).to_bytes(2, "big")  # says 8 payload bytes, carries none
        version = bytearray(good)
        version[0] = (9 << 4) | PacketType.PROBE
        token = bytearray(_probe(4, 3))
        token[8:12] = (TOKEN + 1).to_bytes(4, "big")
        kind = bytearray(good)
        kind[1] = 0xEE
        for bad in (truncated, version, token, kind):
            peer.sock.sendto(bytes(bad), ep.address)
        assert peer.receive() == [], "no reply to a malformed probe"
        deadline = time.monotonic() + 2.0
        while sum(ep.asm.counters[r] for r in DropReason) - sum(before.values()) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        delta = {r: ep.asm.counters[r] - before[r] for r in DropReason if ep.asm.counters[r] != before[r]}
        assert delta == {
            DropReason.TRUNCATED: 1, DropReason.BAD_VERSION: 1, DropReason.BAD_TOKEN: 1, DropReason.BAD_KIND: 1,
        }  # fmt: skip
        assert _control_seen(ep) == seen, "C left every one of them to the assembler"
        # A well-formed probe still gets its STOP (from C on the C path).
        peer.sock.sendto(bytes(good), ep.address)
        assert [(h.type, h.seq) for h, _ in peer.receive()] == [(PacketType.STOP, 3)]
    finally:
        ep.close()
        peer.close()


def test_the_c_table_of_completed_messages_is_a_bounded_ring() -> None:
    """More completed messages than the ring holds: probes of the oldest are answered too (by Python)."""
    pytest.importorskip("dlcp.host._fastpath")
    from dlcp.host.fastpath import DONE_ROWS

    peer = RawPeer()
    ep = _endpoint(peer, True)
    try:
        n = DONE_ROWS + 4
        for m in range(n):
            spec = _spec(100 + m, 256, src=0)
            handle = ep.post_recv(spec, np.zeros(spec.num_elems, np.float32))
            for d in build_packets(spec, np.ones(spec.num_elems, np.float32), token=TOKEN, priority=3).packets():
                peer.sock.sendto(d, ep.address)
            ep.wait(handle)
        assert len([h for h, _ in peer.receive() if h.type == PacketType.STOP]) == n
        seen = _control_seen(ep)
        for m in (0, n - 1):  # the oldest (evicted from the ring) and the newest
            peer.sock.sendto(_probe(100 + m, 9, pkt_count=1), ep.address)
        answers = peer.receive()
        assert sorted((h.type, h.msg_id, h.seq) for h, _ in answers) == [
            (PacketType.STOP, 100, 9), (PacketType.STOP, 100 + n - 1, 9),
        ]  # fmt: skip
        assert _control_seen(ep)[1] == seen[1] + 1, "the newest answered in C, the oldest in Python"
    finally:
        ep.close()
        peer.close()


def test_a_stop_for_no_send_is_ignored() -> None:
    """A STOP naming a message this rank is not sending changes nothing and breaks nothing."""
    peer = RawPeer()
    ep = _endpoint(peer, True)
    try:
        stop = Header(PacketType.STOP, Flag.FINAL, job_id=1, src=1, token=TOKEN, msg_id=77, pkt_count=1)
        peer.sock.sendto(stop.pack(), ep.address)
        peer.sock.sendto(stop.pack()[: HEADER_SIZE - 4], ep.address)  # and a truncated one
        time.sleep(0.2)
        ep._check_rx()
        assert ep.asm.counters[DropReason.TRUNCATED] == 1
        assert peer.receive(0.1) == []
        assert isinstance(ep.sock, socket.socket)
    finally:
        ep.close()
        peer.close()
