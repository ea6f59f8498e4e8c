"""Receiver-side loss injection: drop a fraction of data packets, random or bursty, seeded.

It exercises bounded loss without a network. Only DATA packets are dropped:
control packets (probes, bitmaps, stops) pass, so injected loss models a
network that drops data under congestion while the top-priority class survives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from dlcp.protocol import VERSION, PacketType

_DATA_VT = (VERSION << 4) | PacketType.DATA


@dataclass(frozen=True)
class LossSpec:
    rate: float = 0.0
    """Long-run fraction of data packets dropped."""
    pattern: Literal["random", "bursty"] = "random"
    burst_len: float = 4.0
    """Mean length of a loss burst (``bursty``: a two-state Gilbert-Elliott chain)."""
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate < 1.0:
            raise ValueError(f"loss rate must be in [0, 1), got {self.rate}")
        if self.pattern not in ("random", "bursty"):
            raise ValueError(f"loss pattern must be random or bursty, got {self.pattern!r}")
        if self.burst_len < 1.0:
            raise ValueError(f"burst_len must be >= 1, got {self.burst_len}")


class LossInjector:
    """Decides, segment by segment, which data packets of a receive buffer to drop."""

    def __init__(self, spec: LossSpec) -> None:
        self.spec = spec
        self.rng = np.random.default_rng(spec.seed)
        self.bad = False
        self.dropped = 0
        # Gilbert-Elliott: leave the bad state with r = 1/burst, enter it with p so that p/(p+r) = rate.
        self._r = 1.0 / spec.burst_len
        self._p = spec.rate * self._r / (1.0 - spec.rate) if spec.rate < 1 else 1.0

    def keep_runs(self, buf: np.ndarray, start: int, nbytes: int, seg_size: int) -> list[tuple[int, int]]:
        """(start, nbytes) sub-runs of ``buf[start:start+nbytes]`` to deliver, dropped segments cut out."""
        if self.spec.rate == 0.0 or nbytes <= 0:
            return [(start, nbytes)]
        nseg = -(-nbytes // seg_size)
        is_data = buf[start : start + nbytes : seg_size][:nseg] == _DATA_VT
        drop = is_data & self.draw(nseg)
        if not drop.any():
            return [(start, nbytes)]
        self.dropped += int(drop.sum())
        runs: list[tuple[int, int]] = []
        keep = ~drop
        edges = np.flatnonzero(np.diff(np.concatenate(([0], keep.view(np.int8), [0]))))
        for a, b in edges.reshape(-1, 2):
            s = start + int(a) * seg_size
            e = min(start + int(b) * seg_size, start + nbytes)
            runs.append((s, e - s))
        return runs

    def draw(self, n: int) -> np.ndarray:
        """The next ``n`` decisions of the seeded stream, one per segment (True: drop it if it is data)."""
        u = self.rng.random(n)
        if self.spec.pattern == "random":
            return u < self.spec.rate
        out = np.empty(n, dtype=bool)
        bad = self.bad
        for i in range(n):  # a short Python loop per receive call; tests and experiments only
            bad = u[i] >= self._r if bad else u[i] < self._p
            out[i] = bad
        self.bad = bad
        return out
