"""Why a packet was dropped, and the counters that record it.

Every parse and assembly path drops bad input and counts it here instead of
raising: a malformed datagram must never take down a receive loop.
"""

from __future__ import annotations

import enum

import numpy as np


class DropReason(enum.IntEnum):
    OK = 0
    TRUNCATED = 1
    """Fewer bytes than a header, or than the header's payload length."""
    BAD_VERSION = 2
    BAD_TYPE = 3
    BAD_DTYPE = 4
    BAD_KIND = 5
    UNKNOWN_JOB = 6
    BAD_TOKEN = 7
    UNKNOWN_MESSAGE = 8
    """A message the receiver does not expect and cannot stash."""
    OUT_OF_RANGE = 9
    """seq, offset or offset+length outside the message."""
    BAD_COUNT = 10
    """pkt_count differs from the message's packet count."""
    BAD_LENGTH = 11
    """Payload length or offset contradicts the message's packetisation."""
    TOO_LARGE = 12
    """A message or job over its memory cap."""
    DUPLICATE = 13
    LATE = 14
    """A packet for a message that already completed."""
    STASH_FULL = 15
    """An early packet that found the per-job stash full."""
    INJECTED = 16
    """Dropped on purpose by a loss-injection filter."""
    STASH_EXPIRED = 17
    """An early packet evicted from the stash: its message was not expected within ``limits.max_stash_age_s``."""


NUM_REASONS = len(DropReason)


class DropCounters:
    """Packet counts per :class:`DropReason` (index ``OK`` counts accepted packets)."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts = np.zeros(NUM_REASONS, dtype=np.int64)

    def add(self, reason: DropReason, n: int = 1) -> None:
        self.counts[reason] += n

    def add_codes(self, codes: np.ndarray) -> None:
        """Count a vector of reason codes (one per packet)."""
        self.counts += np.bincount(codes, minlength=NUM_REASONS)[:NUM_REASONS]

    def __getitem__(self, reason: DropReason) -> int:
        return int(self.counts[reason])

    @property
    def dropped(self) -> int:
        """Packets dropped for any reason (duplicates and late packets included)."""
        return int(self.counts[1:].sum())

    def as_dict(self) -> dict[str, int]:
        return {r.name.lower(): int(self.counts[r]) for r in DropReason if self.counts[r]}
