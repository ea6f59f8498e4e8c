"""A switch's ports as veth pairs in one namespace, with raw sockets on the host ends.

Port ``p`` is the pair ``dlcpS<p>`` (the switch's side) -- ``dlcpH<p>`` (the host side), both in
one :class:`~dlcp.testbed.netns.Namespace`. A test or a benchmark sends frames into the switch on
the host side and reads there what the switch sent out. The software switch's rig
(:mod:`dlcp.testbed.rig`) and the BMv2 runner (:mod:`dlcp.testbed.bmv2`) both use this module, so
the two targets have the same ports and are read the same way.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterable

from dlcp.frames import ETH_HEADER, ETHERTYPE_IPV4
from dlcp.p4.vectors import Frame
from dlcp.testbed.netns import PREFIX, Namespace

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
"""``sll_pkttype`` of a frame this socket's own interface sent (linux/if_packet.h)."""


def switch_if(port: int) -> str:
    return f"{PREFIX}S{port}"


def host_if(port: int) -> str:
    return f"{PREFIX}H{port}"


def add_veths(ns: Namespace, ports: Iterable[int], mtu: int) -> None:
    """One veth pair per port in ``ns``, both ends up."""
    for p in ports:
        ns.add_veth(switch_if(p), host_if(p), mtu=mtu)


def _is_ipv4(frame: bytes) -> bool:
    return len(frame) >= ETH_HEADER.size and ETH_HEADER.unpack_from(frame)[2] == ETHERTYPE_IPV4


class HostSockets:
    """A non-blocking AF_PACKET socket on the host end of every port's veth."""

    def __init__(self, ns: Namespace, ports: Iterable[int], rcvbuf: int = 8 << 20) -> None:
        self.socks: dict[int, socket.socket] = {}
        try:
            with ns.entered():
                for p in ports:
                    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
                    self.socks[p] = s
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
                    s.bind((host_if(p), 0))
                    s.setblocking(False)
        except BaseException:
            self.close()
            raise

    def send(self, port: int, frame: bytes) -> None:
        self.socks[port].send(frame)

    def receive(self, timeout: float, until: int | None = None) -> list[Frame]:
        """IPv4 frames that came out of the switch within ``timeout`` s (returns once ``until`` came).

        Only IPv4: the kernel may still send something of its own on a veth (nothing with IPv6 off).
        """
        out: list[Frame] = []
        deadline = time.monotonic() + timeout
        by_fd = {s.fileno(): (p, s) for p, s in self.socks.items()}
        while until is None or len(out) < until:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select(list(by_fd), [], [], left)
            for fd in ready:
                port, s = by_fd[fd]
                while True:
                    try:
                        data, addr = s.recvfrom(65536)
                    except BlockingIOError:
                        break
                    if addr[2] != PACKET_OUTGOING and _is_ipv4(data):
                        out.append(Frame(port, data))
        return out

    def close(self) -> None:
        for s in self.socks.values():
            s.close()
        self.socks = {}
