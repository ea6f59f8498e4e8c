"""DLCP's two traffic modes as switch queues: which egress queue each of a job's packets takes.

The host tags every data packet with a priority class from its layer (front layers
highest, :class:`dlcp.policy.Policy`) and a message kind. The switch has 8 strict-priority
queues: queue 0 (``DEFAULT_QUEUE``) carries everything that is not DLCP, the top queue
(``TRIM_QUEUE``) trimmed headers. The controller gives a job the queues in between,
split into two bands:

* ``ps``: **pulls above pushes.** Every worker waits for the aggregated parameters
  before its next iteration, while a late gradient only delays one server's sum; so
  the parameter pull takes the upper band and the gradient push the lower.
* ``ring`` (the collective, ring all-reduce): **all-gather above reduce-scatter.** The
  all-gather carries finished sums that every rank waits for to end the step (and is
  reliable by default); the reduce-scatter carries partial sums.

Within a band the layer order is kept: the job's data priority ``p`` of ``D`` classes
maps to band queue ``p * len(band) // D``. Control packets (bitmap, stop) and
retransmissions of the job go to the top queue with the trimmed headers: they are few
and each one unblocks a message. A probe goes to its data's queue instead
(:mod:`dlcp.controller.classification`; the host sends it in its data's class): it asks
what arrived of a first pass, so it must not overtake that pass. A kind whose policy tolerates loss (a loss bound and
drop-class cuts) is drop-eligible in its queues; the P4 program still never drops drop
class 0, control packets or retransmissions.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlcp.controller.model import JobSpec
from dlcp.p4.sizes import DEFAULT_QUEUE, TRIM_QUEUE
from dlcp.protocol import MessageKind

DATA_QUEUES = tuple(range(DEFAULT_QUEUE + 1, TRIM_QUEUE))
"""Queues a job's data may use: above other traffic, below trimmed headers and control."""
CONTROL_QUEUE = TRIM_QUEUE
"""A job's control packets and retransmissions share the trimmed headers' queue."""
_HALF = len(DATA_QUEUES) // 2
UPPER_BAND = DATA_QUEUES[_HALF:]
LOWER_BAND = DATA_QUEUES[:_HALF]
BANDS: dict[str, tuple[tuple[MessageKind, tuple[int, ...]], ...]] = {
    "ps": ((MessageKind.PULL, UPPER_BAND), (MessageKind.PUSH, LOWER_BAND)),
    "ring": ((MessageKind.ALL_GATHER, UPPER_BAND), (MessageKind.REDUCE_SCATTER, LOWER_BAND)),
}


@dataclass(frozen=True)
class ClassRule:
    """Data packets of ``kind`` with priority ``priority`` go to ``queue``; ``eligible``: may be dropped/trimmed."""

    kind: MessageKind
    priority: int
    queue: int
    eligible: bool


def drop_classes(job: JobSpec, kind: MessageKind) -> tuple[int, ...]:
    """The drop classes above 0 that the host gives packets of ``kind`` (one per quantile cut); empty when the
    kind may lose nothing."""
    kp = job.host.policy.kinds[kind]
    if kp.loss_bound <= 0.0 and not any(b > 0.0 for b in kp.layer_bounds.values()):
        return ()
    return tuple(range(1, len(kp.drop_quantiles) + 1))


def class_rules(job: JobSpec) -> list[ClassRule]:
    policy = job.host.policy
    d = policy.data_classes
    out = []
    for kind, band in BANDS[job.mode]:
        eligible = bool(drop_classes(job, kind))
        for p in range(d):
            out.append(ClassRule(kind, p, band[p * len(band) // d], eligible))
    return out


def eligible_queues(job: JobSpec) -> dict[int, tuple[int, ...]]:
    """Queue -> the drop classes of this job that may be dropped or trimmed in it."""
    out: dict[int, set[int]] = {}
    for rule in class_rules(job):
        if rule.eligible:
            out.setdefault(rule.queue, set()).update(drop_classes(job, rule.kind))
    return {q: tuple(sorted(dcs)) for q, dcs in sorted(out.items())}


def queues_of(job: JobSpec) -> set[int]:
    """Every queue this job's packets may take on a switch (counters are per port and queue)."""
    if not job.switch.features:
        return {DEFAULT_QUEUE}
    return {r.queue for r in class_rules(job)} | {CONTROL_QUEUE}
