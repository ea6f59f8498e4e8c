"""Routing control (``p4src/common/routing.p4``): one ``ipv4_routes`` /32 per host, to its ECMP group.

The group (``next_hops``, :mod:`dlcp.controller.ecmp`) holds every shortest-path
next hop from this switch to the host (:class:`dlcp.controller.paths.Paths`).
Routes are the fabric's, not a job's: every host is reachable from every host,
so a job coming or going never changes them.
"""

from __future__ import annotations

import finsy as fy

from dlcp.controller.entries import FABRIC, Entry
from dlcp.controller.model import Fabric
from dlcp.controller.paths import Paths
from dlcp.p4 import names


def next_hop_sets(fabric: Fabric, paths: Paths, switch: str) -> dict[str, tuple[int, ...]]:
    """Host -> the egress ports of ``switch`` toward it (hosts it cannot reach are left out)."""
    out = {}
    for host in sorted(fabric.hosts):
        ports = paths.next_hops(switch, host)
        if ports:
            out[host] = ports
    return out


def entries(fabric: Fabric, route_groups: dict[str, int]) -> list[Entry]:
    """``ipv4_routes`` entries: host IP/32 -> ``set_next_hop_group(group)``."""
    out = []
    for host, group in sorted(route_groups.items()):
        ip = fabric.hosts[host].ip
        out.append(
            Entry(
                fy.P4TableEntry(
                    names.IPV4_ROUTES,
                    match=fy.Match(dst_addr=f"{ip}/32"),
                    action=fy.Action(names.SET_NEXT_HOP_GROUP, group=group),
                ),
                FABRIC,
                f"route {ip}/32 ({host}) -> group {group}",
            )
        )
    return out
