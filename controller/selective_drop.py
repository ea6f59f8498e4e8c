"""Selective-drop control (``p4src/common/selective_drop.p4``): ``dlcp_drop_thresholds`` per switch.

The table is keyed by (queue, drop class), per switch: not per port and not per job.
A threshold is a queue occupancy in packets above which a drop-eligible packet of
that class is trimmed (or dropped). It is sized so that, once the eligible packets
are cut, the port's buffer still has room for the packets that may not be cut (drop
class 0, control, retransmissions) from every sender that can meet in it:

    top(port) = buffer(port) // frame - fan_in(port) * burst_packets

where ``fan_in`` is how many of the job's senders can reach that egress port
(:meth:`dlcp.controller.paths.Paths.fan_in`): in PS mode all the workers at a
server's port (the incast), in ring mode the two neighbours (data one way, control
the other); and ``burst_packets`` is the most a sender lands at once, which the hosts
are held to (:mod:`dlcp.controller.pacing`). The port's buffer is shared by its queues
(a packet pushes out the newest of a lower queue) while the thresholds are per queue,
so the room above the headroom would have to be divided among the eligible queues
that can fill at the same time. A job fills one at a time: its ranks run one
collective at a time, in the same order, and a rank starts the next only once the
current one is done everywhere (a PS pull follows every push of the round; a ring's
all-gather every reduce-scatter step), so the next message's gradients (in another
queue, by its layer) never meet the current one's at a port. The whole room is
therefore the queue's. (Dividing it by the job's eligible queues, as before #14,
sized a PS job on the testbed's 256 KiB bottleneck to 7 packets per queue where 23
fit, and trimmed its pushes at every burst.) Jobs that cut packets at the same port
are not divided either (as before): they share thresholds by the minimum. The
switch's top threshold for the job is the smallest over the ports its traffic leaves
by, at least 1; drop class ``d`` gets ``top * (4 - d) // 3`` (class 3, the smallest
gradients, first). A job may fix any class instead (``[job.switch] thresholds``;
checked against the buffers when the file is loaded). Jobs sharing a switch share
its thresholds: each (queue, class) takes the smallest any job asks for.
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
    tops = []
    for (sw, port), senders in paths.fan_in(job.pairs()).items():
        if sw == switch:
            capacity = fabric.link_of(sw, port).buffer_bytes // job.frame_bytes
            tops.append(capacity - senders * job.switch.burst_packets)
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
