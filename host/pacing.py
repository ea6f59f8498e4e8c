"""Sender pacing: a token bucket at a rate that the core's rate-control rule moves.

The rule (:mod:`dlcp.rate_control`, shared with the simulator): a sender backs off
only when the loss a receiver reports for a message's first pass exceeds
``decrease_above`` (by default twice the largest loss bound, at least 2%), by half
or, for a controller-paced host, by the loss fraction; every message delivered with
less loss adds ``increase`` bytes/s, up to ``max_rate``. This keeps a sender from
pushing an overloaded network into congestion collapse while letting the
tolerated loss pass without slowing down. A token bucket of ``burst`` bytes
spaces the sends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dlcp import rate_control
from dlcp.rate_control import RateRule, decrease_above

__all__ = ["AimdPacer", "PacingConfig", "decrease_above", "for_host"]

_MIN_SLEEP_S = 1e-3
"""Shorter waits are carried as debt: sleeping that briefly costs more than it spaces."""


@dataclass(frozen=True)
class PacingConfig:
    max_rate: float = rate_control.LINE_RATE
    """Bytes per second (100 Gbit/s: effectively unpaced on loopback)."""
    min_rate: float = rate_control.MIN_RATE
    increase: float = rate_control.INCREASE
    """Bytes per second added per message delivered without congestion."""
    decrease_above: float = rate_control.DECREASE_ABOVE
    """First-pass loss fraction above which the sender halves its rate."""
    burst: int = 1 << 20
    decrease_by_loss: bool = False
    """Decrease to ``rate * (1 - loss)`` (at most halving) instead of halving: a sender that knows its share
    of the path and overshoots what the path really carries loses about the overshoot's fraction."""
    max_call: int = 0
    """Most bytes one send call carries (0: the burst plus the debt carried, :meth:`AimdPacer.call_bytes`).
    On a fabric the burst the switches were sized for: a call's packets leave back to back."""

    def __post_init__(self) -> None:
        _ = self.rule  # validates the numbers now, not at the first verdict

    @property
    def rule(self) -> RateRule:
        """The core's rate-control rule with these numbers."""
        return RateRule(self.max_rate, self.min_rate, self.increase, self.decrease_above, self.decrease_by_loss)

    @classmethod
    def from_rule(cls, rule: RateRule, burst: int = 1 << 20, max_call: int = 0) -> PacingConfig:
        return cls(
            max_rate=rule.max_rate, min_rate=rule.min_rate, increase=rule.increase,
            decrease_above=rule.decrease_above, decrease_by_loss=rule.decrease_by_loss, burst=burst, max_call=max_call,
        )  # fmt: skip


class AimdPacer:
    __slots__ = ("cfg", "rule", "rate", "_tokens", "_last", "decreases", "slept")

    def __init__(self, cfg: PacingConfig) -> None:
        self.cfg = cfg
        self.rule = cfg.rule
        self.rate = cfg.max_rate
        self._tokens = float(cfg.burst)
        self._last = time.perf_counter()
        self.decreases = 0
        self.slept = 0.0
        """Seconds :meth:`wait` has slept in all (the timeline's pacing stalls)."""

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
                self.slept += delay

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

    def spaced(self, nbytes: int, slept: float) -> None:
        """Debit ``nbytes`` that the sender spaced at :attr:`rate` itself since the last :meth:`wait` (which
        admitted their first burst), sleeping ``slept`` seconds: the bucket refilled all the while, as it
        would have between waits, and is capped only afterwards."""
        now = time.perf_counter()
        self._tokens = min(self.cfg.burst, self._tokens + (now - self._last) * self.rate - nbytes)
        self._last = now
        self.slept += slept

    def on_feedback(self, first_pass_loss: float, sent_at: float | None = None) -> None:
        """A message's first-pass verdict (:meth:`dlcp.rate_control.RateRule.next_rate`); ``sent_at``: this
        pacer's :attr:`rate` when the message was handed over."""
        self.decreases += self.rule.congested(first_pass_loss)
        self.rate = self.rule.next_rate(self.rate, first_pass_loss, sent_at)


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
    if rate is None:
        return PacingConfig.from_rule(
            rate_control.unpaced(largest_bound=largest_bound), burst_bytes or PacingConfig.burst
        )
    rule = rate_control.paced(rate / 8.0, largest_bound)
    return PacingConfig.from_rule(rule, burst_bytes or PacingConfig.burst, max_call=burst_bytes)
