"""A running software switch: the data plane, its statistics socket and (optionally) the P4Runtime server.

:class:`SwitchService` starts them in order and stops them in reverse, on any
error too. It starts with empty tables and waits for a controller, as a real
switch does. ``dlcp switch run`` is a thin wrapper that also turns SIGINT and
SIGTERM into :meth:`SwitchService.stop`.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import socket
import threading
import time
from types import TracebackType
from typing import Any, Protocol

from dlcp.testbed.switch import stats
from dlcp.testbed.switch.config import ConfigError, SwitchConfig, parse_address
from dlcp.testbed.switch.dataplane import DataPlane

log = logging.getLogger(__name__)


class _Server(Protocol):
    port: int

    def stop(self) -> Any: ...


def check_interfaces(cfg: SwitchConfig) -> None:
    """Every port's interface exists in this namespace (else the error names the argument)."""
    for p in cfg.ports:
        if p.interface is None:
            continue
        try:
            socket.if_nametoindex(p.interface)
        except OSError:
            raise ConfigError(f"--port {p.port}={p.interface}: no interface named {p.interface}") from None


_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
"""glibc's mallopt() parameters (malloc.h)."""


def _bound_allocator() -> None:
    """Keep the switch process's resident memory at what it uses, whatever size of request it is sent.

    The P4Runtime server takes requests of up to 64 MiB on up to 32 gRPC threads. By
    default glibc raises its mmap threshold to the largest block freed (up to 32 MiB), so
    after one large request, blocks of that size come from the heaps and stay resident
    once freed, one heap per thread. Fixing the threshold at 128 KiB gives every large
    block its own mapping, returned to the system when freed; two heaps serve the threads.
    The data plane allocates only at start. A no-op where the C library is not glibc.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 128 * 1024)
    mallopt(_M_ARENA_MAX, 2)


class SwitchService:
    def __init__(self, cfg: SwitchConfig) -> None:
        self.cfg = cfg.validate()
        self.dp: DataPlane | None = None
        self.grpc: _Server | None = None
        self.stats: stats.StatsServer | None = None
        self.started = 0.0
        self._stop = threading.Event()

    @property
    def stats_path(self) -> Any:
        return stats.socket_path(self.cfg.stats_dir, self.cfg.device_id)

    def start(self) -> SwitchService:
        stats.StatsServer(self.stats_path, self.snapshot).check_free()  # before touching any interface
        check_interfaces(self.cfg)
        try:
            self.dp = DataPlane.from_config(self.cfg)
            self.dp.start()
            self.started = time.monotonic()
            if self.cfg.grpc is not None:
                self.grpc = self._start_grpc(self.cfg.grpc)
            # last: the socket appearing tells that the switch is up
            self.stats = stats.StatsServer(self.stats_path, self.snapshot).start()
        except BaseException:
            self.close()
            raise
        ports = ", ".join(f"{p.port}={p.interface}" for p in self.cfg.ports)
        log.info("switch %d running: ports %s", self.cfg.device_id, ports)
        return self

    def _start_grpc(self, address: str) -> _Server:
        from dlcp.testbed.switch.p4rt.server import start_server

        parse_address(address, "--grpc")
        assert self.dp is not None
        _bound_allocator()
        server: _Server = start_server(self.dp, address, self.cfg.device_id)
        log.info("P4Runtime server on %s (port %d), device id %d", address, server.port, self.cfg.device_id)
        return server

    def snapshot(self) -> dict[str, Any]:
        dp = self.dp
        if dp is None:
            return {}
        st = dp.stats()
        ports = {}
        for port, cfg in dp.ports.items():
            ports[str(port)] = {
                "config": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "port"},
                "stats": st["ports"][port],
            }
        return {
            "device_id": self.cfg.device_id,
            "grpc": self.cfg.grpc,
            "grpc_port": self.grpc.port if self.grpc is not None else None,
            "uptime_s": time.monotonic() - self.started,
            "time": time.time(),
            "ports": ports,
            "counters": stats.counter_cells(dp.counters),
            # Frames the data-plane thread took more than 1 ms after they arrived (admitted at their arrival
            # time all the same), and frames whose receive time was on another clock (admitted when taken).
            "arrivals": {k: st[k] for k in ("late_frames", "late_ns_max", "untimed_frames")},
        }

    def wait(self, poll_s: float = 0.5) -> None:
        """Block until :meth:`stop` (e.g. from a signal handler)."""
        while not self._stop.wait(poll_s):
            pass

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        if self.grpc is not None:
            self.grpc.stop()
            self.grpc = None
        if self.stats is not None:
            self.stats.stop()
            self.stats = None
        if self.dp is not None:
            self.dp.close()
            self.dp = None
        log.info("switch %d stopped", self.cfg.device_id)

    def __enter__(self) -> SwitchService:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
