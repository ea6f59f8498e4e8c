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

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from dlcp.protocol import HEADER_SIZE

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
FRAME_OVERHEAD = 8 + 20 + 14 + 8 + 4 + 12
"""Bytes a port carries per DLCP packet beyond what its sender paces (the DLCP header and payload): UDP 8,
IPv4 20 and Ethernet 14 headers, and on the wire the preamble and start delimiter 8, FCS 4 and the
inter-frame gap 12 (as the software switch's shaper counts, ``DP_WIRE_OVERHEAD`` plus the frame)."""
CONTROL_SHARE = 0.01
"""Fraction of a port left to the job's control packets (probes, STOPs, BITMAPs: a few per message)."""


def headroom(payload_bytes: int) -> float:
    """Fraction of a port's share a sender paces to, at full packets of ``payload_bytes``: what the wire
    carries beyond the paced bytes (:data:`FRAME_OVERHEAD`) and the control packets' share are left free.
    0.982 at 8 KiB payloads: a port's bottleneck is used to within 2%, and never overrun by paced data."""
    if payload_bytes <= 0:
        raise ValueError(f"payload_bytes must be positive, got {payload_bytes}")
    paced = HEADER_SIZE + payload_bytes
    return (1.0 - CONTROL_SHARE) * paced / (paced + FRAME_OVERHEAD)


HEADROOM = 0.95
"""The headroom of a sender whose packet size is not known (small payloads: 1 KiB packets give 0.93)."""

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

    def next_rate(self, rate: float, loss: float, sent_at: float | None = None) -> float:
        """The rate after a message whose first pass lost the fraction ``loss`` of its packets.

        ``sent_at`` is the rate the sender had when that message began (None: ``rate``). A decrease applies
        to it, not to the rate now, and never raises the rate: messages that were under way together, at one
        rate, cut it once between them, as TCP cuts its window once per window of data. Cutting the rate now
        instead compounded: a server pulling to 128 workers at once, its messages' verdicts counting packets
        that spraying only delayed, fell to the floor in one round (docs/transport.md).
        """
        if self.congested(loss):
            factor = max(0.5, 1.0 - loss) if self.decrease_by_loss else 0.5
            base = rate if sent_at is None else sent_at
            return min(rate, max(self.min_rate, base * factor))
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


N = TypeVar("N", bound=Hashable)


def sprayed(first: N, next_ports: Callable[[N], Sequence[P]], peer: Callable[[P], N | None]) -> dict[P, float]:
    """Egress port -> the fraction of a sender's packets that crosses it, when switch ``first`` and every
    switch after it spray them evenly over ``next_ports(switch)`` (its ports on shortest paths to the
    receiver) and ``peer(port)`` is the switch a port leads to (None: the receiver, or a host).

    Per-packet spraying splits a sender's data at every switch with several equal-cost next hops: on a
    2-leaf, 2-spine fabric half of it crosses each spine, so two senders crossing the spines in one direction
    load each spine port as one sender would, and each may send at the port's full rate.
    """
    out: dict[P, float] = {}

    def walk(node: N, weight: float) -> None:
        ports = next_ports(node)
        for port in ports:
            share = weight / len(ports)
            out[port] = out.get(port, 0.0) + share
            nxt = peer(port)
            if nxt is not None:
                walk(nxt, share)

    walk(first, 1.0)
    return out


def shared_rates(
    pairs: Iterable[tuple[H, H]],
    hops: Callable[[H, H], Mapping[P, float] | Iterable[P]],
    port_rate: Callable[[P], float | None],
    headroom: float = HEADROOM,
) -> dict[H, int]:
    """Sender -> the rate it is paced to: ``headroom`` of its smallest share of a port its data crosses.

    ``pairs`` are the (sender, receiver) pairs that carry data, ``hops(src, dst)`` the egress ports a
    packet between them may take: a mapping to the fraction of the pair's packets that crosses each
    (:func:`sprayed`), or the ports alone (each crossed by all of them, as on a single path); ``port_rate``
    a port's rate (None: not a bottleneck, not counted). A port's load is the sum over the distinct senders
    whose data may meet there of the largest fraction each puts there, and its share is its rate over that
    load: every sender may land there at once, and the switches' thresholds are sized for that
    (``dlcp.controller.selective_drop``). On a single path the load is the number of senders; sprayed over
    two spines, two senders load each spine port by one. A sender crossing no counted port is absent
    (unpaced). Rates in the unit of ``port_rate``.
    """
    paths: dict[tuple[H, H], dict[P, float]] = {}
    for pair in dict.fromkeys(pairs):
        through = hops(*pair)
        paths[pair] = dict(through) if isinstance(through, Mapping) else dict.fromkeys(through, 1.0)
    load: dict[P, dict[H, float]] = {}
    for (src, _), through in paths.items():
        for hop, fraction in through.items():
            by_sender = load.setdefault(hop, {})
            by_sender[src] = max(by_sender.get(src, 0.0), fraction)
    rates: dict[H, float] = {}
    for (src, _), through in paths.items():
        for hop in through:
            rate = port_rate(hop)
            if rate is not None:
                share = rate / sum(load[hop].values())
                rates[src] = min(rates.get(src, share), share)
    return {h: max(1, int(r * headroom)) for h, r in rates.items()}


def active_rates(
    active: Iterable[tuple[int, int]],
    paths: Mapping[tuple[int, int], Mapping[P, float]],
    port_rate: Callable[[P], float | None],
    headroom: float = HEADROOM,
) -> dict[tuple[int, int], int]:
    """(sender, receiver) -> the rate that pair is paced to now: ``headroom`` of its smallest share of a port
    its data crosses, counting at each port only the pairs ``active`` now.

    :func:`shared_rates` counts every sender that may ever meet at a port, so a sender idle for most of a job
    still halves or quarters the others' shares: a parameter-server worker pushes at a quarter of a server's
    port while only one of the servers is busy, and an incast's 6 senders of 15 possible each send at a
    fifteenth. Here only the pairs with a message in flight count, and each pair gets its own rate (a sender
    paces each receiver separately, and its own line caps the sum). ``paths[pair]`` maps each egress port the
    pair's packets may cross to the fraction of them crossing it (:func:`sprayed`); a port's load is the sum
    of those fractions over the active pairs (a sender sending to several receivers at once counts once per
    receiver: each pair is paced on its own), added in ascending pair order (the simulator adds in the same
    order, so both give the same bits: ``simulations/cpp/active_shares.h``). The pairs' rates times their
    fractions then add up to at most the port's rate. An active pair crossing no counted port is absent
    (unpaced). Rates in the unit of ``port_rate``.
    """
    pairs = sorted(dict.fromkeys(active))
    load: dict[P, float] = {}
    for pair in pairs:
        for hop, fraction in paths[pair].items():
            load[hop] = load.get(hop, 0) + fraction
    rates: dict[tuple[int, int], int] = {}
    for pair in pairs:
        shares = [rate / load[hop] for hop in paths[pair] if (rate := port_rate(hop)) is not None]
        if shares:
            rates[pair] = max(1, int(min(shares) * headroom))
    return rates
