"""Sender rate control: the one rule every DLCP sender follows, on a host and in the simulator.

DLCP tolerates loss up to a message's bound, so loss alone is not a congestion signal. A sender
starts at its rate ceiling (its share of the fabric when a controller paced it, the line otherwise)
and, after each message, takes the loss its receiver reports for that message's first pass:

* above ``decrease_above`` (twice the largest loss bound, at least 2%): the rate halves, or, for a
  sender that knows its share (``decrease_by_loss``), falls to ``rate * (1 - loss)`` (at most
  halving): paced at its share, a sender that loses more than the bound allows overshoots what the
  path really carries by about the loss fraction;
* otherwise it climbs by ``increase`` bytes/s, up to ``max_rate``.

:class:`RateRule` is the rule as a pure function of (rate, loss); :func:`paced` and :func:`unpaced`
give its numbers for a sender with and without a share; :func:`shared_rates` computes the shares
from the fabric (the controller writes them into the testbed's job file, the simulator sets them
per host). ``host/pacing.py`` (the token bucket) and the simulator's transport
(``simulations/cpp/rate_control.h``, the same rule in C++, checked against this one on random
sequences by ``tests/test_rate_control.py``) both apply it. Why this rule and not the simulator's
old per-round one: docs/simulations.md, "One rate-control rule".
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

LINE_RATE = 12.5e9
"""Bytes per second of an unpaced host (100 Gbit/s: effectively unpaced on loopback)."""
_MIN_DIVISOR = 1000
_INCREASE_DIVISOR = 100
MIN_RATE = LINE_RATE / _MIN_DIVISOR
"""The lowest rate of an unpaced host, bytes/s (a thousandth of its line)."""
INCREASE = LINE_RATE / _INCREASE_DIVISOR
"""Bytes/s an unpaced host adds per clean message (a hundredth of its line)."""
DECREASE_ABOVE = 0.02
"""The least first-pass loss fraction that counts as congestion."""
HEADROOM = 0.95
"""Fraction of a port's share a sender is paced to: the frames' headers and the wire's preamble and gap
(about 1% at 8 KiB payloads) and the job's control packets take the rest."""

H = TypeVar("H", bound=Hashable)
P = TypeVar("P", bound=Hashable)


@dataclass(frozen=True, slots=True)
class RateRule:
    """A sender's AIMD on first-pass loss (bytes per second throughout)."""

    max_rate: float
    min_rate: float
    increase: float
    decrease_above: float = DECREASE_ABOVE
    decrease_by_loss: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.min_rate <= self.max_rate:
            raise ValueError(f"rate rule needs 0 < min_rate <= max_rate, got {self.min_rate} and {self.max_rate}")
        if not 0 < self.decrease_above < 1:
            raise ValueError(f"decrease_above must be in (0, 1), got {self.decrease_above}")
        if self.increase < 0:
            raise ValueError(f"increase must be >= 0, got {self.increase}")

    def congested(self, loss: float) -> bool:
        return loss > self.decrease_above

    def next_rate(self, rate: float, loss: float) -> float:
        """The rate after a message whose first pass lost the fraction ``loss`` of its packets."""
        if self.congested(loss):
            factor = max(0.5, 1.0 - loss) if self.decrease_by_loss else 0.5
            return max(self.min_rate, rate * factor)
        return min(self.max_rate, rate + self.increase)


def first_pass_loss(missing: Sequence[int], packets: int) -> float:
    """The verdict :meth:`RateRule.next_rate` takes: the fraction of a pass's ``packets`` known lost.

    ``missing`` (ascending) are the packets the receiver's first reply names as not received. Those after
    the last packet it did receive are not counted: they may still be in a queue, not lost. When the PROBE
    that asks travelled in the control class it overtook its own message's queued data, and counting that
    tail cut every paced sender's rate by about a packet's share per message at 1,024 hosts
    (docs/simulations.md, "One rate-control rule"); a PROBE now keeps its data's queue, and the verdict still
    does not count a tail that is merely late. A reply naming every packet is a full loss.
    """
    if packets <= 0:
        return 0.0
    if len(missing) >= packets:
        return 1.0
    tail = 0
    while tail < len(missing) and missing[len(missing) - 1 - tail] == packets - 1 - tail:
        tail += 1
    return (len(missing) - tail) / packets


def decrease_above(largest_bound: float) -> float:
    """First-pass loss above which a sender slows down: twice the largest loss bound, at least 2%.

    Loss within the bounds is what the receivers accept; on a lossy link (the testbed's 1% random loss)
    a 2% threshold under a 2% bound halved the rate after about one message in ten, for loss that no
    pacing removes.
    """
    return min(0.5, max(DECREASE_ABOVE, 2 * largest_bound))


def unpaced(line_rate: float = LINE_RATE, largest_bound: float = 0.0) -> RateRule:
    """A sender without a share: starts at the line, halves on congestion, +1% of the line per clean message."""
    return RateRule(
        max_rate=line_rate,
        min_rate=line_rate / _MIN_DIVISOR,
        increase=line_rate / _INCREASE_DIVISOR,
        decrease_above=decrease_above(largest_bound),
    )


def paced(share: float, largest_bound: float = 0.0) -> RateRule:
    """A sender paced at ``share`` bytes/s: never above it, slows by the loss fraction, +1/8 per clean message.

    Slowing by the loss fraction rather than by half: a paced sender's overshoot is the port carrying
    less than its rate (on the testbed, a software switch short of CPU); halving left pushes at a third
    of the share for many iterations there. 1/8 of the share per message brings it back in a few.
    """
    return RateRule(
        max_rate=share,
        min_rate=min(MIN_RATE, share / 16),
        increase=share / 8,
        decrease_above=decrease_above(largest_bound),
        decrease_by_loss=True,
    )


def shared_rates(
    pairs: Iterable[tuple[H, H]], hops: Callable[[H, H], Iterable[P]], port_rate: Callable[[P], float | None]
) -> dict[H, int]:
    """Sender -> the rate it is paced to: ``HEADROOM`` of its smallest share of a port its data crosses.

    ``pairs`` are the (sender, receiver) pairs that carry data, ``hops(src, dst)`` every egress port a
    packet between them may take, ``port_rate`` a port's rate (None: not a bottleneck, not counted).
    A port's share is its rate over the distinct senders whose data may meet there: every sender may
    land there at once, and the switches' thresholds are sized for that (``dlcp.controller.selective_drop``).
    A sender crossing no counted port is absent (unpaced). Rates in the unit of ``port_rate``.
    """
    paths = {pair: tuple(hops(*pair)) for pair in dict.fromkeys(pairs)}
    senders: dict[P, set[H]] = {}
    for (src, _), through in paths.items():
        for hop in through:
            senders.setdefault(hop, set()).add(src)
    rates: dict[H, float] = {}
    for (src, _), through in paths.items():
        for hop in through:
            rate = port_rate(hop)
            if rate is not None:
                share = rate / len(senders[hop])
                rates[src] = min(rates.get(src, share), share)
    return {h: max(1, int(r * HEADROOM)) for h, r in rates.items()}
