"""A rank's timeline: what each iteration spent where (``dlcp testbed explain`` reads it).

The threads that see an event append it: the training loop (iterations and their phases), the DDP hook's
thread (buckets), the endpoint's sending thread (a message's first pass, its pacing sleeps, probes) and its
receive thread (replies, retransmission rounds, completions). An event is a tuple whose first two fields
are its name and a ``time.monotonic()`` stamp: one clock for every process of a host, network namespaces
included, so the ranks of a testbed job line up. Appending a tuple to a list is atomic under the GIL and
costs well under a microsecond; a rank records a few dozen events per iteration. At most ``limit`` are kept
(the rest are counted), so a long run cannot grow without bound.

The events (after name and stamp):

========  =====================================================================
``iter``   forward done, backward done (the hook's futures included), step done, CPU seconds of the process
``bucket`` started, done, bytes, layer (the hook's thread; stamped when DDP handed the bucket over)
``send``   message, destination rank, bytes (a send was registered)
``pass``   message, seconds slept in the pacer during the pass (the first pass is out)
``probe``  message
``retx``   message, packets (a retransmission round, or part of one)
``stop``   message (the receiver's STOP arrived: the send is over)
``post``   message, source rank, bytes (a receive was posted)
``done``   message, elements accepted as lost (the receive completed)
``wait``   message, when the wait returned (a thread blocked on a receive)
========  =====================================================================

A message is named ``kind/round/msg_id/src`` (:func:`label`).
"""

from __future__ import annotations

import time
from typing import Any

from dlcp.message import MessageSpec

__all__ = ["DEFAULT_LIMIT", "Timeline", "front_bucket_waits", "label"]

DEFAULT_LIMIT = 1 << 18
"""Events kept per rank: about 40 MB of tuples at most, hours of the testbed's jobs."""


def label(spec: MessageSpec) -> str:
    """A message's name in the timeline: ``kind/round/msg_id/src``."""
    key = spec.key
    return f"{spec.kind.name.lower()}/{key.round}/{key.msg_id}/{key.src}"


class Timeline:
    """Events of one rank, in the order they were recorded (see the module's table)."""

    __slots__ = ("dropped", "events", "limit")

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"a timeline keeps at least 1 event, got limit={limit}")
        self.limit = limit
        self.events: list[tuple[Any, ...]] = []
        self.dropped = 0

    def add(self, name: str, *fields: Any) -> None:
        """Record ``name`` now, with ``fields``."""
        self.at(name, time.monotonic(), *fields)

    def at(self, name: str, t: float, *fields: Any) -> None:
        """Record ``name`` stamped ``t`` (a ``time.monotonic()`` reading taken earlier), with ``fields``."""
        if len(self.events) < self.limit:
            self.events.append((name, t, *fields))
        else:
            self.dropped += 1

    def as_dict(self) -> dict[str, Any]:
        """JSON data: ``{"events": [[name, t, ...], ...], "dropped": n}``."""
        return {"events": [list(e) for e in self.events], "dropped": self.dropped}


def front_bucket_waits(events: list[list[Any]] | list[tuple[Any, ...]]) -> list[tuple[float, float] | None]:
    """Per iteration (``iter`` events, in order): ``(wait, queued)``, how long it waited for its front layers'
    bucket from DDP handing the bucket over to its sum being ready (the ``bucket`` event's ``done - handed``),
    and how much of that the bucket spent queued in the hook's thread behind earlier buckets before its own
    exchange started (``started - handed``); None where the iteration has no bucket event (gloo's hook records
    none).

    An iteration's buckets are those handed over between its start and its end; its front layers' bucket is the
    one holding the front-most layer (the lowest ``layer``). DDP hands the buckets over in the order their
    gradients are ready, the last layers first, so the front layers' bucket comes last, and the next forward
    pass starts with the layers it holds.
    """
    iters = [(e[1], e[4]) for e in events if e[0] == "iter"]
    buckets = sorted((e[1], e[2], e[3], e[5]) for e in events if e[0] == "bucket")
    out: list[tuple[float, float] | None] = []
    i = 0
    for start, end in iters:
        while i < len(buckets) and buckets[i][0] < start:
            i += 1
        front: tuple[float, float, float, int] | None = None
        j = i
        while j < len(buckets) and buckets[j][0] <= end:
            if front is None or buckets[j][3] < front[3]:
                front = buckets[j]
            j += 1
        out.append(None if front is None else (front[2] - front[0], front[1] - front[0]))
    return out
