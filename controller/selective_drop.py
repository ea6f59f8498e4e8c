"""Selective-drop control (``p4src/common/selective_drop.p4``): ``dlcp_drop_thresholds`` per switch.

The table is keyed by (queue, drop class), per switch: not per port and not per job.
A threshold is a queue occupancy in packets above which a drop-eligible packet of
that class is trimmed (or dropped). It is sized so that, once the eligible packets
are cut, the queue still has room for the packets that may not be cut (drop class 0,
control, retransmissions) from every sender that can meet in it:

    top(port) = (buffer(port) // frame - fan_in(port) * burst_packets) // eligible_queues

where ``fan_in`` is how many of the job's senders can reach that egress port
(:meth:`dlcp.controller.paths.Paths.fan_in`): in PS mode all the workers at a
server's port (the incast), in ring mode the two neighbours (data one way, control
the other). The port's buffer is shared by its queues while the thresholds are per
queue, so the room above the headroom is divided among the job's drop-eligible
queues: the eligible packets are cut before the shared buffer overflows, whichever
of its queues they fill. The switch's top threshold
for the job is the smallest over the ports its traffic leaves by, at least 1; drop
class ``d`` gets ``top * (4 - d) // 3`` (class 3, the smallest gradients, first).
A job may fix any class instead (``[job.switch] thresholds``; checked against the
buffers when the file is loaded). Jobs sharing a switch share its thresholds: each
(queue, class) takes the smallest any job asks for.
"""

from __future__ import annotations

import finsy as fy

from dlcp.controller.entries import Entry, job_owner
from dlcp.controller.model import Fabric, JobSpec
from dlcp.controller.modes import eligible_queues
from dlcp.controller.paths import Paths
from dlcp.p4 import names
from dlcp.protocol import NUM_DROP_CLASSES


def job_thresholds(fabric: Fabric, paths: Paths, job: JobSpec, switch: str) -> dict[int, int]:
    """Drop class -> threshold (packets) for ``job`` on ``switch``; empty if its traffic does not pass there."""
    fan = paths.fan_in(job.pairs())
    queues = max(1, len(eligible_queues(job)))
    tops = []
    for (sw, port), senders in fan.items():
        if sw == switch:
            capacity = fabric.link_of(sw, port).buffer_bytes // job.frame_bytes
            tops.append((capacity - senders * job.switch.burst_packets) // queues)
    if not tops:
        return {}
    top = max(1, min(tops))
    classes = {dc for dcs in eligible_queues(job).values() for dc in dcs}
    return {
        dc: job.switch.thresholds.get(dc, max(1, top * (NUM_DROP_CLASSES - dc) // (NUM_DROP_CLASSES - 1)))
        for dc in sorted(classes)
    }


def entries(fabric: Fabric, paths: Paths, switch: str) -> list[Entry]:
    merged: dict[tuple[int, int], tuple[int, str, list[int]]] = {}
    for job in sorted(fabric.jobs.values(), key=lambda j: j.id):
        if not job.switch.features:
            continue
        thresholds = job_thresholds(fabric, paths, job, switch)
        if not thresholds:
            continue
        for queue, dcs in eligible_queues(job).items():
            for dc in dcs:
                value = thresholds[dc]
                old = merged.get((queue, dc))
                if old is None:
                    merged[(queue, dc)] = (value, job.switch.on_congestion, [job.id])
                else:
                    merged[(queue, dc)] = (min(old[0], value), old[1], [*old[2], job.id])
    out = []
    for (queue, dc), (value, on, jobs) in sorted(merged.items()):
        action = names.TRIM_ABOVE if on == "trim" else names.DROP_ABOVE
        owner = job_owner(jobs[0]) if len(jobs) == 1 else "jobs " + ",".join(map(str, jobs))
        out.append(
            Entry(
                fy.P4TableEntry(
                    names.DLCP_DROP_THRESHOLDS,
                    match=fy.Match(queue=queue, drop_class=dc),
                    action=fy.Action(action, threshold=value),
                ),
                owner,
                f"queue {queue} drop class {dc}: {on} above {value} packets",
            )
        )
    return out
