"""A software switch on veth pairs in a namespace of its own, with raw sockets on the host ends.

Port ``p`` is the pair ``dlcpS<p>`` (switch) -- ``dlcpH<p>`` (host), both in one
namespace (:mod:`dlcp.testbed.veth_ports`); the switch's data-plane thread runs in
this process. Used by the root tests and ``dlcp switch bench``. It composes a
namespace and the switch, so it lives in the testbed, above both.
"""

from __future__ import annotations

import time
from collections import Counter
from types import TracebackType

from dlcp.frames import ETH_HEADER
from dlcp.p4 import vectors
from dlcp.p4.vectors import Case, Frame
from dlcp.testbed.netns import Namespace
from dlcp.testbed.switch import vector_run
from dlcp.testbed.switch.config import DEFAULT_BUFFER, DEFAULT_MAX_FRAME, PortConfig
from dlcp.testbed.switch.dataplane import DataPlane
from dlcp.testbed.veth_ports import HostSockets, add_veths, host_if, switch_if

__all__ = ["VethSwitch", "host_if", "switch_if"]


class VethSwitch:
    """``with VethSwitch([1, 2]) as rig:`` a running switch; ``rig.send(port, frame)``, ``rig.receive(t)``."""

    def __init__(
        self,
        ports: list[int],
        *,
        buffer: int = DEFAULT_BUFFER,
        max_frame: int = DEFAULT_MAX_FRAME,
        start: bool = True,
        host_sockets: bool = True,
        rx_blocks: int = 16,
        rx_block_timeout_ms: int = 1,
        tag: str = "sw",
    ) -> None:
        self.port_ids = sorted(set(ports))
        self.buffer = buffer
        self.max_frame = max_frame
        self._start = start
        self._host_sockets = host_sockets
        self.rx_blocks = rx_blocks
        self.rx_block_timeout_ms = rx_block_timeout_ms
        self.ns = Namespace(tag)
        self.dp: DataPlane | None = None
        self.host: HostSockets | None = None

    def __enter__(self) -> VethSwitch:
        self.ns.__enter__()
        try:
            add_veths(self.ns, self.port_ids, mtu=max(1500, min(self.max_frame - ETH_HEADER.size, 65535)))
            self.dp = DataPlane(max_frame=self.max_frame)
            with self.ns.entered():
                for p in self.port_ids:
                    cfg = PortConfig(port=p, interface=switch_if(p), buffer_bytes=self.buffer)
                    self.dp.add_port(cfg, rx_blocks=self.rx_blocks, rx_block_timeout_ms=self.rx_block_timeout_ms)
            if self._host_sockets:
                self.host = HostSockets(self.ns, self.port_ids)
            if self._start:
                self.dp.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self.host is not None:
            self.host.close()
            self.host = None
        if self.dp is not None:
            self.dp.close()
            self.dp = None
        self.ns.close()

    @property
    def switch(self) -> DataPlane:
        if self.dp is None:
            raise RuntimeError("the rig is not open")
        return self.dp

    def send(self, port: int, frame: bytes) -> None:
        if self.host is None:
            raise RuntimeError("the rig has no host sockets (host_sockets=False)")
        self.host.send(port, frame)

    def receive(self, timeout: float, until: int | None = None) -> list[Frame]:
        """IPv4 frames out of the switch within ``timeout`` s (returns early once ``until`` came)."""
        if self.host is None:
            raise RuntimeError("the rig has no host sockets (host_sockets=False)")
        return self.host.receive(timeout, until)

    def received_by_switch(self) -> int:
        return sum(int(p["rx"]) for p in self.switch.stats()["ports"].values())

    def wait_received(self, count: int, timeout: float = 5.0) -> bool:
        """Wait until the switch has taken ``count`` frames off its rings (all ports together)."""
        deadline = time.monotonic() + timeout
        while self.received_by_switch() < count:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until no port holds a frame in a queue or on its line: all sent or dropped."""
        deadline = time.monotonic() + timeout
        while any(p["queued_bytes"] or p["inflight_bytes"] for p in self.switch.stats()["ports"].values()):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def run_case(self, case: Case) -> vector_run.VectorResult:
        """One vector case through the veths: settle packets awaited, stalled queues paused meanwhile."""
        dp = self.switch
        result = vector_run.VectorResult(case.name)
        dp.reset()
        ids = vector_run.IdAllocator()
        for e in case.entries:
            vector_run.install(dp, e, ids)
        before, _ = vector_run.counter_deltas(dp, case, None)
        self.receive(0.02)
        last_settle = max((i for i, p in enumerate(case.packets) if p.settle), default=-1)
        stall = [(p, q) for p, q in case.stalled_queues]
        if last_settle < 0:
            for p, q in stall:
                dp.pause(p, q)
        seen: list[Frame] = []
        rx0 = self.received_by_switch()
        for i, pkt in enumerate(case.packets):
            self.send(pkt.frame.port, pkt.frame.data)
            if pkt.settle:
                want = Counter(pkt.expect or ())
                deadline = time.monotonic() + 5
                while not want <= Counter(seen) and time.monotonic() < deadline:
                    seen += self.receive(0.05)
                if not want <= Counter(seen):
                    result.failures.append(f"settle packet {i} ({pkt.note}) did not come out")
                if i == last_settle:
                    for p, q in stall:
                        dp.pause(p, q)
        if not self.wait_received(rx0 + len(case.packets)):
            result.failures.append("the switch did not receive every frame sent")
        for p, q in stall:
            dp.pause(p, q, False)
        expected = sum(len(p.expect or ()) + (1 if p.expect_one_of else 0) for p in case.packets)
        seen += self.receive(5, until=expected - len(seen))
        # Frames beyond the expected ones must show too: wait until the switch has sent (or dropped) all it
        # holds, however late a loaded machine lets its thread run, then take what the veths delivered.
        if not self.wait_idle():
            result.failures.append("the switch still held frames 10 s after the last one was expected")
        seen += self.receive(0.1)
        result.failures += vectors.check_outputs(case, seen)
        _, failures = vector_run.counter_deltas(dp, case, before)
        result.failures += failures
        return result
