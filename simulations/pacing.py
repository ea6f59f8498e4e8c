"""Host pacing in the simulator: each DLCP sender starts at its share of the fabric, as on the testbed.

The testbed's controller paces every host of a job at its smallest share of a port its data crosses,
less the wire's overheads (:func:`dlcp.rate_control.headroom`; :mod:`dlcp.controller.pacing`); the
share is computed by the core
(:func:`dlcp.rate_control.shared_rates`), and this module hands it the simulated fabric: the data
pairs of the run's DLCP traffic (jobs' pushes and pulls or ring steps, DLCP messages) and every switch
egress port on their shortest paths with the fraction of the pair's packets that spraying puts there
(:func:`dlcp.rate_control.sprayed`), at that port's rate. Host NICs are not counted (a host's own
line is its ceiling anyway), as the controller counts only switch ports.

With ``host_pacing = "active"`` the simulator hands the same paths to its C++ mirror of
:func:`dlcp.rate_control.active_rates` (``simulations/cpp/active_shares.h``), which counts at each port only
the senders with a message in flight now; :func:`pair_paths` and :func:`port_rates` give it the fabric.
"""

from __future__ import annotations

from dlcp.rate_control import headroom, shared_rates, sprayed
from dlcp.ring_shares import chunk_weights
from dlcp.simulations.topology import Fabric
from dlcp.simulations.workloads import DLCP, RING_MODE, Job, Traffic

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


def pair_paths(
    fabric: Fabric, pairs: list[tuple[int, int]], spraying: bool = True
) -> dict[tuple[int, int], dict[Port, float]]:
    """(sender, receiver) -> the switch egress ports its packets may cross, with the fraction crossing each.

    Sprayed per packet (:func:`dlcp.rate_control.sprayed`), or, without spraying (per-flow ECMP: the
    ``dlcp_no_spray`` and ``tensor_priority`` baselines), a single path that may be any of them: the flow's
    hash may put all its packets on any one, so every port it may take carries all of them."""
    table = fabric.next_hops()
    adj = fabric.neighbours()
    out: dict[tuple[int, int], dict[Port, float]] = {}

    def peer(port: Port) -> int | None:
        return None if fabric.is_host(port[1]) else port[1]

    for src, dst in pairs:

        def next_ports(node: int, dst: int = dst) -> list[Port]:
            return [(node, nxt) for nxt in table[node][dst]]

        through = sprayed(adj[src][0], next_ports, peer)
        out[(src, dst)] = through if spraying else dict.fromkeys(through, 1.0)
    return out


def port_rates(fabric: Fabric) -> dict[Port, float]:
    """Every directed link's rate, bits/s, keyed as a switch egress port (a host's own ports included)."""
    rate: dict[Port, float] = {}
    for link in fabric.links:
        rate[(link.a, link.b)] = link.rate_bps
        rate[(link.b, link.a)] = link.rate_ba_bps or link.rate_bps
    return rate


def host_rates(fabric: Fabric, traffic: Traffic, payload_bytes: int, spraying: bool = True) -> dict[int, int]:
    """Host -> bits/s it is paced to (full packets of ``payload_bytes``); hosts that send no DLCP data are
    absent (they start at the line). Without ``spraying`` every pair counts as on a single path."""
    paths = pair_paths(fabric, data_pairs(traffic), spraying)
    return shared_rates(
        paths, lambda src, dst: paths[(src, dst)], port_rates(fabric).__getitem__, headroom(payload_bytes)
    )


def ring_weights(fabric: Fabric, job: Job, payload_bytes: int, line_bps: float, spraying: bool = True) -> list[float]:
    """A DLCP ring job's chunk fractions by its hops' rates (:func:`dlcp.ring_shares.chunk_weights`), as the
    testbed's hosts cut them from the rates the controller writes into their job file: worker ``w``'s hop runs
    at its share of the fabric counting this job's data alone (:func:`host_rates`), or its line where no shaped
    port limits it; whichever pacing the run applies. Empty (even chunks) where the rates are even, or for any
    other job."""
    if job.transport != DLCP or job.mode != RING_MODE or len(job.workers) < 3:
        return []
    rates = host_rates(fabric, Traffic(jobs=[job]), payload_bytes, spraying)
    hops = [float(rates.get(w, line_bps)) for w in job.workers]
    if min(hops) == max(hops):
        return []
    return list(chunk_weights(hops))
