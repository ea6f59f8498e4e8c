"""Configuration of the software switch: dataclasses, TOML loading, and the value parsers the CLI shares.

A TOML file (``dlcp switch run --config FILE``) looks like::

    device_id = 1
    grpc = "127.0.0.1:9559"    # optional: the P4Runtime server
    buffer = "4MiB"            # default egress buffer of every port
    seed = 7                   # random loss draws (0: fixed default seed)

    [[port]]
    id = 1
    interface = "dlcpS1"
    rate = "1gbit"             # token-bucket shaper; absent: as fast as the kernel takes frames
    delay = "100us"            # fixed added delay
    loss = 0.01                # random loss, every class; or a table by class: {3 = 0.05}

Every value is checked here, before anything starts; an error names the setting, the value and the
valid range (:class:`ConfigError`, a ``ValueError``: exit code 2 from the CLI).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlcp import switch_limits as limits
from dlcp import units
from dlcp.protocol import NUM_PRIORITY_CLASSES
from dlcp.tomlfile import TomlFileError, read_toml

# Limits and defaults live in the core, where the CLI reads them too.
MAX_PORT = limits.MAX_PORT
MIN_RATE_BPS = limits.MIN_RATE_BPS
MAX_RATE_BPS = limits.MAX_RATE_BPS
MIN_BUFFER = limits.MIN_BUFFER
MAX_BUFFER = limits.MAX_BUFFER
DEFAULT_BUFFER = limits.DEFAULT_BUFFER
MAX_DELAY_NS = limits.MAX_DELAY_NS
DEFAULT_MAX_FRAME = limits.DEFAULT_MAX_FRAME
MAX_MAX_FRAME = limits.MAX_MAX_FRAME
DEFAULT_BURST_S = limits.DEFAULT_BURST_S
DEFAULT_RX_BLOCK = limits.DEFAULT_RX_BLOCK
DEFAULT_RX_BLOCKS = limits.DEFAULT_RX_BLOCKS
DEFAULT_STATS_DIR = limits.DEFAULT_STATS_DIR


class ConfigError(ValueError):
    """A setting is out of range or malformed; the message names it."""


def _number(x: float) -> str:
    """A bound as a user types it: whole numbers in full (``268435456``, not ``2.68435e+08``)."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _check(value: float, lo: float, hi: float, what: str, shown: str) -> None:
    if not lo <= value <= hi:
        raise ConfigError(f"{what}: {shown} is out of range {_number(lo)}..{_number(hi)}")


def _quantity(parse: Callable[[object, str], int], value: object, what: str) -> int:
    """A quantity read by :mod:`dlcp.units` (the one reader of units), its errors as :class:`ConfigError`."""
    try:
        return parse(value, what)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def parse_rate(text: object, what: str = "rate") -> int:
    """Bits per second: ``1gbit``, ``100mbit``, ``2.5gbit`` or a number of bit/s."""
    bps = _quantity(units.parse_rate, text, what)
    _check(bps, MIN_RATE_BPS, MAX_RATE_BPS, what, f"{text} ({_number(bps)} bit/s)")
    return bps


def parse_delay(text: object, what: str = "delay") -> int:
    """Nanoseconds: ``100us``, ``1.5ms``, ``0``; a bare number is in seconds."""
    ns = _quantity(units.parse_duration, text, what)
    _check(ns, 0, MAX_DELAY_NS, what, f"{text} ({_number(ns)} ns)")
    return ns


def parse_size(text: object, what: str = "buffer", lo: int = MIN_BUFFER, hi: int = MAX_BUFFER) -> int:
    """Bytes: ``4MiB``, ``256KiB``, ``1mb`` or a number of bytes."""
    n = _quantity(units.parse_size, text, what)
    _check(n, lo, hi, what, f"{text} ({_number(n)} B)")
    return n


def parse_probability(text: object, what: str = "loss") -> float:
    """A probability: ``0.01`` or ``1%``."""
    try:
        if isinstance(text, bool) or not isinstance(text, str | int | float):
            raise ValueError
        if isinstance(text, str) and text.strip().endswith("%"):
            p = float(text.strip()[:-1]) / 100
        else:
            p = float(text)
    except ValueError:
        raise ConfigError(f"{what}: cannot read {text!r} as a probability (0..1 or a percentage)") from None
    _check(p, 0.0, 1.0, what, str(text))
    return p


def parse_port(text: object, what: str = "port") -> int:
    """A port number: an integer (TOML) or its digits (the command line)."""
    if isinstance(text, str) and text.strip().isdigit():
        port = int(text)
    elif isinstance(text, int) and not isinstance(text, bool):
        port = text
    else:
        raise ConfigError(f"{what}: port {text!r} is not a number")
    _check(port, 0, MAX_PORT, what, f"port {port}")
    return port


def _integer(doc: dict[str, Any], key: str, default: int, source: str) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{source}: {key}: expected an integer, got {value!r}")
    return value


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{what}: expected a string, got {value!r}")
    return value


@dataclass(frozen=True)
class PortConfig:
    port: int
    interface: str | None
    """Interface the port is attached to; ``None``: a virtual port (tests inject and drain frames)."""
    buffer_bytes: int = DEFAULT_BUFFER
    rate_bps: int = 0
    """Token-bucket rate; 0: unlimited (as fast as the kernel takes frames)."""
    burst_bytes: int = 0
    """Bucket depth; 0: :data:`DEFAULT_BURST_S` at the rate, at least two largest frames."""
    delay_ns: int = 0
    loss: tuple[float, ...] = (0.0,) * NUM_PRIORITY_CLASSES
    """Random loss probability per class (egress queue)."""


@dataclass(frozen=True)
class SwitchConfig:
    ports: tuple[PortConfig, ...] = ()
    device_id: int = 1
    grpc: str | None = None
    """``ADDR:PORT`` of the P4Runtime server; ``None``: no server."""
    seed: int = 0
    max_frame: int = DEFAULT_MAX_FRAME
    rx_block_bytes: int = DEFAULT_RX_BLOCK
    rx_blocks: int = DEFAULT_RX_BLOCKS
    stats_dir: Path = DEFAULT_STATS_DIR

    def port(self, port: int) -> PortConfig:
        for p in self.ports:
            if p.port == port:
                return p
        raise KeyError(port)

    def validate(self) -> SwitchConfig:
        """Checks what single values cannot: duplicates and cross-field limits. Returns self."""
        seen: dict[int, str | None] = {}
        ifaces: dict[str, int] = {}
        for p in self.ports:
            if p.port in seen:
                raise ConfigError(f"port {p.port} is given twice")
            seen[p.port] = p.interface
            if p.interface is not None:
                if p.interface in ifaces:
                    raise ConfigError(f"interface {p.interface} is given for ports {ifaces[p.interface]} and {p.port}")
                ifaces[p.interface] = p.port
            _check(p.port, 0, MAX_PORT, "port", f"port {p.port}")
            if p.buffer_bytes < self.max_frame:
                raise ConfigError(
                    f"buffer of port {p.port}: {p.buffer_bytes} B cannot hold one largest frame ({self.max_frame} B)"
                )
            if len(p.loss) != NUM_PRIORITY_CLASSES:
                raise ConfigError(f"loss of port {p.port}: needs {NUM_PRIORITY_CLASSES} classes")
        _check(self.device_id, 1, (1 << 64) - 1, "device_id", str(self.device_id))
        _check(self.seed, 0, (1 << 64) - 1, "seed", str(self.seed))
        _check(self.max_frame, 64, MAX_MAX_FRAME, "max_frame", str(self.max_frame))
        if self.rx_block_bytes & (self.rx_block_bytes - 1) or self.rx_block_bytes < 2 * self.max_frame:
            raise ConfigError(
                f"rx_block_bytes: {self.rx_block_bytes} must be a power of two of at least twice max_frame"
            )
        _check(self.rx_blocks, 2, 1024, "rx_blocks", str(self.rx_blocks))
        if self.grpc is not None:
            parse_address(self.grpc, "grpc")
        return self


def parse_address(text: str, what: str = "grpc") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{what}: {text!r} is not ADDR:PORT (port 0..65535)")
    return host.strip("[]"), int(port)


def burst_for(rate_bps: int, max_frame: int) -> int:
    return max(int(rate_bps * DEFAULT_BURST_S / 8), 2 * max_frame)


def _loss(value: Any, what: str) -> tuple[float, ...]:
    if isinstance(value, dict):
        out = [0.0] * NUM_PRIORITY_CLASSES
        for k, v in value.items():
            try:
                c = int(k)
            except ValueError:
                raise ConfigError(f"{what}: class {k!r} is not a number") from None
            _check(c, 0, NUM_PRIORITY_CLASSES - 1, what, f"class {c}")
            out[c] = parse_probability(v, f"{what} class {c}")
        return tuple(out)
    return (parse_probability(value, what),) * NUM_PRIORITY_CLASSES


def from_dict(doc: dict[str, Any], source: str = "config") -> SwitchConfig:
    """A :class:`SwitchConfig` from parsed TOML; unknown keys and values of the wrong type are refused."""
    known = {"device_id", "grpc", "buffer", "seed", "max_frame", "rx_block_bytes", "rx_blocks", "stats_dir", "port"}
    unknown = set(doc) - known
    if unknown:
        raise ConfigError(f"{source}: unknown settings {sorted(unknown)} (known: {sorted(known)})")
    default_buffer = parse_size(doc["buffer"], f"{source}: buffer") if "buffer" in doc else DEFAULT_BUFFER
    ports = []
    port_keys = {"id", "interface", "rate", "burst", "buffer", "delay", "loss"}
    port_list = doc.get("port", [])
    if not isinstance(port_list, list):
        raise ConfigError(f"{source}: port: expected [[port]] tables, got {port_list!r}")
    for i, p in enumerate(port_list):
        where = f"{source}: port[{i}]"
        if not isinstance(p, dict) or "id" not in p or "interface" not in p:
            raise ConfigError(f"{where}: needs id and interface")
        unknown = set(p) - port_keys
        if unknown:
            raise ConfigError(f"{where}: unknown settings {sorted(unknown)} (known: {sorted(port_keys)})")
        rate = parse_rate(p["rate"], f"{where}.rate") if "rate" in p else 0
        ports.append(
            PortConfig(
                port=parse_port(p["id"], f"{where}.id"),
                interface=_text(p["interface"], f"{where}.interface"),
                buffer_bytes=parse_size(p["buffer"], f"{where}.buffer") if "buffer" in p else default_buffer,
                rate_bps=rate,
                burst_bytes=parse_size(p["burst"], f"{where}.burst", 64, MAX_BUFFER) if "burst" in p else 0,
                delay_ns=parse_delay(p["delay"], f"{where}.delay") if "delay" in p else 0,
                loss=_loss(p["loss"], f"{where}.loss") if "loss" in p else (0.0,) * NUM_PRIORITY_CLASSES,
            )
        )
    cfg = SwitchConfig(
        ports=tuple(ports),
        device_id=_integer(doc, "device_id", 1, source),
        grpc=_text(doc["grpc"], f"{source}: grpc") if "grpc" in doc else None,
        seed=_integer(doc, "seed", 0, source),
        max_frame=_integer(doc, "max_frame", DEFAULT_MAX_FRAME, source),
        rx_block_bytes=_integer(doc, "rx_block_bytes", DEFAULT_RX_BLOCK, source),
        rx_blocks=_integer(doc, "rx_blocks", DEFAULT_RX_BLOCKS, source),
        stats_dir=Path(_text(doc["stats_dir"], f"{source}: stats_dir")) if "stats_dir" in doc else DEFAULT_STATS_DIR,
    )
    try:
        return cfg.validate()
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def load(path: Path) -> SwitchConfig:
    try:
        doc = read_toml(path)
    except TomlFileError as exc:
        raise ConfigError(f"--config {path}: {exc.reason}") from None
    return from_dict(doc, str(path))
