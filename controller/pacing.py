"""Host pacing from the fabric: how fast each of a job's hosts may send, and in what bursts.

The switches' selective-drop thresholds (:mod:`dlcp.controller.selective_drop`) keep
room above them for ``fan_in x burst_packets`` protected packets at each port: they
assume every sender lands at most ``burst_packets`` frames at once and, between bursts,
no more than its share of the port. The hosts are told the same (the job's
``[transport] send_rate_bps`` and ``send_burst_bytes``, written into the job file the
workers read): a host's rate is its share of the narrowest switch port its data leaves
by (the port's rate over the job's data senders there, each counted by the fraction of its
packets that the switches' spraying puts there: :func:`dlcp.rate_control.sprayed`), less
what the port carries beyond the paced bytes (frame headers, preamble, gap) and a 1% share
for control packets (:func:`dlcp.rate_control.headroom`: 0.982 at 8 KiB payloads); its
burst is ``burst_packets`` datagrams. The host paces each destination at that rate on its
own (``dlcp.host.endpoint``): the rate is the smallest share over all its receivers'
paths, so no one receiver's path gets more than its share, and a PS server's pulls to
workers behind different ports go out side by side. (The host's own uplink is not a
switch port: the testbed does not shape it.)

Unpaced, a sender lets a whole message go at once: on the testbed's 200 Mbit/s, 256 KiB
bottleneck two workers pushing 2.4 MB each overflow the buffer many times over, and
every overflow costs a retransmission round (docs/results.md).

Only data counts toward the share: PS pushes and pulls, ring data to the next rank (its
acknowledgements back are a few control packets).
"""

from __future__ import annotations

from dlcp.controller.model import Fabric, JobSpec
from dlcp.controller.paths import Paths
from dlcp.protocol import HEADER_SIZE
from dlcp.rate_control import headroom, shared_rates

__all__ = ["data_pairs", "send_burst_bytes", "send_rates"]


def data_pairs(job: JobSpec) -> list[tuple[str, str]]:
    """(sender, receiver) host pairs that carry the job's data (not its acknowledgements)."""
    if job.mode == "ps":
        return job.pairs()
    n = len(job.workers)
    return sorted({(a, job.workers[(i + 1) % n]) for i, a in enumerate(job.workers) if n > 1})


def send_rates(fabric: Fabric, paths: Paths, job: JobSpec) -> dict[str, int]:
    """Host IP -> bits/s of DLCP datagrams, for every host of ``job`` whose data crosses a shaped port."""
    rates = shared_rates(
        data_pairs(job), paths.sprayed, lambda hop: fabric.link_of(*hop).rate_bps,
        headroom(job.host.transport.payload_bytes),
    )  # fmt: skip
    return {fabric.hosts[h].ip: r for h, r in sorted(rates.items())}


def send_burst_bytes(job: JobSpec) -> int:
    """The burst the thresholds leave room for: ``burst_packets`` full datagrams."""
    return job.switch.burst_packets * (job.host.transport.payload_bytes + HEADER_SIZE)
