"""A private network namespace with veth pairs, for running a software switch without touching real interfaces.

Everything is created with the ``dlcp`` prefix inside a namespace this module
creates, and deleted on exit (deleting the namespace deletes its veths).
Needs root (CAP_NET_ADMIN) and iproute2.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

PREFIX = "dlcp"
_CLONE_NEWNET = 0x40000000
_ETH_P_ALL = 0x0003


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class Namespace:
    """``dlcp-<tag>`` with one veth pair per switch port: ``dlcpS<port>`` (switch side), ``dlcpH<port>`` (host side)."""

    def __init__(self, ports: list[int], tag: str | None = None) -> None:
        if os.geteuid() != 0:
            raise PermissionError("network namespaces need root")
        if any(not 0 <= p < 10000 for p in ports):
            raise ValueError(f"port numbers must be 0..9999, got {ports}")
        self.name = f"{PREFIX}-{tag or os.getpid()}"
        self.ports = sorted(set(ports))
        self._created = False

    @staticmethod
    def switch_if(port: int) -> str:
        return f"{PREFIX}S{port}"

    @staticmethod
    def host_if(port: int) -> str:
        return f"{PREFIX}H{port}"

    def __enter__(self) -> Namespace:
        _ip("netns", "add", self.name)
        self._created = True
        try:
            # No IPv6 and no addresses: the kernel then sends nothing on the veths by itself.
            for key in ("all", "default"):
                self.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{key}.disable_ipv6=1"])
            # Loopback carries the switch's control channel (thrift / gRPC on 127.0.0.1).
            self.run(["ip", "link", "set", "lo", "up"])
            for p in self.ports:
                self.run(["ip", "link", "add", self.switch_if(p), "type", "veth", "peer", "name", self.host_if(p)])
                for ifname in (self.switch_if(p), self.host_if(p)):
                    self.run(["ip", "link", "set", ifname, "mtu", "9000", "up"])
        except BaseException:
            self.close()
            raise
        log.info("created namespace %s with ports %s", self.name, self.ports)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._created:
            subprocess.run(["ip", "netns", "delete", self.name], check=False, capture_output=True)
            self._created = False
            log.info("deleted namespace %s", self.name)

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` prefixed to run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(argv), check=True, capture_output=True, text=True)

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Run the body with this thread inside the namespace (sockets created there stay there)."""
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        with open("/proc/self/ns/net") as own, open(Path("/var/run/netns") / self.name) as target:
            if libc.setns(target.fileno(), _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {self.name} failed")
            try:
                yield
            finally:
                if libc.setns(own.fileno(), _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back to the original namespace failed")

    def host_sockets(self) -> dict[int, socket.socket]:
        """One non-blocking raw socket per port, bound to the host side of its veth."""
        socks: dict[int, socket.socket] = {}
        with self.entered():
            for p in self.ports:
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_ALL))
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                s.bind((self.host_if(p), 0))
                s.setblocking(False)
                socks[p] = s
        return socks
