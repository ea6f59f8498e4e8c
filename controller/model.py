"""The fabric and its jobs, as the controller sees them once a configuration is loaded and checked.

Immutable dataclasses, built only by :mod:`dlcp.controller.fabric` (which fills in
allocated addresses and validates the whole). Everything that computes switch state
reads these; nothing re-parses TOML.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from dlcp.config import DLCPConfig
from dlcp.frames import ETH_HEADER, IPV4_HEADER, UDP_HEADER
from dlcp.protocol import HEADER_SIZE, UDP_PORT

Target = Literal["dlcp", "bmv2", "tofino"]
"""What answers P4Runtime: DLCP's software switch, BMv2 ``simple_switch_grpc``, or a Tofino switch
(Stratum or the vendor's P4Runtime server). Only how queues are configured differs."""
OnCongestion = Literal["trim", "drop"]

DLCP_FRAME_OVERHEAD = ETH_HEADER.size + IPV4_HEADER.size + UDP_HEADER.size + HEADER_SIZE
"""Bytes a DLCP data frame carries besides its payload (Ethernet, IPv4, UDP, DLCP header)."""
IP_OVERHEAD = IPV4_HEADER.size + UDP_HEADER.size + HEADER_SIZE
"""Bytes of an IP packet besides the DLCP payload: what must fit the MTU with it."""


@dataclass(frozen=True)
class LinkSpec:
    name: str
    rate_bps: int | None
    """Line rate the switch shapes the port to; ``None``: as fast as the port goes."""
    buffer_bytes: int
    """Egress buffer of the switch port(s) on this link."""
    mtu: int
    delay_ns: int = 0
    """Added delay (carried out by the software switch; the testbed reads it)."""
    loss: float = 0.0
    """Random loss probability (software switch; the testbed reads it)."""
    ends: tuple[tuple[str, int | None], ...] = ()
    """``(switch, port)`` or ``(host, None)`` for each of its two ends."""


@dataclass(frozen=True)
class SwitchSpec:
    name: str
    grpc: str
    """``HOST:PORT`` of its P4Runtime server."""
    device_id: int
    role: str
    """P4Runtime role name; ``""`` is the default role (full access)."""
    target: Target
    mac: int
    """Base MAC (48-bit integer): port ``p`` has ``mac + p``, the source MAC of what it routes out of ``p``."""
    ports: dict[int, str]
    """Port number -> link name."""
    thrift: str | None = None
    """BMv2's Thrift ``HOST:PORT``, where the controller sets queue depths and rates."""
    p4blob: str | None = None
    """Target-specific program (BMv2 JSON) pushed with the P4Info; the software switch needs none."""

    def port_mac(self, port: int) -> int:
        return self.mac + port


@dataclass(frozen=True)
class HostSpec:
    name: str
    ip: str
    mac: int
    switch: str
    port: int


@dataclass(frozen=True)
class JobSwitchConfig:
    """What a job asks of the switches (``[job.switch]``)."""

    features: bool = True
    """False: no DLCP entries for this job (one queue, no selective drop, 5-tuple ECMP);
    its UDP port must then differ from the default DLCP port, which the P4 program always recognises."""
    on_congestion: OnCongestion = "trim"
    """What an eligible packet above its threshold becomes: a trimmed header (NDP-style) or nothing."""
    thresholds: dict[int, int] = field(default_factory=dict)
    """Drop class -> queue occupancy (packets) above which it is trimmed or dropped; absent classes
    are sized from the buffers and the incast (:mod:`dlcp.controller.selective_drop`)."""
    burst_packets: int = 4
    """Packets each sender may land in a queue at once: the headroom kept above the thresholds."""


@dataclass(frozen=True)
class JobSpec:
    id: int
    name: str
    mode: Literal["ps", "ring"]
    workers: tuple[str, ...]
    """Hosts running one rank each, in rank order (servers first)."""
    servers: tuple[str, ...]
    """PS mode: the workers that also serve a parameter shard (ranks 0..len-1), as the host stack runs them."""
    token: int | None
    """The job's token, for the testbed to hand the rendezvous (switches do not match on it)."""
    host: DLCPConfig
    """The host-side configuration (job, policy, transport, limits): the same one the workers read."""
    switch: JobSwitchConfig

    @property
    def udp_port(self) -> int:
        return self.host.transport.port

    @property
    def needs_port_entry(self) -> bool:
        """The P4 program recognises the default port itself; any other needs a ``dlcp_ports`` entry."""
        return self.udp_port != UDP_PORT

    @property
    def frame_bytes(self) -> int:
        """Size of one full DLCP data frame of this job."""
        return self.host.transport.payload_bytes + DLCP_FRAME_OVERHEAD

    def pairs(self) -> list[tuple[str, str]]:
        """(sender, receiver) host pairs that exchange data: PS pushes and pulls, ring neighbours both ways
        (data goes forward, acknowledgements back)."""
        out: set[tuple[str, str]] = set()
        if self.mode == "ps":
            for s in self.servers:
                for w in self.workers:
                    if w != s:
                        out |= {(w, s), (s, w)}
        else:
            n = len(self.workers)
            for i, a in enumerate(self.workers):
                b = self.workers[(i + 1) % n]
                if a != b:
                    out |= {(a, b), (b, a)}
        return sorted(out)


@dataclass(frozen=True)
class Fabric:
    switches: dict[str, SwitchSpec]
    hosts: dict[str, HostSpec]
    links: dict[str, LinkSpec]
    jobs: dict[int, JobSpec]
    source: str = "<config>"
    down: frozenset[str] = frozenset()
    """Links known to be down: paths (and so routes and ECMP groups) avoid them (:meth:`with_links_down`)."""

    def link_of(self, switch: str, port: int) -> LinkSpec:
        return self.links[self.switches[switch].ports[port]]

    def peer(self, switch: str, port: int) -> tuple[str, int | None]:
        """What is at the other end of ``switch:port``: ``(switch, port)`` or ``(host, None)``."""
        link = self.link_of(switch, port)
        for end in link.ends:
            if end != (switch, port):
                return end
        raise KeyError(f"{switch}:{port}: link {link.name} has one end")

    def gateway_mac(self, host: str) -> int:
        """The MAC a host sends to: its switch port's."""
        h = self.hosts[host]
        return self.switches[h.switch].port_mac(h.port)

    def without_job(self, job_id: int) -> Fabric:
        return Fabric(
            self.switches, self.hosts, self.links, {k: v for k, v in self.jobs.items() if k != job_id}, self.source,
            self.down,
        )  # fmt: skip

    def with_links_down(self, names: Iterable[str]) -> Fabric:
        """The fabric with links ``names`` known to be down (a :class:`KeyError` names one it does not have)."""
        names = frozenset(names)
        unknown = sorted(names - set(self.links))
        if unknown:
            raise KeyError(f"no link {', '.join(unknown)} in {self.source} (links: {', '.join(self.links)})")
        return replace(self, down=self.down | names)


def mac_text(mac: int) -> str:
    return ":".join(f"{b:02x}" for b in mac.to_bytes(6, "big"))
