"""ECMP control (``p4src/v1model/ecmp.p4``): ``next_hops`` groups as one-shot action sets.

One group per distinct set of egress ports; each member is ``set_next_hop(port,
src_mac, dst_mac)`` with the switch port's MAC and the MAC of whatever is at the
other end (a host, or the neighbour switch's port). The P4 program picks a member
by hashing the 5-tuple plus an entropy field that is the DLCP ``seq ^ msg_id`` for
DLCP data (sprayed per packet) and 0 for everything else (one path per flow), so
the controller installs the same group for both.

One-shot programming (P4Runtime 9.2.3) keeps a group and its members in one
table entry, so writing, diffing and deleting a group is one update and members
need no ids of their own.
"""

from __future__ import annotations

import finsy as fy

from dlcp.controller.entries import FABRIC, Entry
from dlcp.controller.model import Fabric, mac_text
from dlcp.p4 import names

FIRST_GROUP = 1
"""Group 0 is the P4 program's 'no group' (``meta.next_hop_group`` before routing)."""


def assign(sets: dict[str, tuple[int, ...]]) -> tuple[dict[tuple[int, ...], int], dict[str, int]]:
    """Group ids for the distinct port sets (sorted, so the numbering is stable), and each host's group."""
    ids = {ports: FIRST_GROUP + i for i, ports in enumerate(sorted(set(sets.values())))}
    return ids, {host: ids[ports] for host, ports in sets.items()}


def entries(fabric: Fabric, switch: str, groups: dict[tuple[int, ...], int]) -> list[Entry]:
    sw = fabric.switches[switch]
    out = []
    for ports, group in sorted(groups.items(), key=lambda kv: kv[1]):
        members = []
        for port in ports:
            peer, peer_port = fabric.peer(switch, port)
            dst_mac = fabric.hosts[peer].mac if peer_port is None else fabric.switches[peer].port_mac(peer_port)
            members.append(1 * fy.Action(names.SET_NEXT_HOP, port=port, src_mac=sw.port_mac(port), dst_mac=dst_mac))
        peers = ", ".join(
            f"{port}->{fabric.peer(switch, port)[0]} {mac_text(fabric.switches[switch].port_mac(port))}"
            for port in ports
        )
        out.append(
            Entry(
                fy.P4TableEntry(names.NEXT_HOPS, match=fy.Match(group=group), action=fy.IndirectAction(members)),
                FABRIC,
                f"group {group}: ports {peers}",
            )
        )
    return out
