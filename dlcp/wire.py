"""Packing and parsing DLCP headers, one at a time or a whole batch at once.

The data path never builds per-packet Python objects: a batch of headers is a
numpy structured array (big-endian fields) laid over the datagram buffer, and
validation is a handful of vector comparisons.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, fields

import numpy as np

from dlcp.drops import DropReason
from dlcp.protocol import (
    DTYPE_SIZE,
    HEADER_FIELDS,
    HEADER_SIZE,
    VERSION,
    DType,
    Flag,
    MessageKind,
    PacketType,
)

_STRUCT_CODES = {1: "B", 2: "H", 4: "I"}
HEADER_STRUCT = struct.Struct("!" + "".join(_STRUCT_CODES[f.size] for f in HEADER_FIELDS))
HEADER_DTYPE = np.dtype(
    {
        "names": [f.name for f in HEADER_FIELDS],
        "formats": [f">u{f.size}" for f in HEADER_FIELDS],
        "offsets": [f.offset for f in HEADER_FIELDS],
        "itemsize": HEADER_SIZE,
    }
)

_FIELD_NAMES = tuple(f.name for f in HEADER_FIELDS)
_PLAIN_FIELDS = tuple(n for n in _FIELD_NAMES if n not in ("ver_type", "flags", "kind", "dtype", "rsvd0", "rsvd1"))


def _lut(values: object) -> np.ndarray:
    table = np.zeros(256, dtype=bool)
    table[[int(v) for v in values]] = True  # type: ignore[attr-defined]
    return table


KNOWN_TYPE = _lut(PacketType)
KNOWN_DTYPE = _lut(DType)
KNOWN_KIND = _lut(MessageKind)
ELEMENT_SIZE = np.zeros(256, dtype=np.int64)
for _t, _s in DTYPE_SIZE.items():
    ELEMENT_SIZE[_t] = _s


@dataclass(frozen=True)
class Header:
    """One decoded DLCP header (tools, tests and control packets; not the data path)."""

    type: PacketType
    flags: Flag = Flag.NONE
    priority: int = 0
    drop_class: int = 0
    job_id: int = 0
    src: int = 0
    token: int = 0
    msg_id: int = 0
    round: int = 0
    layer: int = 0
    kind: MessageKind = MessageKind.PUSH
    dtype: DType = DType.FLOAT32
    seq: int = 0
    pkt_count: int = 0
    offset: int = 0
    length: int = 0
    version: int = VERSION

    def pack(self) -> bytes:
        return HEADER_STRUCT.pack(*self._values())

    def _values(self) -> tuple[int, ...]:
        """Field values in HEADER_FIELDS order."""
        by_name = {
            "ver_type": (self.version << 4) | int(self.type),
            "kind": int(self.kind),
            "dtype": int(self.dtype),
            "flags": int(self.flags),
            "rsvd0": 0,
            "rsvd1": 0,
        }
        return tuple(by_name[f.name] if f.name in by_name else getattr(self, f.name) for f in HEADER_FIELDS)

    @classmethod
    def unpack(cls, data: bytes | memoryview | np.ndarray, offset: int = 0) -> Header:
        """Decode one header; raises :class:`ValueError` naming what is wrong."""
        if len(data) - offset < HEADER_SIZE:
            raise ValueError(f"truncated DLCP header: {len(data) - offset} < {HEADER_SIZE} bytes")
        v = dict(
            zip(
                _FIELD_NAMES,
                HEADER_STRUCT.unpack_from(data if not isinstance(data, np.ndarray) else data.data, offset),
                strict=True,
            )
        )
        version, ptype = v["ver_type"] >> 4, v["ver_type"] & 0xF
        if version != VERSION:
            raise ValueError(f"unsupported DLCP version {version} (expected {VERSION})")
        try:
            return cls(
                type=PacketType(ptype),
                flags=Flag(v["flags"]),
                kind=MessageKind(v["kind"]),
                dtype=DType(v["dtype"]),
                version=version,
                **{k: v[k] for k in _PLAIN_FIELDS},
            )
        except ValueError as exc:
            raise ValueError(f"invalid DLCP header field: {exc}") from None

    def replace(self, **changes: object) -> Header:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return Header(**values)  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["type"] = self.type.name
        d["kind"] = self.kind.name
        d["dtype"] = self.dtype.name
        d["flags"] = [f.name for f in Flag if f and f in self.flags]
        return d


def header_view(buf: np.ndarray | bytes | bytearray | memoryview, count: int, stride: int) -> np.ndarray:
    """A structured-array view of ``count`` headers spaced ``stride`` bytes apart in ``buf``.

    No bytes are copied. The caller guarantees ``(count - 1) * stride + HEADER_SIZE <= len(buf)``.
    """
    if count == 0:
        return np.zeros(0, dtype=HEADER_DTYPE)
    base = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    need = (count - 1) * stride + HEADER_SIZE
    if base.nbytes < need:
        raise ValueError(f"buffer of {base.nbytes} bytes cannot hold {count} headers at stride {stride}")
    return np.ndarray(shape=(count,), dtype=HEADER_DTYPE, buffer=base, offset=0, strides=(stride,))


def segment_count(nbytes: int, seg_size: int) -> int:
    """Number of segments (whole or partial) in a GRO buffer of ``nbytes``."""
    if seg_size <= 0:
        raise ValueError(f"segment size must be positive, got {seg_size}")
    return -(-nbytes // seg_size)


def segment_lengths(nbytes: int, seg_size: int) -> np.ndarray:
    """Bytes in each segment of a GRO/GSO buffer of ``nbytes``: ``seg_size`` each, the last one possibly short.

    The cut the receiver makes (``Assembler.ingest`` computes the same inline), for the capture decoder.
    """
    n = segment_count(nbytes, seg_size)
    lengths = np.full(n, seg_size, dtype=np.int64)
    if n:
        lengths[-1] = nbytes - (n - 1) * seg_size
    return lengths


def check_headers(hdrs: np.ndarray, available: np.ndarray) -> np.ndarray:
    """Vectorised wire-level checks. Returns one :class:`DropReason` code per header (0 = OK).

    ``available`` is the number of bytes each packet really has, header included.
    Message-level checks (ranges, counts, tokens) are the assembler's.
    """
    codes = np.zeros(len(hdrs), dtype=np.int64)
    vt = hdrs["ver_type"]
    length = hdrs["length"].astype(np.int64)
    ptype = vt & 0xF
    data_like = (ptype == PacketType.DATA) | (ptype == PacketType.TRIMMED)
    # The order matters: the first failing check names the reason.
    checks = (
        (DropReason.BAD_VERSION, (vt >> 4) != VERSION),
        (DropReason.BAD_TYPE, ~KNOWN_TYPE[ptype]),
        (DropReason.BAD_KIND, ~KNOWN_KIND[hdrs["kind"]]),
        (DropReason.BAD_DTYPE, ~KNOWN_DTYPE[hdrs["dtype"]]),
        # A trimmed packet keeps its original length but carries no payload.
        (DropReason.TRUNCATED, (ptype != PacketType.TRIMMED) & (length > available - HEADER_SIZE)),
        (DropReason.BAD_LENGTH, data_like & (length % np.maximum(ELEMENT_SIZE[hdrs["dtype"]], 1) != 0)),
    )
    for reason, bad in reversed(checks):
        codes[bad] = reason
    return codes


def pack_headers(
    *,
    ptype: PacketType,
    flags: int,
    priority: np.ndarray | int,
    drop_class: np.ndarray | int,
    job_id: int,
    src: int,
    token: int,
    msg_id: int,
    round: int,
    layer: int,
    kind: MessageKind,
    dtype: DType,
    seq: np.ndarray,
    pkt_count: int,
    offset: np.ndarray,
    length: np.ndarray | int,
) -> np.ndarray:
    """Build the headers of a batch of packets of one message as a structured array."""
    n = len(seq)
    h = np.zeros(n, dtype=HEADER_DTYPE)
    h["ver_type"] = (VERSION << 4) | int(ptype)
    h["flags"] = flags
    h["priority"] = priority
    h["drop_class"] = drop_class
    h["job_id"] = job_id
    h["src"] = src
    h["token"] = token
    h["msg_id"] = msg_id
    h["round"] = round
    h["layer"] = layer
    h["kind"] = int(kind)
    h["dtype"] = int(dtype)
    h["seq"] = seq
    h["pkt_count"] = pkt_count
    h["offset"] = offset
    h["length"] = length
    return h


def headers_to_bytes(hdrs: np.ndarray) -> np.ndarray:
    """The raw bytes of a header batch as an ``(n, HEADER_SIZE)`` uint8 array."""
    return np.ascontiguousarray(hdrs).view(np.uint8).reshape(len(hdrs), HEADER_SIZE)
