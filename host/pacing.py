"""Sender pacing with loss-based AIMD rate control.

DLCP tolerates loss up to a message's bound, so loss alone is not a congestion
signal: a sender backs off only when the loss a receiver reports for a
message's first pass exceeds ``decrease_above`` (by default twice the largest
loss bound, at least 2%). Then the rate halves (multiplicative decrease, down
to ``min_rate``); every message delivered with less loss adds ``increase``
bytes/s (additive increase, up to ``max_rate``). This keeps a sender from
pushing an overloaded network into congestion collapse while letting the
tolerated loss pass without slowing down. A token bucket of ``burst`` bytes
spaces the sends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

_MIN_SLEEP_S = 1e-3
"""Shorter waits are carried as debt: sleeping that briefly costs more than it spaces."""


@dataclass(frozen=True)
class PacingConfig:
    max_rate: float = 12.5e9
    """Bytes per second (100 Gbit/s: effectively unpaced on loopback)."""
    min_rate: float = 12.5e6
    increase: float = 125e6
    """Bytes per second added per message delivered without congestion."""
    decrease_above: float = 0.02
    """First-pass loss fraction above which the sender halves its rate."""
    burst: int = 1 << 20
    decrease_by_loss: bool = False
    """Decrease to ``rate * (1 - loss)`` (at most halving) instead of halving: a sender that knows its share
    of the path and overshoots what the path really carries loses about the overshoot's fraction."""
    max_call: int = 0
    """Most bytes one send call carries (0: the burst plus the debt carried, :meth:`AimdPacer.call_bytes`).
    On a fabric the burst the switches were sized for: a call's packets leave back to back."""

    def __post_init__(self) -> None:
        if not 0 < self.min_rate <= self.max_rate:
            raise ValueError("pacing needs 0 < min_rate <= max_rate")
        if not 0 < self.decrease_above < 1:
            raise ValueError("decrease_above must be in (0, 1)")


class AimdPacer:
    __slots__ = ("cfg", "rate", "_tokens", "_last", "decreases")

    def __init__(self, cfg: PacingConfig) -> None:
        self.cfg = cfg
        self.rate = cfg.max_rate
        self._tokens = float(cfg.burst)
        self._last = time.perf_counter()
        self.decreases = 0

    def wait(self, nbytes: int) -> None:
        """Block until ``nbytes`` may be sent at the current rate.

        The bucket may go into debt: a send is charged in full and the sender
        sleeps only once the debt is worth at least ``_MIN_SLEEP_S`` at the
        current rate. The long-run rate is the same, and the sender never
        spins: on a host with few cores a spinning sender takes the CPU its
        own receive thread (or a co-located peer) needs.
        """
        now = time.perf_counter()
        self._tokens = min(self.cfg.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now
        self._tokens -= nbytes
        if self._tokens < 0:
            delay = -self._tokens / self.rate
            if delay >= _MIN_SLEEP_S:
                time.sleep(delay)

    def call_bytes(self) -> int:
        """The most bytes one send may carry without :meth:`wait` sleeping first, from a full bucket.

        A burst plus the debt that is carried rather than slept on: at the full
        rate (loopback) over 13 MB, so a message goes out in one or two calls
        (each costs a transition into C and the interpreter's bookkeeping);
        after a rate decrease the calls shrink and :meth:`wait` spaces them.
        """
        carried = self.cfg.burst + int(self.rate * _MIN_SLEEP_S * 0.99)
        return min(carried, self.cfg.max_call) if self.cfg.max_call else carried

    def charge(self, nbytes: int) -> None:
        """Debit ``nbytes`` sent without waiting (the next :meth:`wait` pays for them)."""
        now = time.perf_counter()
        self._tokens = min(self.cfg.burst, self._tokens + (now - self._last) * self.rate) - nbytes
        self._last = now

    def on_feedback(self, first_pass_loss: float) -> None:
        if first_pass_loss > self.cfg.decrease_above:
            factor = max(0.5, 1.0 - first_pass_loss) if self.cfg.decrease_by_loss else 0.5
            self.rate = max(self.cfg.min_rate, self.rate * factor)
            self.decreases += 1
        else:
            self.rate = min(self.cfg.max_rate, self.rate + self.cfg.increase)


def decrease_above(largest_bound: float) -> float:
    """First-pass loss above which a sender slows down: twice the largest loss bound, at least 2%.

    Loss within the bounds is what the receivers accept; on a lossy link (the testbed's 1% random loss)
    a 2% threshold under a 2% bound halved the rate after about one message in ten, for loss that no
    pacing removes.
    """
    return min(0.5, max(PacingConfig.decrease_above, 2 * largest_bound))


def for_host(rate_bps: dict[str, int], burst_bytes: int, host: str, largest_bound: float = 0.0) -> PacingConfig:
    """The pacing of the host at ``host`` from its job's transport settings and its policy's largest loss bound.

    A named host never exceeds its rate: its sends start there (not at the unlimited default, which on a
    fabric lands a whole message in the bottleneck's buffer at once); on loss above the threshold they slow
    by the loss fraction (the port carries less than its rate: a software switch short of CPU), not by half,
    which on the testbed left pushes at a third of the share for many iterations; they climb back by 1/8
    of the rate per message; and one send call carries at most ``burst_bytes`` (if set). A host not named
    starts unpaced (the default rates); ``burst_bytes`` caps its bucket.
    """
    rate = rate_bps.get(host)
    above = decrease_above(largest_bound)
    if rate is None:
        return PacingConfig(burst=burst_bytes or PacingConfig.burst, decrease_above=above)
    top = rate / 8.0
    default = PacingConfig()
    return PacingConfig(
        max_rate=top, min_rate=min(default.min_rate, top / 16), increase=top / 8, decrease_above=above,
        decrease_by_loss=True, burst=burst_bytes or default.burst, max_call=burst_bytes,
    )  # fmt: skip
