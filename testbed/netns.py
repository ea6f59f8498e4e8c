"""Network namespaces and veth pairs through pyroute2, always cleaned up.

Everything is named with the project prefix (``dlcp-…`` namespaces, ``dlcp…``
interfaces); deleting a namespace deletes the veths in it. Used by the software
switch's tests and benchmark, and by ``dlcp switch`` tests that run the switch
as a process inside a namespace. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).

Example::

    with Namespace("sw") as ns:
        ns.add_veth("dlcpS1", "dlcpH1")
        with ns.entered():
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)  # lives in ns
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from pyroute2 import NetNS, netns

log = logging.getLogger(__name__)

PREFIX = "dlcp"
IFNAME_MAX = 15
_counter = itertools.count()


def _check_name(name: str) -> None:
    if not name.startswith(PREFIX) or len(name) > IFNAME_MAX:
        raise ValueError(f"interface name {name!r} must start with {PREFIX!r} and have at most {IFNAME_MAX} characters")


class Namespace:
    """A network namespace ``dlcp-<tag>-<pid>-<n>``: loopback up, IPv6 off (the kernel then sends
    nothing on its interfaces by itself), deleted with everything in it on exit."""

    def __init__(self, tag: str = "ns") -> None:
        if os.geteuid() != 0:
            raise PermissionError("network namespaces need root")
        self.name = f"{PREFIX}-{tag}-{os.getpid()}-{next(_counter)}"
        self._ns: Any = None

    def __enter__(self) -> Namespace:
        self._ns = NetNS(self.name, flags=os.O_CREAT)
        try:
            with self.entered():
                for key in ("all", "default"):
                    Path(f"/proc/sys/net/ipv6/conf/{key}/disable_ipv6").write_text("1")
            self.set_up("lo")
        except BaseException:
            self.close()
            raise
        log.info("created namespace %s", self.name)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._ns is not None:
            self._ns.close()
            self._ns = None
            with contextlib.suppress(OSError):
                netns.remove(self.name)
            log.info("deleted namespace %s", self.name)

    @property
    def ipr(self) -> Any:
        """The pyroute2 handle of the namespace."""
        if self._ns is None:
            raise RuntimeError(f"namespace {self.name} is not open")
        return self._ns

    def index(self, ifname: str) -> int:
        found = self.ipr.link_lookup(ifname=ifname)
        if not found:
            raise OSError(f"no interface {ifname} in namespace {self.name}")
        return int(found[0])

    def set_up(self, ifname: str, mtu: int | None = None) -> None:
        kw: dict[str, Any] = {"state": "up"}
        if mtu is not None:
            kw["mtu"] = mtu
        self.ipr.link("set", index=self.index(ifname), **kw)

    def add_veth(self, a: str, b: str, mtu: int = 9000, peer: Namespace | None = None) -> None:
        """A veth pair ``a`` (here) -- ``b`` (here, or in ``peer``), both up."""
        _check_name(a)
        _check_name(b)
        self.ipr.link("add", ifname=a, kind="veth", peer={"ifname": b})
        if peer is not None:
            self.ipr.link("set", index=self.index(b), net_ns_fd=peer.name)
        self.set_up(a, mtu)
        (peer or self).set_up(b, mtu)

    def link_stats(self, ifname: str) -> dict[str, int]:
        """The interface's kernel counters (rx_packets, tx_packets, rx_bytes, rx_dropped, ...)."""
        msg = self.ipr.link("get", index=self.index(ifname))[0]
        stats = msg.get("IFLA_STATS64") or msg.get("IFLA_STATS") or {}
        return {k: int(v) for k, v in dict(stats).items()}

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Run the body with this thread inside the namespace (sockets opened there stay there)."""
        with inside(self.name):
            yield

    def popen(self, argv: Sequence[str], **kw: Any) -> subprocess.Popen[bytes]:
        """Start a process inside the namespace (see :func:`popen_in`)."""
        return popen_in(self.name, argv, **kw)


def _enter(namespace: str) -> None:
    """Move the calling thread into the named namespace."""
    try:
        netns.setns(namespace, flags=0)
    except FileNotFoundError:
        raise FileNotFoundError(f"no network namespace named {namespace}") from None


@contextlib.contextmanager
def inside(namespace: str) -> Iterator[None]:
    """This thread inside the named namespace for the body; never creates it.

    A network namespace belongs to a thread, so other threads stay where they are.
    The namespace to return to is this thread's own, kept here rather than on
    pyroute2's ``pushns`` stack: that stack is one list for the whole process, and
    two threads using it at once each pop (and close) the other's descriptor.
    """
    back = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _enter(namespace)
        try:
            yield
        finally:
            netns.setns(back)
    finally:
        os.close(back)


def popen_in(namespace: str, argv: Sequence[str], **kw: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` inside the named namespace (which must exist); ``kw`` as for :class:`subprocess.Popen`.

    A short-lived thread enters the namespace and starts the process, which inherits
    it. Nothing of this process runs in the child between fork and exec, so
    :mod:`subprocess` can use ``vfork``: no fork handler runs there. A ``preexec_fn``
    would make it ``fork``, and where this process runs gRPC (a P4Runtime server,
    a controller) gRPC's fork handler restarts its poller threads in the child;
    ``close_fds`` then closes their epoll descriptor before the exec, and a poller
    that reaches ``epoll_wait`` in between aborts the child ("epoll_wait error: Bad
    file descriptor", exit -6) or crashes it (-11). ``preexec_fn`` is refused.
    """
    if "preexec_fn" in kw:
        raise ValueError("popen_in: preexec_fn is not allowed (the child must run nothing before exec)")
    out: list[subprocess.Popen[bytes]] = []
    error: list[BaseException] = []

    def start() -> None:
        try:
            _enter(namespace)  # this thread only; it ends right after
            out.append(subprocess.Popen(list(argv), **kw))
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=start, name=f"dlcp-spawn-{namespace}")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return out[0]


def stale_namespaces() -> list[str]:
    """Namespaces of this module whose creating process is gone (left by a killed run)."""
    out = []
    for name in netns.listnetns():
        parts = name.split("-")
        if len(parts) >= 4 and parts[0] == PREFIX and parts[-2].isdigit():
            if not Path(f"/proc/{parts[-2]}").exists():
                out.append(name)
    return out


def remove_stale() -> list[str]:
    """Delete :func:`stale_namespaces`; returns their names."""
    gone = stale_namespaces()
    for name in gone:
        with contextlib.suppress(OSError):
            netns.remove(name)
    return gone
