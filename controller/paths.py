"""Shortest paths through the fabric: next hops, reachability and the incast at each port.

Routing is shortest-path ECMP over the switch graph: a switch forwards toward a
host over every port whose neighbour is one hop closer to the host's switch.
On a star, a leaf-spine and a k-ary fat-tree this is exactly the usual up-down
routing (every uplink on the way up, the one downlink on the way down), so one
rule serves all three. Hosts never forward.
"""

from __future__ import annotations

from collections import deque
from functools import cached_property

from dlcp import rate_control
from dlcp.controller.model import Fabric

UNREACHABLE = 1 << 30


class Paths:
    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.adjacent: dict[str, list[tuple[int, str]]] = {name: [] for name in fabric.switches}
        """Switch -> (port, neighbour switch) for every switch-to-switch link that is not down."""
        for name, sw in fabric.switches.items():
            for port in sorted(sw.ports):
                if sw.ports[port] in fabric.down:
                    continue
                peer, peer_port = fabric.peer(name, port)
                if peer_port is not None:
                    self.adjacent[name].append((port, peer))

    @cached_property
    def _distances(self) -> dict[str, dict[str, int]]:
        """``dist[target][switch]``: switch hops from ``switch`` to ``target`` (BFS from each target)."""
        out: dict[str, dict[str, int]] = {}
        for target in self.fabric.switches:
            dist = {target: 0}
            todo = deque([target])
            while todo:
                here = todo.popleft()
                for _, nb in self.adjacent[here]:
                    if nb not in dist:
                        dist[nb] = dist[here] + 1
                        todo.append(nb)
            out[target] = dist
        return out

    def distance(self, switch: str, target: str) -> int:
        return self._distances[target].get(switch, UNREACHABLE)

    def next_hops(self, switch: str, host: str) -> tuple[int, ...]:
        """Egress ports of ``switch`` on a shortest path to ``host`` (empty: unreachable)."""
        h = self.fabric.hosts[host]
        if h.switch == switch:
            return (h.port,)
        d = self.distance(switch, h.switch)
        if d >= UNREACHABLE:
            return ()
        return tuple(port for port, nb in self.adjacent[switch] if self.distance(nb, h.switch) == d - 1)

    def reachable(self, src: str, dst: str) -> bool:
        return self.distance(self.fabric.hosts[src].switch, self.fabric.hosts[dst].switch) < UNREACHABLE

    def hops(self, src: str, dst: str) -> set[tuple[str, int]]:
        """Every ``(switch, egress port)`` that a packet from host ``src`` to ``dst`` may take."""
        out: set[tuple[str, int]] = set()
        todo = [self.fabric.hosts[src].switch]
        seen: set[str] = set()
        while todo:
            sw = todo.pop()
            if sw in seen:
                continue
            seen.add(sw)
            for port in self.next_hops(sw, dst):
                out.add((sw, port))
                peer, peer_port = self.fabric.peer(sw, port)
                if peer_port is not None:
                    todo.append(peer)
        return out

    def sprayed(self, src: str, dst: str) -> dict[tuple[str, int], float]:
        """``(switch, egress port)`` -> the fraction of the packets from host ``src`` to ``dst`` that cross it
        when every switch sprays them over its equal-cost next hops (:func:`dlcp.rate_control.sprayed`)."""

        def peer(hop: tuple[str, int]) -> str | None:
            nb, nb_port = self.fabric.peer(*hop)
            return nb if nb_port is not None else None

        return rate_control.sprayed(
            self.fabric.hosts[src].switch, lambda sw: [(sw, p) for p in self.next_hops(sw, dst)], peer
        )

    def fan_in(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, int], int]:
        """``(switch, port)`` -> how many distinct senders' traffic may meet in that egress port."""
        senders: dict[tuple[str, int], set[str]] = {}
        for src, dst in pairs:
            for hop in self.hops(src, dst):
                senders.setdefault(hop, set()).add(src)
        return {hop: len(s) for hop, s in senders.items()}
