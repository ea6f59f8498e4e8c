"""Where each part of a fabric lives: namespace and interface names, and each switch's port plan.

Names carry the project prefix and the fabric's name, so cleanup of one fabric
touches nothing else: the switches share one namespace ``dlcp-<fabric>-sw``
(their ports, their gRPC servers on its loopback), each host has its own,
``dlcp-<fabric>-h-<host>``, holding one interface ``dlcp0``. Switch ports are
``dlcp<i>p<port>`` (``i``: the switch's place in the file) inside the switch
namespace; interface names are local to a namespace, so fabrics never collide.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlcp.controller.model import LinkSpec
from dlcp.p4 import paths
from dlcp.testbed.netns import IFNAME_MAX, PREFIX
from dlcp.testbed.spec import TestbedSpec

HOST_IF = f"{PREFIX}0"
STATE_ROOT = Path("/run/dlcp/testbed")
BMV2_THRIFT_BASE = 9089
"""BMv2 switch i (1-based, in file order) is asked to serve Thrift on 9089 + i in the switch namespace."""


def ns_prefix(fabric: str) -> str:
    """Every namespace of fabric ``fabric`` starts with this (fabric names hold no ``-``)."""
    return f"{PREFIX}-{fabric}-"


def switch_ns(fabric: str) -> str:
    return f"{ns_prefix(fabric)}sw"


def host_ns(fabric: str, host: str) -> str:
    return f"{ns_prefix(fabric)}h-{host}"


def state_dir(fabric: str, root: Path = STATE_ROOT) -> Path:
    return root / fabric


def bmv2_build_dir(fabric: str, root: Path = STATE_ROOT) -> Path:
    """The build folder where ``up --switch bmv2`` compiles DLCP's program (p4c-bm2-ss)."""
    return state_dir(fabric, root) / "p4"


def bmv2_program(fabric: str, root: Path = STATE_ROOT) -> Path:
    """The BMv2 JSON that ``up --switch bmv2`` compiles and the controller pushes."""
    return paths.v1model_json(bmv2_build_dir(fabric, root))


def bmv2_thrift(index: int) -> str:
    """``HOST:PORT`` of BMv2 switch ``index``'s Thrift server, on the switch namespace's loopback."""
    return f"127.0.0.1:{BMV2_THRIFT_BASE + index}"


def mac_text(mac: int) -> str:
    return ":".join(f"{b:02x}" for b in mac.to_bytes(6, "big"))


@dataclass(frozen=True)
class PortPlan:
    port: int
    interface: str
    link: LinkSpec
    mac: int
    peer_host: str | None
    """The host at the other end, or None for a switch-to-switch link."""

    def switch_port(self) -> dict[str, Any]:
        """This port's ``[[port]]`` table of the switch's configuration: the link's settings, at its egress."""
        link = self.link
        table: dict[str, Any] = {"id": self.port, "interface": self.interface, "buffer": link.buffer_bytes}
        if link.rate_bps:
            table["rate"] = f"{link.rate_bps}bit"
        if link.delay_ns:
            table["delay"] = f"{link.delay_ns}ns"
        if link.loss:
            table["loss"] = link.loss
        return table


@dataclass(frozen=True)
class SwitchPlan:
    name: str
    index: int
    device_id: int
    grpc: str
    ports: tuple[PortPlan, ...]

    def switch_config(self, stats_dir: Path) -> dict[str, Any]:
        """The switch's configuration file (docs/switch.md) as a document, its statistics socket in ``stats_dir``."""
        return {
            "device_id": self.device_id, "grpc": self.grpc, "stats_dir": str(stats_dir),
            "port": [p.switch_port() for p in self.ports],
        }  # fmt: skip


def interface(index: int, port: int) -> str:
    name = f"{PREFIX}{index}p{port}"
    if len(name) > IFNAME_MAX:
        raise ValueError(f"interface name {name} is longer than {IFNAME_MAX} characters")
    return name


def plan(spec: TestbedSpec) -> list[SwitchPlan]:
    fab = spec.fabric
    out = []
    for i, sw in enumerate(fab.switches.values(), 1):
        ports = []
        for port, link_name in sorted(sw.ports.items()):
            link = fab.links[link_name]
            peer, peer_port = fab.peer(sw.name, port)
            ports.append(
                PortPlan(port, interface(i, port), link, sw.port_mac(port), peer if peer_port is None else None)
            )
        out.append(SwitchPlan(sw.name, i, sw.device_id, sw.grpc, tuple(ports)))
    return out
