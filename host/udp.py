"""UDP sockets for the DLCP data path: GSO sends, GRO + recvmmsg receives.

* **Send.** One ``sendmsg`` carries up to 64 KiB of equal-size DLCP packets; the
  kernel cuts it into datagrams (``UDP_SEGMENT``). The IP TOS byte (DSCP/ECN of
  the batch's priority and drop class) rides along as an ``IP_TOS`` cmsg.
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

import numpy as np

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
_CONTROL_BYTES = 64
_libc: ctypes.CDLL | None = None


def _recvmmsg() -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.recvmmsg.argtypes = [ctypes.c_int, ctypes.POINTER(_MMsgHdr), ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
        _libc.recvmmsg.restype = ctypes.c_int
    return _libc.recvmmsg


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


def send_batch(
    sock: socket.socket, data: memoryview, seg_size: int, addr: tuple[str, int], tos: int, gso: bool = True
) -> None:
    """Send ``data`` (packets of ``seg_size`` back to back, the last may be short) to ``addr``."""
    anc = [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", tos))]
    if len(data) <= seg_size:
        _sendmsg(sock, [data], anc, addr)
        return
    if gso:
        step = min(MAX_GSO_BYTES // seg_size, MAX_GSO_SEGMENTS) * seg_size
        seg = [(SOL_UDP, UDP_SEGMENT, struct.pack("H", seg_size))]
        for start in range(0, len(data), step):
            chunk = data[start : start + step]
            _sendmsg(sock, [chunk], anc + seg if len(chunk) > seg_size else anc, addr)
    else:
        for start in range(0, len(data), seg_size):
            _sendmsg(sock, [data[start : start + seg_size]], anc, addr)


def _sendmsg(
    sock: socket.socket, iov: list[memoryview], anc: list[tuple[int, int, bytes]], addr: tuple[str, int]
) -> None:
    try:
        sock.sendmsg(iov, anc, 0, addr)
    except ConnectionRefusedError:
        # A pending ICMP port-unreachable from an earlier send: the datagram is lost like
        # any other, and the peer-timeout logic decides whether the peer is gone.
        log.debug("send to %s:%d refused", *addr)


def send_gather(
    sock: socket.socket,
    headers: np.ndarray,
    payload: memoryview,
    offsets: np.ndarray,
    lengths: np.ndarray,
    seg_size: int,
    addr: tuple[str, int],
    tos: int,
) -> None:
    """Send packets given as header rows plus payload slices, without copying the payload.

    Packet ``i`` is ``headers[i]`` followed by ``payload[offsets[i] : offsets[i] + lengths[i]]``;
    all but the last must be ``seg_size`` bytes long. Groups of up to 64 KiB go out in
    one ``sendmsg`` each, as an iovec list that the kernel gathers and segments.
    """
    anc = [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", tos))]
    gso = [*anc, (SOL_UDP, UDP_SEGMENT, struct.pack("H", seg_size))]
    per = max(1, min(MAX_GSO_BYTES // seg_size, MAX_GSO_SEGMENTS))
    hdr = memoryview(headers.data).cast("B")
    hsize = headers.shape[1]
    offs = offsets.tolist()
    lens = lengths.tolist()
    n = len(offs)
    for start in range(0, n, per):
        end = min(start + per, n)
        iov: list[memoryview] = []
        for i in range(start, end):
            iov.append(hdr[i * hsize : (i + 1) * hsize])
            iov.append(payload[offs[i] : offs[i] + lens[i]])
        _sendmsg(sock, iov, gso if end - start > 1 else anc, addr)


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
        self._fn = _recvmmsg()

    def receive(self, timeout_s: float) -> Received | None:
        """Wait up to ``timeout_s`` for data, then take everything queued (up to ``slots`` datagrams)."""
        if not self._poll.poll(max(0, int(timeout_s * 1000))):
            return None
        for i in range(self.slots):
            self._msgs[i].msg_hdr.msg_controllen = _CONTROL_BYTES
            self._msgs[i].msg_hdr.msg_flags = 0
        n = self._fn(self.fd, self._msgs, self.slots, MSG_DONTWAIT, None)
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

    def _gso_size(self, i: int, length: int) -> int:
        hdr = self._msgs[i].msg_hdr
        if hdr.msg_controllen >= _CMSG_HDR.size:
            raw = ctypes.string_at(hdr.msg_control, hdr.msg_controllen)
            _, level, ctype = _CMSG_HDR.unpack_from(raw)
            if level == SOL_UDP and ctype == UDP_GRO:
                return int(struct.unpack_from("i", raw, _CMSG_HDR.size)[0])
        return length

    def _runs(self, n: int) -> list[tuple[int, int, int]]:
        runs: list[tuple[int, int, int]] = []
        run_start = -1
        run_bytes = 0
        for i in range(n):
            length = int(self._msgs[i].msg_len)
            if self._msgs[i].msg_hdr.msg_flags & MSG_TRUNC:
                self.truncated += 1
                length = min(length, self.slot_bytes)
            seg = self._gso_size(i, length) if self._msgs[i].msg_hdr.msg_controllen else length
            full = length == self.full_slot and seg == self.seg_size
            start = i * self.slot_bytes
            if full and run_start >= 0 and run_start + run_bytes == start:
                run_bytes += length
                continue
            if run_start >= 0:
                runs.append((run_start, run_bytes, self.seg_size))
                run_start, run_bytes = -1, 0
            if full:
                run_start, run_bytes = start, length
            else:
                runs.append((start, length, seg if seg > 0 else length))
        if run_start >= 0:
            runs.append((run_start, run_bytes, self.seg_size))
        return runs
