"""Fabrics as plain data: nodes, links, and the equal-cost next hops towards every host.

Hosts are nodes ``0 .. hosts-1``; switches follow. Python computes the routing
(a breadth-first search from every host) and hands each switch its next-hop
groups; the simulator then looks them up in O(1) per packet.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


class TopologyError(ValueError):
    """The fabric is malformed (for example, some host cannot reach another)."""


@dataclass(frozen=True)
class Link:
    a: int
    b: int
    rate_bps: float
    delay_s: float
    rate_ba_bps: float = 0.0
    """The rate from ``b`` to ``a`` where it differs from ``rate_bps`` (0: the same)."""


@dataclass(frozen=True)
class Size:
    """A fabric's counts, known from its parameters before it is built (a memory estimate needs no more)."""

    hosts: int
    switches: int
    links: int

    @property
    def nodes(self) -> int:
        return self.hosts + self.switches

    def check(self) -> None:
        """The fabric has at least two hosts."""
        if self.hosts < 2:
            raise TopologyError(f"topology: needs at least 2 hosts, got {self.hosts}")


@dataclass
class Fabric:
    name: str
    hosts: int
    switches: int
    links: list[Link] = field(default_factory=list)

    @property
    def nodes(self) -> int:
        return self.hosts + self.switches

    def is_host(self, node: int) -> bool:
        return node < self.hosts

    def neighbours(self) -> list[list[int]]:
        adj: list[list[int]] = [[] for _ in range(self.nodes)]
        for link in self.links:
            adj[link.a].append(link.b)
            adj[link.b].append(link.a)
        return adj

    def check(self) -> None:
        """Every host has exactly one link and reaches every other host through switches."""
        adj = self.neighbours()
        for h in range(self.hosts):
            if len(adj[h]) != 1:
                raise TopologyError(f"topology: host {h} has {len(adj[h])} links (a host has one uplink)")
        Size(self.hosts, self.switches, len(self.links)).check()
        seen = {0}
        todo = deque([0])
        while todo:
            n = todo.popleft()
            for m in adj[n]:
                if m not in seen and (not self.is_host(m) or True):
                    seen.add(m)
                    if not self.is_host(m):
                        todo.append(m)
        cut = [h for h in range(self.hosts) if h not in seen]
        if cut:
            raise TopologyError(f"topology does not connect: hosts {cut[:8]} cannot reach host 0")

    def next_hops(self) -> list[dict[int, tuple[int, ...]]]:
        """Per node: destination host -> the neighbours on shortest paths towards it (switch nodes only)."""
        adj = self.neighbours()
        table: list[dict[int, tuple[int, ...]]] = [{} for _ in range(self.nodes)]
        for dst in range(self.hosts):
            dist = [-1] * self.nodes
            dist[dst] = 0
            todo = deque([dst])
            while todo:
                n = todo.popleft()
                for m in adj[n]:
                    # Paths never transit a host.
                    if dist[m] < 0 and (n == dst or not self.is_host(n)):
                        dist[m] = dist[n] + 1
                        todo.append(m)
            for node in range(self.hosts, self.nodes):
                if dist[node] > 0:
                    table[node][dst] = tuple(m for m in adj[node] if dist[m] == dist[node] - 1)
        return table


def _gbps(x: float) -> float:
    return x * 1e9


def star_size(hosts: int) -> Size:
    """One switch, one link per host."""
    return Size(hosts, 1, hosts)


def leaf_spine_size(leaves: int, spines: int, hosts_per_leaf: int) -> Size:
    """Each host to its leaf, each leaf to every spine."""
    return Size(leaves * hosts_per_leaf, leaves + spines, leaves * hosts_per_leaf + leaves * spines)


def fat_tree_size(k: int) -> Size:
    """The k-ary fat tree: k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 cores, k^3/4 hosts; each host
    to its edge, each edge to its pod's aggregations, each aggregation to k/2 cores."""
    if k < 2 or k % 2:
        raise TopologyError(f"topology.k must be an even number >= 2, got {k}")
    half = k // 2
    hosts = k * half * half
    return Size(hosts, 2 * k * half + half * half, hosts + 2 * k * half * half)


def star(
    hosts: int,
    rate_gbps: float,
    delay_s: float,
    down_gbps: float = 0.0,
    bottleneck_host: int = -1,
    bottleneck_gbps: float = 0.0,
) -> Fabric:
    """One switch. Hosts send at ``rate_gbps``; the switch sends to them at ``down_gbps`` (0: the same), to
    ``bottleneck_host`` at ``bottleneck_gbps``: the testbed's links, shaped at the switch's egress only."""
    f = Fabric("star", hosts, star_size(hosts).switches)
    sw = hosts
    for h in range(hosts):
        down = bottleneck_gbps if h == bottleneck_host else down_gbps
        f.links.append(Link(h, sw, _gbps(rate_gbps), delay_s, _gbps(down) if down else 0.0))
    return f


def leaf_spine(
    leaves: int, spines: int, hosts_per_leaf: int, host_gbps: float, fabric_gbps: float, delay_s: float
) -> Fabric:
    size = leaf_spine_size(leaves, spines, hosts_per_leaf)
    hosts = size.hosts
    f = Fabric("leaf_spine", hosts, size.switches)
    for h in range(hosts):
        f.links.append(Link(h, hosts + h // hosts_per_leaf, _gbps(host_gbps), delay_s))
    for leaf in range(leaves):
        for s in range(spines):
            f.links.append(Link(hosts + leaf, hosts + leaves + s, _gbps(fabric_gbps), delay_s))
    return f


def fat_tree(k: int, rate_gbps: float, delay_s: float) -> Fabric:
    """The k-ary fat tree (:func:`fat_tree_size`)."""
    size = fat_tree_size(k)
    half = k // 2
    hosts = size.hosts
    edges, aggs = k * half, k * half
    f = Fabric("fat_tree", hosts, size.switches)
    edge0, agg0, core0 = hosts, hosts + edges, hosts + edges + aggs
    rate = _gbps(rate_gbps)
    for h in range(hosts):
        f.links.append(Link(h, edge0 + h // half, rate, delay_s))
    for pod in range(k):
        for e in range(half):
            for a in range(half):
                f.links.append(Link(edge0 + pod * half + e, agg0 + pod * half + a, rate, delay_s))
        for a in range(half):
            for c in range(half):
                f.links.append(Link(agg0 + pod * half + a, core0 + a * half + c, rate, delay_s))
    return f
