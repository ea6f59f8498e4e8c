"""How a tensor is cut into packets, and the receive-side state of one message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from dlcp.protocol import DTYPE_SIZE, FILL_MODE, MAX_PAYLOAD, DType, FillMode, MessageKind


class MessageKey(NamedTuple):
    """Identifies a message on the wire: who sent which tensor in which round of which job."""

    job_id: int
    src: int
    msg_id: int
    round: int


NUMPY_DTYPE: dict[DType, np.dtype] = {
    DType.FLOAT32: np.dtype("<f4"),
    DType.FLOAT16: np.dtype("<f2"),
    DType.BFLOAT16: np.dtype("<u2"),  # carried as raw 16-bit words
    DType.FLOAT64: np.dtype("<f8"),
    DType.INT32: np.dtype("<i4"),
    DType.UINT8: np.dtype("u1"),
}


def dtype_code(dtype: np.dtype) -> DType:
    """The wire DType of a numpy dtype; raises ValueError for unsupported ones."""
    for code, np_dtype in NUMPY_DTYPE.items():
        if code != DType.BFLOAT16 and np.dtype(dtype) == np_dtype:
            return code
    raise ValueError(f"unsupported element type {dtype} (DLCP carries {[d.name for d in DType]})")


def elems_per_packet(payload_bytes: int, dtype: DType) -> int:
    """Elements per full packet for a payload budget (the budget excludes the DLCP header)."""
    size = DTYPE_SIZE[dtype]
    if not size <= payload_bytes <= MAX_PAYLOAD:
        raise ValueError(f"payload_bytes must be in {size}..{MAX_PAYLOAD}, got {payload_bytes}")
    return payload_bytes // size


@dataclass(frozen=True)
class MessageSpec:
    """What a receiver expects: the message's identity and its packetisation."""

    key: MessageKey
    kind: MessageKind
    num_elems: int
    elems_per_packet: int
    dtype: DType = DType.FLOAT32
    layer: int = 0
    loss_bound: float = 0.0

    def __post_init__(self) -> None:
        if self.num_elems < 0:
            raise ValueError(f"num_elems must be >= 0, got {self.num_elems}")
        if self.elems_per_packet <= 0 or self.elems_per_packet * DTYPE_SIZE[self.dtype] > MAX_PAYLOAD:
            raise ValueError(f"elems_per_packet {self.elems_per_packet} does not fit a DLCP payload")
        if not 0.0 <= self.loss_bound < 1.0:
            raise ValueError(f"loss_bound must be in [0, 1), got {self.loss_bound}")
        if self.pkt_count >= 1 << 32:
            raise ValueError("message has more packets than the 32-bit sequence space")

    @property
    def elem_size(self) -> int:
        return DTYPE_SIZE[self.dtype]

    @property
    def nbytes(self) -> int:
        return self.num_elems * self.elem_size

    @property
    def pkt_count(self) -> int:
        return max(1, -(-self.num_elems // self.elems_per_packet))

    @property
    def packet_bytes(self) -> int:
        """Payload bytes of a full packet."""
        return self.elems_per_packet * self.elem_size

    @property
    def last_packet_bytes(self) -> int:
        return self.nbytes - (self.pkt_count - 1) * self.packet_bytes

    @property
    def fill_mode(self) -> FillMode:
        return FILL_MODE[self.kind]

    @property
    def max_missing_elems(self) -> int:
        """The most elements that may be missing at completion."""
        return int(self.loss_bound * self.num_elems)

    def packet_lengths(self) -> np.ndarray:
        """Payload bytes of every packet (all full but possibly the last)."""
        lengths = np.full(self.pkt_count, self.packet_bytes, dtype=np.int64)
        lengths[-1] = self.last_packet_bytes
        return lengths


class Message:
    """Receive-side state of one message: its buffer, the bitmap, and completion state."""

    __slots__ = (
        "accumulate",
        "ahead",
        "done",
        "last_progress",
        "lost_elems",
        "n_received",
        "priority",
        "received",
        "received_elems",
        "sender_done",
        "spec",
        "trimmed",
        "view",
    )

    def __init__(self, spec: MessageSpec, buffer: np.ndarray, now: float, accumulate: bool = False) -> None:
        flat = np.asarray(buffer).reshape(-1)
        if flat.nbytes != spec.nbytes:
            raise ValueError(f"buffer has {flat.nbytes} bytes but message {spec.key} needs {spec.nbytes}")
        if not flat.flags.c_contiguous or not flat.flags.writeable:
            raise ValueError("message buffer must be a writeable, contiguous array")
        if accumulate and spec.dtype in (DType.BFLOAT16, DType.UINT8):
            raise ValueError(f"cannot accumulate {spec.dtype.name} payloads")
        if accumulate and flat.dtype != NUMPY_DTYPE[spec.dtype]:
            raise ValueError(f"an accumulating buffer must be {NUMPY_DTYPE[spec.dtype]}, got {flat.dtype}")
        self.spec = spec
        self.accumulate = accumulate
        self.view = flat.view(np.uint8)
        self.received = np.zeros(spec.pkt_count, dtype=bool)
        self.trimmed = np.zeros(spec.pkt_count, dtype=bool)
        self.n_received = 0
        self.received_elems = 0
        self.sender_done = False
        self.priority = 0
        self.last_progress = now
        self.done = False
        self.lost_elems = 0
        self.ahead = False
        """Posted ahead of its call (:meth:`dlcp.assembler.Assembler.expect`): packets and probes under its key
        that describe another message are held as early packets for the call that posts that one."""

    @property
    def key(self) -> MessageKey:
        return self.spec.key

    @property
    def missing_elems(self) -> int:
        return self.spec.num_elems - self.received_elems

    @property
    def within_bound(self) -> bool:
        return self.missing_elems <= self.spec.max_missing_elems

    @property
    def ready(self) -> bool:
        """Complete: everything arrived, or the sender is done and the gap is within the bound."""
        if self.n_received == self.spec.pkt_count:
            return True
        return self.sender_done and self.within_bound

    @property
    def packets_before_ready(self) -> int:
        """Fresh packets that must arrive before :attr:`ready` can hold (at least 1).

        All the missing ones while the sender is not done; once it is, any one
        may bring the gap within the bound. A receive fast path that places
        packets itself returns to the assembler when this many were placed.
        """
        if self.sender_done:
            return 1
        return max(1, self.spec.pkt_count - self.n_received)

    @property
    def needs_retransmit(self) -> bool:
        """The sender is done (or trims proved it) and the gap is over the bound."""
        if self.sender_done:
            return not self.within_bound
        known_lost = int(np.count_nonzero(self.trimmed & ~self.received))
        return known_lost * self.spec.elems_per_packet > self.spec.max_missing_elems

    def missing_seqs(self) -> np.ndarray:
        return np.flatnonzero(~self.received)

    def missing_ranges(self) -> np.ndarray:
        """Missing packets as ``(k, 2)`` half-open ``[start, end)`` sequence ranges."""
        return bool_runs(~self.received)

    def bitmap(self) -> bytes:
        """Received bitmap, bit ``i`` (LSB first) set when packet ``i`` arrived."""
        return np.packbits(self.received, bitorder="little").tobytes()


def bool_runs(mask: np.ndarray) -> np.ndarray:
    """Half-open ``[start, end)`` index ranges of the True runs in ``mask``."""
    padded = np.concatenate(([False], mask, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return edges.reshape(-1, 2)


def elem_ranges(spec: MessageSpec, seq_ranges: np.ndarray) -> np.ndarray:
    """Convert packet ranges to element ranges ``[start, end)``."""
    out = seq_ranges.astype(np.int64) * spec.elems_per_packet
    return np.minimum(out, spec.num_elems)
