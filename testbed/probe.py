"""Reachability through a fabric: ICMP echo (a raw socket, no ``ping`` binary needed) and UDP datagrams.

Sockets are opened inside the hosts' namespaces from this process (a socket
stays in the namespace it was created in), so a probe needs no extra process.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from dlcp.testbed.netns import inside

ICMP_ECHO_REQUEST = 8
ICMP_ECHO_REPLY = 0


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


@dataclass(frozen=True)
class PingResult:
    sent: int
    received: int
    rtts_s: tuple[float, ...]

    @property
    def ok(self) -> bool:
        return self.received == self.sent


def ping(namespace: str, dst: str, count: int = 3, size: int = 56, timeout_s: float = 2.0) -> PingResult:
    """``count`` ICMP echo requests from ``namespace`` to ``dst``, one at a time."""
    with inside(namespace):
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    rtts = []
    try:
        for seq in range(count):
            payload = struct.pack("!d", time.monotonic()) + bytes(max(0, size - 8))
            header = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, 0, ident, seq)
            packet = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, _checksum(header + payload), ident, seq) + payload
            start = time.monotonic()
            sock.sendto(packet, (dst, 0))
            deadline = start + timeout_s
            while (left := deadline - time.monotonic()) > 0:
                ready, _, _ = select.select([sock], [], [], left)
                if not ready:
                    break
                data, addr = sock.recvfrom(65535)
                ihl = (data[0] & 0x0F) * 4
                kind, _, _, rid, rseq = struct.unpack_from("!BBHHH", data, ihl)
                if kind == ICMP_ECHO_REPLY and rid == ident and rseq == seq and addr[0] == dst:
                    rtts.append(time.monotonic() - start)
                    break
    finally:
        sock.close()
    return PingResult(count, len(rtts), tuple(rtts))


def _paced_exchange(
    src_ns: str, dst_ns: str, dst_ip: str, port: int, datagrams: list[bytes], identify: Callable[[bytes], int | None]
) -> int:
    """Send ``datagrams`` from ``src_ns`` to ``dst_ip:port`` in ``dst_ns``, paced (a shaped link must not drop
    them); returns how many distinct ids ``identify`` finds (None: not intact) in what arrives within 2 s."""
    with inside(dst_ns):
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        rx.bind((dst_ip, port))
    with inside(src_ns):
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    got: set[int] = set()
    try:
        for i, datagram in enumerate(datagrams):
            tx.sendto(datagram, (dst_ip, port))
            if i % 10 == 9:
                time.sleep(0.001)
        deadline = time.monotonic() + 2.0
        while len(got) < len(datagrams) and (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([rx], [], [], left)
            if not ready:
                break
            ident = identify(rx.recv(65535))
            if ident is not None:
                got.add(ident)
    finally:
        rx.close()
        tx.close()
    return len(got)


def udp(src_ns: str, dst_ns: str, dst_ip: str, count: int = 100, size: int = 1000, port: int = 9000) -> int:
    """Send ``count`` datagrams of ``size`` bytes from ``src_ns`` to ``dst_ip:port`` in ``dst_ns``; returns
    how many arrived intact (paced, so that a shaped link does not drop them)."""

    def intact(data: bytes) -> int | None:
        (i,) = struct.unpack_from("!I", data)
        return i if len(data) == size and data[4:] == bytes([i & 0xFF]) * (size - 4) else None

    sent = [struct.pack("!I", i) + bytes([i & 0xFF]) * (size - 4) for i in range(count)]
    return _paced_exchange(src_ns, dst_ns, dst_ip, port, sent, intact)


def dlcp_data(src_ns: str, dst_ns: str, dst_ip: str, count: int = 256, payload: int = 1000, port: int = 0) -> int:
    """``count`` DLCP data packets (sequence numbers 0..count-1 of one message) from ``src_ns`` to ``dst_ip``,
    on the DLCP port (the switches spray them per packet); returns how many arrived."""
    from dlcp.protocol import UDP_PORT, PacketType
    from dlcp.wire import Header

    def seq(data: bytes) -> int | None:
        return Header.unpack(data).seq

    sent = [
        Header(type=PacketType.DATA, job_id=1, seq=i, pkt_count=count, length=payload, priority=1).pack()
        + bytes(payload)
        for i in range(count)
    ]
    return _paced_exchange(src_ns, dst_ns, dst_ip, port or UDP_PORT, sent, seq)
