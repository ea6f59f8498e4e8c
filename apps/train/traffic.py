"""Bytes a rank put on the wire: TCP (gloo, the rendezvous store) and DLCP, each from its own counters.

TCP: the kernel counts every socket's payload bytes sent (``tcp_info.tcpi_bytes_sent``,
Linux 4.19+, retransmissions included, TCP/IP headers not); :func:`tcp_bytes_sent` sums
them over this process's TCP sockets, so it counts this process only, whatever else
runs on the host. (Loopback's interface counters in ``/proc/net/dev`` are shared by
every process of the network namespace, so they cannot say what one run sent.)

DLCP: the transport counts data packets, not bytes (``Endpoint.send_stats``), and each
receiver counts the payload bytes of the messages it completed (``asm.stats``).
Summed over all ranks of a job, the payload received is exactly the payload sent in
first passes (every message has one sender and one receiver), so a run's DLCP
bytes are that payload, plus a header per data packet sent, plus a full packet per
retransmission (an upper bound: a message's last packet may be shorter). Control
packets (probes, STOPs, BITMAPs: a header each, and a bitmap) are not counted.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dlcp.protocol import HEADER_SIZE

if TYPE_CHECKING:
    from dlcp.host.endpoint import Endpoint

_TCPI_BYTES_SENT = 200
"""Offset of ``tcpi_bytes_sent`` (u64) in ``struct tcp_info`` (linux/tcp.h, since 4.19)."""
_TCP_INFO_LEN = 256


def tcp_bytes_sent() -> int | None:
    """Payload bytes this process's open TCP sockets have sent; None where the kernel does not count them."""
    total = 0
    fds = Path("/proc/self/fd")
    try:
        names = os.listdir(fds)
    except OSError:
        return None
    for name in names:
        fd = int(name)
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            with socket.socket(fileno=os.dup(fd)) as s:  # a duplicate, closed here; the socket stays open
                if s.family not in (socket.AF_INET, socket.AF_INET6) or s.type != socket.SOCK_STREAM:
                    continue
                info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
        except OSError:  # closed meanwhile, or not a socket we may query
            continue
        if len(info) < _TCPI_BYTES_SENT + 8:
            return None
        total += struct.unpack_from("=Q", info, _TCPI_BYTES_SENT)[0]
    return total


@dataclass(frozen=True)
class DLCPCounters:
    """One rank's DLCP counters at one moment (see the module docstring for what they add up to)."""

    payload_received: int = 0
    """Payload bytes of the messages this rank's receiver completed."""
    packets: int = 0
    """Data packets this rank sent in first passes."""
    retransmitted: int = 0
    """Data packets this rank sent again."""
    payload_bytes: int = 0
    """The transport's payload per full packet."""

    @classmethod
    def of(cls, endpoint: Endpoint) -> DLCPCounters:
        return cls(
            payload_received=endpoint.asm.stats.total_bytes,
            packets=endpoint.send_stats.packets,
            retransmitted=endpoint.send_stats.retransmitted,
            payload_bytes=endpoint.cfg.payload_bytes,
        )

    def __sub__(self, before: DLCPCounters) -> DLCPCounters:
        return DLCPCounters(
            self.payload_received - before.payload_received,
            self.packets - before.packets,
            self.retransmitted - before.retransmitted,
            self.payload_bytes,
        )


def dlcp_bytes_sent(ranks: list[DLCPCounters]) -> int:
    """Bytes of DLCP data packets (header and payload) all ``ranks`` of a job sent, from their counters."""
    first_pass = sum(r.payload_received + HEADER_SIZE * r.packets for r in ranks)
    return first_pass + sum((HEADER_SIZE + r.payload_bytes) * r.retransmitted for r in ranks)
