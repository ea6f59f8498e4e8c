"""Host pacing in the simulator: each DLCP sender starts at its share of the fabric, as on the testbed.

The testbed's controller paces every host of a job at its smallest share of a port its data crosses,
less the wire's overheads (:func:`dlcp.rate_control.headroom`; :mod:`dlcp.controller.pacing`); the
share is computed by the core
(:func:`dlcp.rate_control.shared_rates`), and this module hands it the simulated fabric: the data
pairs of the run's DLCP traffic (jobs' pushes and pulls or ring steps, DLCP messages) and every switch
egress port on their shortest paths with the fraction of the pair's packets that spraying puts there
(:func:`dlcp.rate_control.sprayed`), at that port's rate. Host NICs are not counted (a host's own
line is its ceiling anyway), as the controller counts only switch ports.
"""

from __future__ import annotations

from dlcp.rate_control import headroom, shared_rates, sprayed
from dlcp.simulations.topology import Fabric
from dlcp.simulations.workloads import DLCP, Traffic

Port = tuple[int, int]
"""A switch egress port: (switch node, the neighbour it sends to)."""


def data_pairs(traffic: Traffic) -> list[tuple[int, int]]:
    """(sender, receiver) host pairs that carry DLCP data in ``traffic`` (as ``controller.pacing.data_pairs``)."""
    pairs: dict[tuple[int, int], None] = {}
    for job in traffic.jobs:
        if job.transport != DLCP:
            continue
        if job.mode == 0:
            for w in job.workers:
                for s in job.servers:
                    pairs[(w, s)] = pairs[(s, w)] = None
        elif len(job.workers) > 1:
            for i, w in enumerate(job.workers):
                pairs[(w, job.workers[(i + 1) % len(job.workers)])] = None
    for m in traffic.messages:
        if m.transport == DLCP:
            pairs[(m.src, m.dst)] = None
    return list(pairs)


def host_rates(fabric: Fabric, traffic: Traffic, payload_bytes: int) -> dict[int, int]:
    """Host -> bits/s it is paced to (full packets of ``payload_bytes``); hosts that send no DLCP data are
    absent (they start at the line)."""
    table = fabric.next_hops()
    rate: dict[Port, float] = {}
    for link in fabric.links:
        rate[(link.a, link.b)] = link.rate_bps
        rate[(link.b, link.a)] = link.rate_ba_bps or link.rate_bps
    adj = fabric.neighbours()

    def fractions(src: int, dst: int) -> dict[Port, float]:
        return sprayed(
            adj[src][0],
            lambda node: [(node, nxt) for nxt in table[node][dst]],
            lambda port: None if fabric.is_host(port[1]) else port[1],
        )

    return shared_rates(data_pairs(traffic), fractions, rate.__getitem__, headroom(payload_bytes))
