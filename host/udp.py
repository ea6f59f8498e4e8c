"""UDP sockets for the DLCP data path: GSO sends, GRO + recvmmsg receives.

* **Send.** :class:`MmsgSender` hands the kernel a whole batch in one
  ``sendmmsg``: messages of up to 64 KiB of equal-size DLCP packets, each cut
  into datagrams by the kernel (``UDP_SEGMENT``), gathered from header rows and
  slices of the tensor (no user-space copy). The IP TOS byte (DSCP/ECN of the
  batch's priority and drop class) rides along as an ``IP_TOS`` cmsg.
* **Receive.** ``recvmmsg`` (through ctypes; Python's socket module has none)
  fills many GRO buffers in one call into a single contiguous numpy array.
  Slots are exactly ``segments_per_slot * seg_size`` bytes, so a run of full
  slots is one long array of equal-size segments that the assembler ingests
  in a single call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import select
import socket
import struct
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from dlcp.packetizer import HeaderTemplate

log = logging.getLogger(__name__)

SOL_UDP = 17
UDP_SEGMENT = 103
UDP_GRO = 104
MSG_DONTWAIT = 0x40
MSG_TRUNC = 0x20
MAX_GSO_BYTES = 65000
MAX_GSO_SEGMENTS = 64


class _IOVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):
    _fields_ = [
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),
        ("msg_iov", ctypes.POINTER(_IOVec)),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    ]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _MsgHdr), ("msg_len", ctypes.c_uint)]


_CMSG_HDR = struct.Struct("@NiI")  # cmsg_len (size_t), cmsg_level, cmsg_type
# The same structures as numpy dtypes (x86-64 / aarch64 LP64 layout), to fill and read them in bulk.
MMSG_DTYPE = np.dtype(
    {
        "names": ["name", "namelen", "iov", "iovlen", "control", "controllen", "flags", "len"],
        "formats": ["<u8", "<u4", "<u8", "<u8", "<u8", "<u8", "<i4", "<u4"],
        "offsets": [0, 8, 16, 24, 32, 40, 48, 56],
        "itemsize": 64,
    }
)
IOV_DTYPE = np.dtype([("base", "<u8"), ("len", "<u8")])
_CONTROL_BYTES = 64
_libc: ctypes.CDLL | None = None


def _libc_fn(name: str) -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.recvmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
        _libc.recvmmsg.restype = ctypes.c_int
        _libc.sendmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
        _libc.sendmmsg.restype = ctypes.c_int
    return getattr(_libc, name)


def _cmsg(level: int, ctype: int, data: bytes) -> bytes:
    """One control message, padded to CMSG_SPACE (8-byte alignment on LP64)."""
    raw = _CMSG_HDR.pack(_CMSG_HDR.size + len(data), level, ctype) + data
    return raw + bytes(-len(raw) % 8)


class PacketSender(Protocol):
    """Sends packets of one message: :class:`MmsgSender` here, ``FastSender`` in C (``dlcp.host.fastpath``)."""

    def send_packets(
        self,
        fd: int,
        template: HeaderTemplate,
        values: np.ndarray,
        seqs: np.ndarray,
        addr: tuple[str, int],
        *,
        priority: int,
        drop_class: int,
        tos: int,
        retransmit: bool = False,
        last: bool = False,
    ) -> int: ...


class MmsgSender:
    """Sends batches of (header, payload-slice) packets with one ``sendmmsg`` per batch, GSO on.

    The iovec and mmsghdr arrays are filled with numpy, so the Python cost of a
    1 MB batch is a few vector operations; the kernel gathers the payload from
    the tensor itself (no user-space copy), and ctypes releases the GIL for the call.
    """

    def __init__(self, seg_size: int, max_packets: int) -> None:
        self.seg_size = seg_size
        self.per = max(1, min(MAX_GSO_BYTES // seg_size, MAX_GSO_SEGMENTS))
        self.max_packets = max_packets
        self.iov = np.zeros(2 * max_packets, dtype=IOV_DTYPE)
        self.mmsg = np.zeros(-(-max_packets // self.per), dtype=MMSG_DTYPE)
        self.addr_buf = np.zeros(16, dtype=np.uint8)
        self.ctrl = np.zeros(48, dtype=np.uint8)
        self._fn = _libc_fn("sendmmsg")
        self.refused = 0
        self._tos = -1
        self._addr: tuple[str, int] | None = None

    def _set_route(self, addr: tuple[str, int], tos: int) -> None:
        if addr != self._addr:
            packed = struct.pack("<H", socket.AF_INET) + struct.pack("!H", addr[1]) + socket.inet_aton(addr[0])
            self.addr_buf[:] = np.frombuffer(packed + bytes(8), dtype=np.uint8)
            self._addr = addr
        if tos != self._tos:
            ctrl = _cmsg(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", tos))
            ctrl += _cmsg(SOL_UDP, UDP_SEGMENT, struct.pack("H", self.seg_size))
            self.ctrl[:] = np.frombuffer(ctrl, dtype=np.uint8)
            self._tos = tos

    def send(
        self,
        fd: int,
        headers: np.ndarray,
        payload_addr: int,
        offsets: np.ndarray,
        lengths: np.ndarray,
        addr: tuple[str, int],
        tos: int,
    ) -> int:
        """Send ``len(offsets)`` packets (all ``seg_size`` long but possibly the last); returns datagrams sent."""
        k = len(offsets)
        if k > self.max_packets:
            raise ValueError(f"batch of {k} packets exceeds {self.max_packets}")
        if k == 0:
            return 0
        self._set_route(addr, tos)
        hsize = headers.shape[1]
        iov = self.iov[: 2 * k]
        iov["base"][0::2] = headers.ctypes.data + np.arange(k, dtype=np.uint64) * hsize
        iov["len"][0::2] = hsize
        iov["base"][1::2] = payload_addr + offsets.astype(np.uint64)
        iov["len"][1::2] = lengths
        nmsg = -(-k // self.per)
        mm = self.mmsg[:nmsg]
        first = np.arange(nmsg, dtype=np.uint64) * self.per
        counts = np.minimum(self.per, k - first.astype(np.int64))
        mm["name"] = self.addr_buf.ctypes.data
        mm["namelen"] = 16
        mm["iov"] = self.iov.ctypes.data + first * 2 * IOV_DTYPE.itemsize
        mm["iovlen"] = 2 * counts
        mm["control"] = self.ctrl.ctypes.data
        # A single packet goes without UDP_SEGMENT (only the IP_TOS cmsg).
        mm["controllen"] = np.where(counts > 1, 48, 24)
        mm["flags"] = 0
        sent = 0
        base = mm.ctypes.data
        while sent < nmsg:
            r = self._fn(fd, base + sent * MMSG_DTYPE.itemsize, nmsg - sent, 0)
            if r < 0:
                err = ctypes.get_errno()
                if err == errno.EINTR:
                    continue
                if err in (errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS):
                    select.select([], [fd], [], 0.01)
                    continue
                if err == errno.ECONNREFUSED:  # a peer's ICMP port-unreachable: that datagram is lost
                    self.refused += 1
                    sent += 1
                    continue
                raise OSError(err, f"sendmmsg: {errno.errorcode.get(err, err)}")
            sent += r
        return k

    def send_packets(
        self,
        fd: int,
        template: HeaderTemplate,
        values: np.ndarray,
        seqs: np.ndarray,
        addr: tuple[str, int],
        *,
        priority: int,
        drop_class: int,
        tos: int,
        retransmit: bool = False,
        last: bool = False,
    ) -> int:
        """Send packets ``seqs`` (sorted) of ``template.spec`` read from ``values`` (:class:`PacketSender`)."""
        spec = template.spec
        headers = template.build(seqs, priority=priority, drop_class=drop_class, retransmit=retransmit, last=last)
        lengths = np.where(seqs == spec.pkt_count - 1, spec.last_packet_bytes, spec.packet_bytes)
        return self.send(fd, headers, values.ctypes.data, seqs * spec.packet_bytes, lengths, addr, tos)


def set_buffers(sock: socket.socket, rcvbuf: int, sndbuf: int) -> tuple[int, int]:
    """Ask for large socket buffers (FORCE variants when privileged); returns what the kernel granted."""
    for force, plain, size in (
        (getattr(socket, "SO_RCVBUFFORCE", 33), socket.SO_RCVBUF, rcvbuf),
        (getattr(socket, "SO_SNDBUFFORCE", 32), socket.SO_SNDBUF, sndbuf),
    ):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, plain, size)
    got = (sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF), sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
    if got[0] < rcvbuf:
        log.warning(
            "receive buffer is %d bytes, asked for %d: expect drops under bursts (run as root?)", got[0], rcvbuf
        )
    return got


def open_socket(
    host: str, port: int, rcvbuf: int = 64 << 20, sndbuf: int = 16 << 20, gro: bool = True
) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
    sock.bind((host, port))
    set_buffers(sock, rcvbuf, sndbuf)
    if gro:
        try:
            sock.setsockopt(SOL_UDP, UDP_GRO, 1)
        except OSError:
            log.info("UDP_GRO not available; receiving datagram by datagram")
    return sock


@dataclass
class Received:
    """One receive call's worth: ``runs`` of (start, nbytes, seg_size) inside ``buf``."""

    buf: np.ndarray
    runs: list[tuple[int, int, int]]
    datagrams: int


class RecvRing:
    """recvmmsg into one contiguous buffer of ``slots`` slots of ``slot_bytes`` each."""

    def __init__(self, sock: socket.socket, seg_size: int, slots: int = 32) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.seg_size = seg_size
        per = max(1, min(MAX_GSO_BYTES // seg_size, MAX_GSO_SEGMENTS))
        # A slot holds exactly one full GSO send of this segment size, so a run of
        # full slots is one contiguous array of segments. Anything larger (a GRO
        # buffer of some other flow) is truncated by the kernel and counted.
        self.slot_bytes = per * seg_size
        self.full_slot = self.slot_bytes
        self.truncated = 0
        self.calls = 0
        self.datagrams = 0
        self.slots = slots
        self.buf = np.zeros(slots * self.slot_bytes, dtype=np.uint8)
        self._iov = (_IOVec * slots)()
        self._msgs = (_MMsgHdr * slots)()
        self._ctrl = ctypes.create_string_buffer(_CONTROL_BYTES * slots)
        base = self.buf.ctypes.data
        ctrl_base = ctypes.addressof(self._ctrl)
        for i in range(slots):
            self._iov[i].iov_base = base + i * self.slot_bytes
            self._iov[i].iov_len = self.slot_bytes
            hdr = self._msgs[i].msg_hdr
            hdr.msg_iov = ctypes.pointer(self._iov[i])
            hdr.msg_iovlen = 1
            hdr.msg_control = ctrl_base + i * _CONTROL_BYTES
        self._poll = select.poll()
        self._poll.register(self.fd, select.POLLIN)
        self._fn = _libc_fn("recvmmsg")
        self._mm = np.frombuffer(memoryview(self._msgs).cast("B"), dtype=MMSG_DTYPE)
        self._ctrl_np = np.frombuffer(memoryview(self._ctrl).cast("B"), dtype=np.uint8).reshape(slots, _CONTROL_BYTES)

    def receive(self, timeout_s: float) -> Received | None:
        """Wait up to ``timeout_s`` for data, then take everything queued (up to ``slots`` datagrams)."""
        if not self._poll.poll(max(0, int(timeout_s * 1000))):
            return None
        self._mm["controllen"] = _CONTROL_BYTES
        self._mm["flags"] = 0
        n = self._fn(self.fd, ctypes.addressof(self._msgs), self.slots, MSG_DONTWAIT, None)
        if n < 0:
            err = ctypes.get_errno()
            if err in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR, errno.ECONNREFUSED):
                # ECONNREFUSED: an ICMP port-unreachable from a peer that went away; the
                # transport's timers notice the silent peer.
                return None
            raise OSError(err, f"recvmmsg: {errno.errorcode.get(err, err)}")
        self.calls += 1
        self.datagrams += n
        return Received(self.buf, self._runs(n), n)

    def _runs(self, n: int) -> list[tuple[int, int, int]]:
        """Group the ``n`` received slots: runs of full GSO slots become one contiguous run."""
        mm = self._mm[:n]
        lengths = mm["len"].astype(np.int64)
        trunc = (mm["flags"] & MSG_TRUNC) != 0
        if trunc.any():
            self.truncated += int(trunc.sum())
            lengths = np.minimum(lengths, self.slot_bytes)
        ctrl = self._ctrl_np[:n]
        words = ctrl[:, : _CMSG_HDR.size + 4].copy().view(np.int32)  # cmsg_len(8) level type gso
        has_gro = (mm["controllen"] >= _CMSG_HDR.size + 4) & (words[:, 2] == SOL_UDP) & (words[:, 3] == UDP_GRO)
        seg = np.where(has_gro, words[:, 4], lengths)
        seg = np.where(seg > 0, seg, lengths)
        full = (lengths == self.full_slot) & (seg == self.seg_size)
        runs: list[tuple[int, int, int]] = []
        if full.all():
            return [(0, n * self.slot_bytes, self.seg_size)]
        i = 0
        while i < n:
            if full[i]:
                j = i
                while j + 1 < n and full[j + 1]:
                    j += 1
                runs.append((i * self.slot_bytes, (j - i + 1) * self.slot_bytes, self.seg_size))
                i = j + 1
            else:
                runs.append((i * self.slot_bytes, int(lengths[i]), int(seg[i])))
                i += 1
        return runs
