"""Test support for the controller: DLCP software switches (the C data plane on virtual ports) with their
P4Runtime servers in this process, fabric files around them, and DLCP frames between their hosts."""

from __future__ import annotations

import asyncio
import tomllib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dlcp import protocol
from dlcp.controller import fabric
from dlcp.controller.model import Fabric, mac_text
from dlcp.frames import build_udp_frame
from dlcp.protocol import MessageKind, PacketType
from dlcp.testbed.switch.config import PortConfig
from dlcp.testbed.switch.dataplane import DataPlane
from dlcp.testbed.switch.entries import Op, TableEntry
from dlcp.testbed.switch.p4rt.server import P4RuntimeServer, start_server
from dlcp.wire import Header

T = TypeVar("T")


class CountingDataPlane(DataPlane):
    """The real data plane, counting the table writes that reach it."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.writes = 0

    def write_entry(self, op: Op, entry: TableEntry) -> None:
        self.writes += 1
        super().write_entry(op, entry)


@dataclass
class Switch:
    dp: CountingDataPlane
    server: P4RuntimeServer
    ports: tuple[int, ...]
    closed: bool = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def stop(self) -> None:
        if not self.closed:
            self.server.stop(0)
            self.dp.close()
            self.closed = True


@dataclass
class Switches:
    made: list[Switch] = field(default_factory=list)

    def __call__(self, ports: tuple[int, ...] = (1, 2, 3, 4), address: str = "127.0.0.1:0") -> Switch:
        dp = CountingDataPlane(virtual_clock=True)
        for p in ports:
            dp.add_port(PortConfig(port=p, interface=None, buffer_bytes=1 << 20))
        try:
            srv = start_server(dp, address, device_id=1)
        except BaseException:
            dp.close()
            raise
        sw = Switch(dp, srv, ports)
        self.made.append(sw)
        return sw


def run(coro: Awaitable[T], timeout: float = 120.0) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))  # type: ignore[arg-type]


async def until(pred: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``pred`` (generous: the machine is shared and slow)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


STAR = """
[topology]
kind = "star"
hosts = 4
host_link = {{ buffer = "1MiB" }}

[addresses]
grpc_port = {port}
"""

PS_JOB = """
[[job]]
id = 7
mode = "ps"
workers = ["h1", "h2", "h3", "h4"]
servers = ["h4"]
[job.transport]
port = 19111
"""

RING_JOB = """
[[job]]
id = 7
mode = "ring"
workers = ["h1", "h2", "h3", "h4"]
[job.transport]
port = 19111
"""

SECOND_JOB = """
[[job]]
id = 8
mode = "ring"
workers = ["h1", "h2"]
[job.transport]
port = 19200
"""


def star(sw: Switch, *jobs: str) -> Fabric:
    return fabric.from_dict(tomllib.loads(STAR.format(port=sw.server.port) + "".join(jobs)))


def dlcp_frame(
    fab: Fabric,
    src: str,
    dst: str,
    *,
    job: int = 7,
    kind: MessageKind = MessageKind.PUSH,
    priority: int = 0,
    drop_class: int = 0,
    seq: int = 0,
    ptype: PacketType = PacketType.DATA,
    payload: int = 1000,
    dport: int | None = None,
) -> bytes:
    h = Header(type=ptype, priority=priority, drop_class=drop_class, job_id=job, kind=kind, seq=seq, length=payload)
    s, d = fab.hosts[src], fab.hosts[dst]
    return build_udp_frame(
        eth_src=mac_text(s.mac),
        eth_dst=mac_text(fab.gateway_mac(src)),
        src_ip=s.ip,
        dst_ip=d.ip,
        sport=40000 + seq % 4,
        dport=fab.jobs[job].udp_port if dport is None else dport,
        payload=h.pack() + bytes(payload),
        tos=protocol.tos_for(priority, drop_class),
    )
