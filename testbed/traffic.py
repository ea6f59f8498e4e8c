"""Background traffic between the hosts of a running fabric: datacenter flow sizes at a set load, and incast.

Flows arrive as a Poisson process whose rate puts ``load`` times the bottleneck's
rate (the slowest host link) on the fabric; each flow goes between two random
hosts, over TCP or UDP (``udp_share``), with a size drawn from one of the
data-center flow-size distributions of :mod:`dlcp.flow_sizes` (``web-search``,
DCTCP's; ``data-mining``, VL2's), the tables the simulator draws from too.

Sizes are capped at :data:`MAX_FLOW_BYTES` (the testbed's links are emulated
by one machine; the cap is reported). Incast: every :data:`INCAST_PERIOD_S`,
``incast`` senders each send ``incast_bytes`` (:data:`INCAST_BYTES` by default) over UDP at once to one of the
job's parameter servers, the pattern that fills a server's port.

Everything runs in one process: sockets are opened inside the hosts'
namespaces (they stay there) and driven by one asyncio loop. A run is bounded
in time (``duration_s``) and in flows (``flows``); nothing is sent outside the
fabric's namespaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import signal
import socket
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from dlcp import flow_sizes
from dlcp.entry import module_argv
from dlcp.testbed import layout
from dlcp.testbed.probe import inside
from dlcp.testbed.spec import INCAST_BYTES as INCAST_BYTES
from dlcp.testbed.spec import TestbedSpec, TrafficSettings
from dlcp.testbed.spec import load as load_spec

log = logging.getLogger(__name__)

MAX_FLOW_BYTES = 4_000_000
TCP_PORT = 5201
UDP_PORT = 5202
UDP_PAYLOAD = 1400
INCAST_PERIOD_S = 0.05
UDP_FLOW_RATE_SHARE = 0.5
"""A UDP flow is paced at this share of the bottleneck's rate."""


class FlowSizes:
    """Draws flow sizes from one of :mod:`dlcp.flow_sizes`' distributions, capped at :data:`MAX_FLOW_BYTES`."""

    def __init__(self, name: str) -> None:
        self.name = flow_sizes.canonical(name)

    def draw(self, rng: random.Random) -> int:
        return int(flow_sizes.sizes(self.name, rng.random(), MAX_FLOW_BYTES)[0])

    def mean(self) -> float:
        return flow_sizes.mean(self.name, MAX_FLOW_BYTES)


@dataclass
class TrafficReport:
    flows_started: int = 0
    flows_done: int = 0
    bytes_sent: int = 0
    incast_bursts: int = 0
    incast_bytes: int = 0
    errors: int = 0
    fct_s: dict[str, list[float]] = field(default_factory=lambda: {"tcp": [], "udp": []})
    sizes: dict[str, list[int]] = field(default_factory=lambda: {"tcp": [], "udp": []})
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: getattr(self, k)
            for k in ("flows_started", "flows_done", "bytes_sent", "incast_bursts", "incast_bytes", "errors")
        }
        out["seconds"] = self.seconds
        out["offered_gbit_s"] = (self.bytes_sent + self.incast_bytes) * 8 / max(self.seconds, 1e-9) / 1e9
        for proto in ("tcp", "udp"):
            f = self.fct_s[proto]
            out[f"{proto}_flows"] = len(f)
            if f:
                out[f"{proto}_fct_p50_ms"] = float(np.percentile(f, 50) * 1e3)
                out[f"{proto}_fct_p99_ms"] = float(np.percentile(f, 99) * 1e3)
        return out


def bottleneck_bps(spec: TestbedSpec) -> int:
    """The slowest host link's rate (unshaped links count as 10 Gbit/s)."""
    rates = []
    for link in spec.fabric.links.values():
        if any(p is None for _, p in link.ends):
            rates.append(link.rate_bps or 10_000_000_000)
    return min(rates) if rates else 10_000_000_000


def incast_targets(spec: TestbedSpec) -> list[str]:
    servers = [s for job in spec.fabric.jobs.values() for s in job.servers]
    return servers or [next(iter(spec.fabric.hosts))]


class Generator:
    def __init__(self, spec: TestbedSpec, settings: TrafficSettings) -> None:
        self.spec = spec
        self.s = settings
        self.rng = random.Random(settings.seed)
        self.sizes = FlowSizes(settings.cdf)
        self.hosts = list(spec.fabric.hosts)
        if len(self.hosts) < 2:
            raise ValueError("background traffic needs at least two hosts")
        self.rate = bottleneck_bps(spec)
        self.report = TrafficReport()
        self._sinks: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.deadline = 0.0

    def ns(self, host: str) -> str:
        return layout.host_ns(self.spec.name, host)

    def ip(self, host: str) -> str:
        return self.spec.fabric.hosts[host].ip

    def _socket(self, host: str, kind: socket.SocketKind) -> socket.socket:
        with inside(self.ns(host)):
            s = socket.socket(socket.AF_INET, kind)
        s.setblocking(False)
        return s

    async def _serve_tcp(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(listener)
            conn.setblocking(False)
            self._spawn(self._drain_tcp(conn))

    async def _drain_tcp(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        with conn:
            while await loop.sock_recv(conn, 1 << 16):
                pass

    def _start_sinks(self) -> None:
        loop = asyncio.get_running_loop()
        for h in self.hosts:
            t = self._socket(h, socket.SOCK_STREAM)
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            t.bind((self.ip(h), TCP_PORT))
            t.listen(64)
            u = self._socket(h, socket.SOCK_DGRAM)
            u.bind((self.ip(h), UDP_PORT))
            self._sinks += [t, u]
            self._spawn(self._serve_tcp(t))
            loop.add_reader(u.fileno(), self._drain_udp, u)

    @staticmethod
    def _drain_udp(u: socket.socket) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            for _ in range(256):
                u.recv(65535)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _tcp_flow(self, src: str, dst: str, size: int) -> None:
        loop = asyncio.get_running_loop()
        s = self._socket(src, socket.SOCK_STREAM)
        start = time.monotonic()
        try:
            with s:
                await loop.sock_connect(s, (self.ip(dst), TCP_PORT))
                chunk = bytes(min(size, 1 << 16))
                left = size
                while left > 0:
                    n = min(left, len(chunk))
                    await loop.sock_sendall(s, chunk[:n])
                    left -= n
                    self.report.bytes_sent += n
            self.report.fct_s["tcp"].append(time.monotonic() - start)
            self.report.sizes["tcp"].append(size)
            self.report.flows_done += 1
        except OSError:
            self.report.errors += 1

    async def _udp_flow(self, src: str, dst: str, size: int) -> None:
        s = self._socket(src, socket.SOCK_DGRAM)
        start = time.monotonic()
        payload = bytes(UDP_PAYLOAD)
        try:
            with s:
                sent = 0
                while sent < size:
                    with contextlib.suppress(BlockingIOError):
                        s.sendto(payload, (self.ip(dst), UDP_PORT))
                        sent += UDP_PAYLOAD
                        self.report.bytes_sent += UDP_PAYLOAD
                    due = start + sent * 8 / (self.rate * UDP_FLOW_RATE_SHARE)
                    await asyncio.sleep(max(0.0, due - time.monotonic()) if sent % (16 * UDP_PAYLOAD) == 0 else 0)
            self.report.fct_s["udp"].append(time.monotonic() - start)
            self.report.sizes["udp"].append(size)
            self.report.flows_done += 1
        except OSError:
            self.report.errors += 1

    async def _incast(self) -> None:
        targets = incast_targets(self.spec)
        senders_pool = [h for h in self.hosts if h not in targets] or self.hosts
        socks = {h: self._socket(h, socket.SOCK_DGRAM) for h in senders_pool}
        payload = bytes(UDP_PAYLOAD)
        try:
            while time.monotonic() < self.deadline:
                target = self.rng.choice(targets)
                senders = [self.rng.choice(senders_pool) for _ in range(self.s.incast)]
                for h in senders:
                    for _ in range(max(1, self.s.incast_bytes // UDP_PAYLOAD)):
                        with contextlib.suppress(BlockingIOError, OSError):
                            socks[h].sendto(payload, (self.ip(target), UDP_PORT))
                            self.report.incast_bytes += UDP_PAYLOAD
                self.report.incast_bursts += 1
                await asyncio.sleep(INCAST_PERIOD_S)
        finally:
            for s in socks.values():
                s.close()

    def stop(self) -> None:
        """End the run now (SIGTERM does this too): the report still comes out."""
        self.deadline = 0.0

    async def run(self) -> TrafficReport:
        start = time.monotonic()
        self.deadline = start + self.s.duration_s
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGTERM, self.stop)
        self._start_sinks()
        if self.s.incast:
            self._spawn(self._incast())
        mean = self.sizes.mean()
        flow_rate = self.s.load * self.rate / 8 / mean if self.s.load > 0 else 0.0
        next_at = start
        try:
            while flow_rate and time.monotonic() < self.deadline and self.report.flows_started < self.s.flows:
                next_at += self.rng.expovariate(flow_rate)
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                src, dst = self.rng.sample(self.hosts, 2)
                size = self.sizes.draw(self.rng)
                proto = self._udp_flow if self.rng.random() < self.s.udp_share else self._tcp_flow
                self._spawn(proto(src, dst, size))
                self.report.flows_started += 1
            while time.monotonic() < self.deadline:
                await asyncio.sleep(min(0.1, max(0.0, self.deadline - time.monotonic())))
        finally:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            loop = asyncio.get_running_loop()
            for s in self._sinks:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(s.fileno())
                s.close()
        self.report.seconds = time.monotonic() - start
        return self.report


def run(spec: TestbedSpec, settings: TrafficSettings) -> TrafficReport:
    """Generate the traffic of ``settings`` on the running fabric ``spec`` until its duration or flow count."""
    return asyncio.run(Generator(spec, settings).run())


def argv(fabric: str | Path, duration_s: float) -> list[str]:
    """The traffic generator's command line: the fabric file's ``[testbed.traffic]`` for ``duration_s``."""
    return module_argv(__name__, str(fabric), f"{duration_s:g}")


def main(args: list[str] | None = None) -> int:
    """Generate a running fabric's background traffic; its report as one JSON line on stdout.

    Exit status 2: the arguments or the fabric file are invalid.
    """
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    given = sys.argv[1:] if args is None else args
    try:
        if len(given) != 2:
            raise ValueError(f"usage: {__name__} FABRIC DURATION_S")
        spec = load_spec(given[0])
        settings = replace(spec.settings.traffic, duration_s=float(given[1]))
    except ValueError as exc:  # SpecError too
        print(exc, file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(run(spec, settings).as_dict()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
