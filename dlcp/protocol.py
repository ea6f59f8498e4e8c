"""The DLCP protocol constants: the one place they are defined.

Everything else (the wire codec, the scapy layer, the generated P4 constants,
the software switch, the simulator) reads these values; nothing re-types them.
``docs/protocol.md`` is the prose specification of the same layout.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

VERSION = 1
"""Wire format version carried in the top nibble of the first header byte."""

UDP_PORT = 19110
"""Default UDP destination port of DLCP datagrams (data and control)."""

HEADER_SIZE = 40
"""Size in bytes of the fixed DLCP header that starts every DLCP datagram."""

NUM_PRIORITY_CLASSES = 8
"""Default number of priority classes: the usual number of switch queues."""

NUM_DROP_CLASSES = 4
"""Drop classes 0..3. Class 0 is never drop-eligible; higher is dropped first."""

MAX_PAYLOAD = 65535 - 8 - 20 - HEADER_SIZE
"""Largest payload a single DLCP datagram can carry (16-bit length field, IPv4/UDP)."""


class PacketType(enum.IntEnum):
    """Low nibble of the first header byte."""

    DATA = 0
    PROBE = 1
    BITMAP = 2
    STOP = 3
    TRIMMED = 4


class Flag(enum.IntFlag):
    """Bits of the ``flags`` byte."""

    NONE = 0
    LAST = 0x01
    """The sender has sent every packet of the message once (first pass done)."""
    RETX = 0x02
    """This data packet is a retransmission."""
    FINAL = 0x04
    """On BITMAP/STOP: this is the last chunk of the bitmap."""
    NACK = 0x08
    """On BITMAP: sent unasked while the message is still arriving; its zero bits are
    packets the receiver takes for lost (they fell more than a reordering window behind)."""


class MessageKind(enum.IntEnum):
    """What a message carries; selects the loss bound and how gaps are filled."""

    PUSH = 0
    """Worker to parameter server: gradients. Gaps are zero-filled."""
    PULL = 1
    """Parameter server to worker: parameters. Gaps keep their previous value."""
    REDUCE_SCATTER = 2
    """Ring all-reduce, reduce-scatter step: partial gradient sums. Zero-filled."""
    ALL_GATHER = 3
    """Ring all-reduce, all-gather step: reduced gradients. Zero-filled."""


class FillMode(enum.IntEnum):
    """How a completed message's missing ranges are filled."""

    ZERO = 0
    STALE = 1


FILL_MODE: dict[MessageKind, FillMode] = {
    MessageKind.PUSH: FillMode.ZERO,
    MessageKind.PULL: FillMode.STALE,
    MessageKind.REDUCE_SCATTER: FillMode.ZERO,
    MessageKind.ALL_GATHER: FillMode.ZERO,
}


class DType(enum.IntEnum):
    """Element type of a data payload (payload bytes are little-endian)."""

    FLOAT32 = 0
    FLOAT16 = 1
    BFLOAT16 = 2
    FLOAT64 = 3
    INT32 = 4
    UINT8 = 5


DTYPE_SIZE: dict[DType, int] = {
    DType.FLOAT32: 4,
    DType.FLOAT16: 2,
    DType.BFLOAT16: 2,
    DType.FLOAT64: 8,
    DType.INT32: 4,
    DType.UINT8: 1,
}


@dataclass(frozen=True)
class Field:
    """One header field: name, byte offset, size in bytes (big-endian unsigned)."""

    name: str
    offset: int
    size: int
    doc: str


HEADER_FIELDS: tuple[Field, ...] = (
    # Bytes 0..27 are the same in every full-size packet of a message, so a
    # receiver validates a whole batch by comparing them with one vector op.
    Field("ver_type", 0, 1, "version (high 4 bits) and packet type (low 4 bits)"),
    Field("kind", 1, 1, "MessageKind"),
    Field("dtype", 2, 1, "DType of the payload elements"),
    Field("rsvd0", 3, 1, "zero on send, ignored on receive"),
    Field("job_id", 4, 2, "job identifier"),
    Field("src", 6, 2, "sender rank within the job"),
    Field("token", 8, 4, "per-job token from the rendezvous"),
    Field("msg_id", 12, 4, "message (tensor) identifier"),
    Field("round", 16, 4, "training iteration / collective round"),
    Field("layer", 20, 2, "layer index, 0 = first layer of the forward pass"),
    Field("length", 22, 2, "payload length in bytes"),
    Field("pkt_count", 24, 4, "number of packets in the message"),
    # Bytes 28..39 vary per packet.
    Field("flags", 28, 1, "Flag bits"),
    Field("priority", 29, 1, "priority class, 0 lowest .. NUM_PRIORITY_CLASSES-1 highest"),
    Field("drop_class", 30, 1, "0 never drop-eligible .. 3 dropped first"),
    Field("rsvd1", 31, 1, "zero on send, ignored on receive"),
    Field("seq", 32, 4, "packet sequence number within the message"),
    Field("offset", 36, 4, "element offset of the payload within the message"),
)

INVARIANT_BYTES = 28
"""Header bytes ``[0, INVARIANT_BYTES)`` are identical across the full-size packets of a message."""

CONTROL_PRIORITY = NUM_PRIORITY_CLASSES - 1
"""Control packets and retransmissions travel in the highest class."""


def dscp_for(priority: int, drop_class: int) -> int:
    """DSCP code point for a DLCP packet on commodity switches.

    The priority class goes in the three precedence bits (class selector, so
    switches that map DSCP>>3 to a traffic class queue by it) and the drop
    class in the two AF drop-precedence bits (so WRED profiles keyed on AFxy
    drop eligible packets first): ``dscp = priority << 3 | min(drop, 3) << 1``.
    """
    if not 0 <= priority < NUM_PRIORITY_CLASSES:
        raise ValueError(f"priority must be in 0..{NUM_PRIORITY_CLASSES - 1}, got {priority}")
    if not 0 <= drop_class < NUM_DROP_CLASSES:
        raise ValueError(f"drop_class must be in 0..{NUM_DROP_CLASSES - 1}, got {drop_class}")
    return (priority << 3) | (drop_class << 1)


ECN_NOT_ECT = 0
ECN_ECT0 = 2


def ecn_for(drop_class: int) -> int:
    """ECN bits: protected packets are ECT(0) so WRED marks them; eligible ones are Not-ECT so WRED drops them."""
    return ECN_ECT0 if drop_class == 0 else ECN_NOT_ECT


def tos_for(priority: int, drop_class: int) -> int:
    """The IPv4 TOS byte (DSCP << 2 | ECN) for a packet of this priority and drop class."""
    return (dscp_for(priority, drop_class) << 2) | ecn_for(drop_class)
