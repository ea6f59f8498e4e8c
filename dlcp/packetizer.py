"""Cutting a tensor into DLCP data packets, a whole batch at a time.

The result is laid out as GSO wants it: equal-size segments (header + full
payload) back to back, with the message's short last packet, if included, at
the end. One numpy copy builds the batch; there is no per-packet Python.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

import numpy as np

from dlcp.message import MessageSpec
from dlcp.protocol import HEADER_FIELDS, HEADER_SIZE, VERSION, DType, Flag, MessageKind, PacketType
from dlcp.wire import Header, headers_to_bytes, pack_headers


@dataclass(frozen=True)
class PacketBatch:
    """``nbytes`` bytes of ``data`` hold ``count`` packets spaced ``seg_size`` apart."""

    data: np.ndarray
    """uint8 array of shape ``(count, seg_size)``."""
    count: int
    seg_size: int
    nbytes: int
    seqs: np.ndarray

    def buffer(self) -> memoryview:
        return memoryview(self.data.reshape(-1).data)[: self.nbytes]

    def packets(self) -> list[bytes]:
        """The packets as separate datagrams (tests and tools)."""
        flat = self.data.reshape(-1)
        out = []
        for i in range(self.count):
            start = i * self.seg_size
            end = min(start + self.seg_size, self.nbytes)
            out.append(flat[start:end].tobytes())
        return out


def build_packets(
    spec: MessageSpec,
    values: np.ndarray,
    *,
    token: int,
    priority: int | np.ndarray,
    drop_classes: np.ndarray | int = 0,
    seqs: np.ndarray | None = None,
    retransmit: bool = False,
    last: bool | None = None,
    out: np.ndarray | None = None,
) -> PacketBatch:
    """Data packets ``seqs`` (default: all) of the message ``spec`` whose elements are ``values``.

    ``drop_classes`` is per packet of the whole message (or one value).
    ``last`` says whether the batch's final packet carries ``Flag.LAST`` (the
    sender's first pass ends with it); ``None`` flags it when the batch holds the
    message's final packet. ``priority`` may be one class or one per packet of
    the message. ``out`` is scratch space to build into (reused between calls to
    avoid page faults): a uint8 array of at least ``len(seqs) * (HEADER_SIZE +
    packet_bytes)`` bytes.
    """
    flat = np.ascontiguousarray(values).reshape(-1)
    if flat.nbytes != spec.nbytes:
        raise ValueError(f"values have {flat.nbytes} bytes, message {spec.key} has {spec.nbytes}")
    raw = flat.view(np.uint8)
    seq, hdr_bytes = build_headers(
        spec, seqs, token=token, priority=priority, drop_classes=drop_classes, retransmit=retransmit, last=last
    )
    n = spec.pkt_count
    pb = spec.packet_bytes
    seg = HEADER_SIZE + pb
    lengths = np.where(seq == n - 1, spec.last_packet_bytes, pb)
    if out is None:
        rows = np.empty((seq.size, seg), dtype=np.uint8)
    else:
        if out.nbytes < seq.size * seg:
            raise ValueError(f"scratch buffer of {out.nbytes} bytes is smaller than {seq.size * seg}")
        rows = out.reshape(-1)[: seq.size * seg].reshape(seq.size, seg)
    rows[:, :HEADER_SIZE] = hdr_bytes
    full_rows = spec.num_elems // spec.elems_per_packet
    body = raw[: full_rows * pb].reshape(full_rows, pb)
    is_full = seq < full_rows
    fseq = seq[is_full]
    k = fseq.size
    if k and fseq[-1] - fseq[0] == k - 1:
        rows[:k, HEADER_SIZE:] = body[int(fseq[0]) : int(fseq[0]) + k]
    elif k:
        rows[:k, HEADER_SIZE:] = body[fseq]
    if not is_full.all():  # the short last packet sits in the last row; bytes past it are never sent
        tail = raw[full_rows * pb :]
        rows[-1, HEADER_SIZE : HEADER_SIZE + tail.size] = tail
    nbytes = seq.size * seg - (pb - int(lengths[-1]) if seq.size else 0)
    return PacketBatch(data=rows, count=int(seq.size), seg_size=seg, nbytes=int(nbytes), seqs=seq)


def build_headers(
    spec: MessageSpec,
    seqs: np.ndarray | None = None,
    *,
    token: int,
    priority: int | np.ndarray,
    drop_classes: np.ndarray | int = 0,
    retransmit: bool = False,
    last: bool | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(sorted sequence numbers, their headers as an ``(n, HEADER_SIZE)`` uint8 array).

    The payload of packet ``s`` is bytes ``[s * packet_bytes, s * packet_bytes
    + length)`` of the message, so a sender can hand the kernel header and
    payload as separate iovecs and never copy the tensor.
    """
    n = spec.pkt_count
    seq = np.arange(n, dtype=np.int64) if seqs is None else np.sort(np.asarray(seqs, dtype=np.int64))
    if seq.size and (seq[0] < 0 or seq[-1] >= n):
        raise ValueError(f"sequence numbers out of range 0..{n - 1}")
    pb = spec.packet_bytes
    lengths = np.where(seq == n - 1, spec.last_packet_bytes, pb)
    drops = np.broadcast_to(np.asarray(drop_classes, dtype=np.uint8), (n,))[seq] if seq.size else 0
    flags = np.full(seq.size, int(Flag.RETX) if retransmit else 0, dtype=np.uint8)
    if seq.size and (last or (last is None and seq[-1] == n - 1)):
        flags[-1] |= Flag.LAST
    prio = priority if np.ndim(priority) == 0 else np.asarray(priority, dtype=np.uint8)[seq]
    hdrs = pack_headers(
        ptype=PacketType.DATA,
        flags=0,
        priority=prio,
        drop_class=drops,
        job_id=spec.key.job_id,
        src=spec.key.src,
        token=token,
        msg_id=spec.key.msg_id,
        round=spec.key.round,
        layer=spec.layer,
        kind=spec.kind,
        dtype=spec.dtype,
        seq=seq,
        pkt_count=n,
        offset=seq * spec.elems_per_packet,
        length=lengths,
    )
    hdrs["flags"] = flags
    return seq, headers_to_bytes(hdrs)


class HeaderTemplate:
    """Headers of one message's packets from a template row: a batch writes only the per-packet fields.

    Bytes ``[0, INVARIANT_BYTES)`` are fixed per message except the length of the
    short last packet; flags, priority, drop class, seq and offset vary.
    """

    __slots__ = ("_bytes", "_last_len", "_pb", "_row", "sizes", "spec")

    def __init__(self, spec: MessageSpec, token: int) -> None:
        self.spec = spec
        # Packet 0's header, as build_headers writes it: a message of the same shape from an earlier round
        # (a ring sends the same ones every iteration) with this round written in.
        key = spec.key
        n = int(spec.pkt_count)  # fields may be numpy integers (sizes from numpy bounds)
        pb = int(spec.packet_bytes)
        last = int(spec.last_packet_bytes)
        proto = _prototype(
            int(key.job_id), int(key.src), int(token), int(key.msg_id), int(spec.layer), int(spec.kind),
            int(spec.dtype), n, pb, last,
        )  # fmt: skip
        self._bytes = proto[:_ROUND_AT] + int(key.round).to_bytes(4, "big") + proto[_ROUND_AT + 4 :]
        self._row = np.frombuffer(bytearray(self._bytes), dtype=np.uint8)
        self._pb = pb
        self._last_len = np.frombuffer(last.to_bytes(2, "big"), dtype=np.uint8)
        self.sizes = (pb, int(spec.elems_per_packet), n, last)
        """(payload bytes of a full packet, elements per packet, packets, payload bytes of the last one)."""

    def control(self, ptype: PacketType, *, seq: int, priority: int) -> bytes:
        """The header of a payload-less control packet of this message (a PROBE), flags and drop class 0:
        what :class:`~dlcp.wire.Header` packs for it, from the template's bytes."""
        hdr = bytearray(self._bytes)
        hdr[_TYPE_AT] = (VERSION << 4) | int(ptype)
        hdr[_PRIO_AT] = priority
        hdr[_LEN_AT : _LEN_AT + 2] = b"\0\0"
        _SEQ_STRUCT.pack_into(hdr, _FIELDS["seq"].offset, seq)
        return bytes(hdr)

    @property
    def row(self) -> np.ndarray:
        """The template header (``HEADER_SIZE`` bytes): per-packet fields zero, length that of a full packet."""
        return self._row

    def build(
        self, seqs: np.ndarray, *, priority: int, drop_class: int, retransmit: bool = False, last: bool = False
    ) -> np.ndarray:
        """``(len(seqs), HEADER_SIZE)`` headers; ``seqs`` must be sorted (the short last packet last)."""
        k = seqs.size
        rows = np.empty((k, HEADER_SIZE), dtype=np.uint8)
        rows[:] = self._row
        words = rows.view(">u4")
        words[:, _SEQ_WORD] = seqs
        words[:, _OFF_WORD] = seqs * self.spec.elems_per_packet
        rows[:, _FLAGS_AT] = int(Flag.RETX) if retransmit else 0
        rows[:, _PRIO_AT] = priority
        rows[:, _DROP_AT] = drop_class
        if k:
            if last:
                rows[-1, _FLAGS_AT] |= int(Flag.LAST)
            if seqs[-1] == self.spec.pkt_count - 1:
                rows[-1, _LEN_AT : _LEN_AT + 2] = self._last_len
        return rows


@functools.lru_cache(maxsize=4096)
def _prototype(
    job_id: int, src: int, token: int, msg_id: int, layer: int, kind: int, dtype: int, n: int, pb: int, last: int
) -> bytes:
    """Packet 0's header of a message of this shape in round 0 (:class:`HeaderTemplate`)."""
    return Header(
        PacketType.DATA, job_id=job_id, src=src, token=token, msg_id=msg_id, round=0, layer=layer,
        kind=MessageKind(kind), dtype=DType(dtype), seq=0, pkt_count=n, offset=0, length=last if n == 1 else pb,
    ).pack()  # fmt: skip


_FIELDS = {f.name: f for f in HEADER_FIELDS}
_ROUND_AT = _FIELDS["round"].offset
_SEQ_WORD = _FIELDS["seq"].offset // 4
_OFF_WORD = _FIELDS["offset"].offset // 4
_FLAGS_AT = _FIELDS["flags"].offset
_PRIO_AT = _FIELDS["priority"].offset
_DROP_AT = _FIELDS["drop_class"].offset
_LEN_AT = _FIELDS["length"].offset
_TYPE_AT = _FIELDS["ver_type"].offset
_SEQ_STRUCT = struct.Struct("!I")
