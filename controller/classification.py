"""Classification control (``p4src/common/classification.p4``): ``dlcp_ports`` and ``dlcp_classes`` per job.

* ``dlcp_ports``: the job's UDP port, when it is not the default DLCP port that the
  P4 program recognises by itself. Recognised packets are classified, may be
  dropped or trimmed, and are sprayed per packet; others take one path per flow.
* ``dlcp_classes``: the job's packets by (job id, packet type, priority, kind) to the
  queues :mod:`dlcp.controller.modes` gives them. Every entry matches the job id
  exactly, so two jobs' entries never overlap and removing a job removes only its own.

A job with ``switch.features = false`` gets neither: its traffic is plain UDP to
the switch (queue 0, no drops, one path per flow).
"""

from __future__ import annotations

import finsy as fy

from dlcp.controller.entries import Entry, job_owner
from dlcp.controller.model import JobSpec
from dlcp.controller.modes import CONTROL_QUEUE, class_rules
from dlcp.p4 import names
from dlcp.protocol import PacketType

RULE_PRIORITY = 10
"""P4Runtime priority of every ``dlcp_classes`` entry: they never overlap, so one value serves."""
_EXACT16, _EXACT8, _EXACT4 = 0xFFFF, 0xFF, 0xF


def port_entries(job: JobSpec) -> list[Entry]:
    if not job.switch.features or not job.needs_port_entry:
        return []
    return [
        Entry(
            fy.P4TableEntry(names.DLCP_PORTS, match=fy.Match(dst_port=job.udp_port), action=fy.Action(names.MARK_DLCP)),
            job_owner(job.id),
            f"UDP port {job.udp_port} is DLCP (job {job.id})",
        )
    ]


def _entry(job: JobSpec, action: str, queue: int, note: str, **match: int) -> Entry:
    widths = {"job_id": _EXACT16, "packet_type": _EXACT4, "priority": _EXACT8, "kind": _EXACT8, "drop_class": _EXACT8}
    return Entry(
        fy.P4TableEntry(
            names.DLCP_CLASSES,
            match=fy.Match({k: (v, widths[k]) for k, v in {"job_id": job.id, **match}.items()}),
            priority=RULE_PRIORITY,
            action=fy.Action(action, queue=queue),
        ),
        job_owner(job.id),
        note,
    )


def class_entries(job: JobSpec) -> list[Entry]:
    if not job.switch.features:
        return []
    out = []
    for r in class_rules(job):
        action = names.MARK_DROP_ELIGIBLE if r.eligible else names.SET_QUEUE
        what = "drop-eligible " if r.eligible else ""
        out.append(
            _entry(
                job,
                action,
                r.queue,
                f"job {job.id} {r.kind.name} priority {r.priority} -> {what}queue {r.queue}",
                packet_type=int(PacketType.DATA),
                priority=r.priority,
                kind=int(r.kind),
            )
        )
    # A probe asks what arrived once the sender's first pass is out: it must not overtake that pass. In the
    # control queue it would, whenever the data is still queued (strict priority), and the receiver would report
    # the queued packets missing and have them all sent again. The host sends it in its data's class, and it
    # takes its data's queue, behind the pass (FIFO). (In the bottom queue of its kind's band, as before #14, it
    # waited until every queue above was empty: behind another worker's push at a busy port it starved for
    # hundreds of milliseconds.) A probe in the control class (a reliable broadcast's) matches none of these and
    # takes its class's queue (the table's default), as its data does.
    for r in class_rules(job):
        out.append(
            _entry(
                job,
                names.SET_QUEUE,
                r.queue,
                f"job {job.id} {r.kind.name} PROBE priority {r.priority} -> queue {r.queue}, behind its data",
                packet_type=int(PacketType.PROBE),
                priority=r.priority,
                kind=int(r.kind),
            )
        )
    for ptype in (PacketType.BITMAP, PacketType.STOP):
        out.append(
            _entry(
                job,
                names.SET_QUEUE,
                CONTROL_QUEUE,
                f"job {job.id} {ptype.name} -> queue {CONTROL_QUEUE}",
                packet_type=int(ptype),
            )
        )
    policy = job.host.policy
    if policy.reserve_top_class:
        # Retransmissions go out in the control class, which no data rule above matches.
        out.append(
            _entry(
                job,
                names.SET_QUEUE,
                CONTROL_QUEUE,
                f"job {job.id} retransmissions (priority {policy.control_class}) -> queue {CONTROL_QUEUE}",
                packet_type=int(PacketType.DATA),
                priority=policy.control_class,
            )
        )
    return out
