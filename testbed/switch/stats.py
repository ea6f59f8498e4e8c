"""How ``dlcp switch stats`` reaches a running switch: a Unix socket named by the device id.

A running switch listens on ``<stats_dir>/switch-<device_id>.sock`` (default
``/run/dlcp/switch-1.sock``). A client connects and reads one JSON document
(the switch closes the connection after writing it): the configuration of every
port, its statistics (see :meth:`DataPlane.stats`) and the non-zero cells of the
P4 counters. Nothing is written periodically; each read is fresh.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlcp.p4 import names, sizes

log = logging.getLogger(__name__)

MAX_DOC = 64 << 20


def socket_path(stats_dir: Path, device_id: int) -> Path:
    return stats_dir / f"switch-{device_id}.sock"


def counter_cells(read: Callable[[str], tuple[Any, Any]]) -> dict[str, list[dict[str, int]]]:
    """The non-zero cells of every P4 counter as ``{port, class, packets, bytes}``."""
    out: dict[str, list[dict[str, int]]] = {}
    for name in names.COUNTERS:
        packets, nbytes = read(name)
        cells = []
        for i in [int(i) for i in packets.nonzero()[0]]:
            cells.append(
                {
                    "port": i >> sizes.CLASS_BITS,
                    "class": i & ((1 << sizes.CLASS_BITS) - 1),
                    "packets": int(packets[i]),
                    "bytes": int(nbytes[i]),
                }
            )
        out[name] = cells
    return out


class StatsServer:
    """Serves ``snapshot()`` as JSON to every client of the socket, from a thread of its own."""

    def __init__(self, path: Path, snapshot: Callable[[], dict[str, Any]]) -> None:
        self.path = path
        self._snapshot = snapshot
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def check_free(self) -> None:
        """Make the folder; refuse if a running switch serves this path; remove a socket left by one that is gone."""
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OSError(f"--stats-dir {folder}: cannot make the statistics folder: {exc.strerror or exc}") from None
        if not os.access(folder, os.W_OK | os.X_OK):
            raise OSError(f"--stats-dir {folder}: the statistics folder is not writable")
        if self.path.exists():
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(self.path))
            except OSError:
                self.path.unlink()
            else:
                raise OSError(f"a switch is already running with {self.path} (give another --device-id)")
            finally:
                probe.close()

    def start(self) -> StatsServer:
        self.check_free()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(self.path))
            os.chmod(self.path, 0o660)
            sock.listen(8)
            sock.settimeout(0.2)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="dlcp-switch-stats", daemon=True)
        self._thread.start()
        log.info("statistics on %s", self.path)
        return self

    def _serve(self) -> None:
        # This thread owns the listening socket and closes it when it ends: closed from stop() while a
        # slow snapshot still ran here, the next accept() would find it gone.
        sock = self._sock
        assert sock is not None
        with sock:
            while not self._stop.is_set():
                try:
                    conn, _ = sock.accept()
                except TimeoutError:
                    continue
                except OSError:
                    break
                with conn:
                    try:
                        conn.sendall(json.dumps(self._snapshot()).encode())
                    except Exception:
                        log.exception("statistics request failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            if self._thread.is_alive():
                log.warning("statistics thread still busy; it closes its socket when it ends")
        self._sock = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def fetch(path: Path, timeout: float = 5.0) -> dict[str, Any]:
    """One statistics document from the switch listening on ``path``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise OSError(f"no switch is running with {path} (is the device id right?)") from None
        chunks = []
        total = 0
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_DOC:
                raise OSError(f"statistics from {path} exceed {MAX_DOC} bytes")
    finally:
        sock.close()
    doc: dict[str, Any] = json.loads(b"".join(chunks))
    return doc


def render(doc: dict[str, Any], previous: dict[str, Any] | None = None) -> str:
    """A text table: per port, receive side, then per class with traffic."""
    lines = [f"device {doc.get('device_id')}  up {doc.get('uptime_s', 0):.1f} s"]
    dt = (doc.get("time", 0) - previous.get("time", 0)) if previous else 0.0
    for port, p in sorted(doc["ports"].items(), key=lambda kv: int(kv[0])):
        s = p["stats"]
        cfg = p["config"]
        shape = f"rate {cfg['rate_bps'] / 1e9:g} Gbit/s" if cfg["rate_bps"] else "rate unlimited"
        drops = ", ".join(f"{k} {v}" for k, v in s["rx_dropped"].items()) or "none"
        lines.append(
            f"port {port} ({cfg['interface']}): {shape}, buffer {cfg['buffer_bytes']} B, "
            f"high-water {s['buffer_hwm']} B; rx {s['rx']} ({s['rx_bytes']} B), ring drops {s['ring_dropped']}, "
            f"ingress drops: {drops}"
        )
        for q, c in enumerate(s["classes"]):
            if not (c["enqueued"] or c["dropped"] or c["trimmed"]):
                continue
            rate = ""
            if previous and dt > 0:
                before = previous["ports"][port]["stats"]["classes"][q]
                rate = f", {(c['sent_bytes'] - before['sent_bytes']) * 8 / dt / 1e6:.1f} Mbit/s"
            dropped = ", ".join(f"{k} {v}" for k, v in c["dropped"].items()) or "0"
            lines.append(
                f"  class {q}: enqueued {c['enqueued']}, sent {c['sent']} ({c['sent_bytes']} B{rate}), "
                f"dropped {dropped}, trimmed {c['trimmed']}, depth {c['depth']} (high-water {c['depth_hwm']} pkts, "
                f"{c['depth_bytes_hwm']} B)"
            )
    return "\n".join(lines)


def watch(path: Path, interval: float, out: Callable[[str], None], rounds: int | None = None) -> None:
    previous = None
    n = 0
    while rounds is None or n < rounds:
        doc = fetch(path)
        out(render(doc, previous) + "\n")
        previous = doc
        n += 1
        if rounds is None or n < rounds:
            time.sleep(interval)
