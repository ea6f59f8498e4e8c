"""Job configuration: TOML loaded into validated dataclasses.

One file describes a job::

    [job]
    id = 7
    mode = "ring"          # or "ps"
    workers = 4

    [policy]
    num_classes = 8

    [policy.push]
    loss_bound = 0.01
    drop_quantiles = [0.5]
    layer_bounds = { "0" = 0.0 }   # keep the first layer lossless

    [transport]
    payload_bytes = 8192

Errors name the offending field by its dotted path (``policy.push.loss_bound``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dlcp import checks
from dlcp.limits import Limits
from dlcp.policy import KindPolicy, Policy
from dlcp.protocol import DTYPE_SIZE, HEADER_SIZE, UDP_PORT, MessageKind
from dlcp.tomlfile import TomlFileError, read_toml


class ConfigError(ValueError):
    """A configuration value is missing, of the wrong type, or out of range."""


@dataclass(frozen=True)
class JobConfig:
    id: int = 1
    name: str = "dlcp"
    mode: Literal["ring", "ps"] = "ring"
    workers: int = 2
    servers: int = 1
    """Parameter servers (``mode = "ps"``)."""

    def __post_init__(self) -> None:
        checks.in_range("id", self.id, 0, (1 << 16) - 1)
        checks.at_least("workers", self.workers, 1)
        checks.at_least("servers", self.servers, 1)


@dataclass(frozen=True)
class TransportConfig:
    port: int = UDP_PORT
    """UDP port of the first data socket; ranks use consecutive ports on one host."""
    payload_bytes: int = 8192
    """DLCP payload per packet (jumbo-frame sized by default)."""
    spray_ports: int = 4
    """Number of UDP source ports a sender sprays packets over (per-packet ECMP entropy)."""
    peer_timeout_s: float = 5.0
    """A peer silent for this long mid-collective is reported dead."""
    reorder_window: int = 0
    """Packets a receiver of a reliable message lets arrive past a gap before it asks for
    the missing packet (a NACK during the first pass); 0 (default): never, wait for the
    sender's probe. On loopback, where a round trip costs little and CPU is what is short,
    NACKing early measured slower (docs/results.md); on a fabric with long round trips
    try 64-512."""
    fast_path: bool = True
    """Receive through the C fast path (``dlcp.host._fastpath``) when it is built; false: the numpy path."""
    send_rate_bps: dict[str, int] = field(default_factory=dict)
    """Host IP -> the rate (bits/s of DLCP datagrams) that host's sends are paced to at most. On a fabric the
    controller fills it in (:mod:`dlcp.controller.pacing`): each host's share of the narrowest switch port its
    data leaves by. A host not named starts unpaced and is held back only by AIMD (loopback)."""
    send_burst_bytes: int = 0
    """Most bytes a paced sender lets go back to back (0: the pacer's default, 1 MiB). On a fabric: the
    burst the controller sized the switches' drop thresholds for (``[job.switch] burst_packets``)."""
    rx_nice: int = 0
    """The receive thread's nice value relative to the thread that opens the endpoint (Linux per-thread
    nice, -20..19; 0: inherit). Negative favours receiving over the application's threads where cores are
    scarce; it needs ``CAP_SYS_NICE`` or ``RLIMIT_NICE``, and where refused the thread keeps the inherited
    value and a warning says so (docs/transport.md §1, docs/results.md)."""

    def __post_init__(self) -> None:
        checks.in_range("port", self.port, 0, (1 << 16) - 1)
        for host, rate in self.send_rate_bps.items():
            checks.at_least(f"send_rate_bps.{host}", rate, 1)
        checks.at_least("send_burst_bytes", self.send_burst_bytes, 0)
        check_payload_bytes("payload_bytes", self.payload_bytes)
        checks.at_least("spray_ports", self.spray_ports, 1)
        checks.at_least("reorder_window", self.reorder_window, 0)
        checks.positive("peer_timeout_s", self.peer_timeout_s)
        checks.in_range("rx_nice", self.rx_nice, -20, 19)


MAX_PAYLOAD_BYTES = 65000 - HEADER_SIZE
"""Largest DLCP payload per packet: header and payload must fit one segment of the transport's
GSO batches (65000 bytes, ``MAX_GSO_BYTES`` in ``host/udp.py``); a payload of 65000 fails at the
first send."""


def check_payload_bytes(name: str, value: int) -> int:
    """A payload every element type fills exactly: a multiple of the largest element size, up to the maximum.

    (A payload that is not a multiple of the element size leaves the packets shorter
    than the segments the transport sends and receives.)
    """
    step = max(DTYPE_SIZE.values())
    return checks.multiple_in_range(name, value, step, step, MAX_PAYLOAD_BYTES, unit="bytes")


@dataclass(frozen=True)
class DLCPConfig:
    job: JobConfig = field(default_factory=JobConfig)
    policy: Policy = field(default_factory=Policy)
    limits: Limits = field(default_factory=Limits)
    transport: TransportConfig = field(default_factory=TransportConfig)


def load(path: str | Path) -> DLCPConfig:
    """Load and validate a job file."""
    p = Path(path)
    try:
        data = read_toml(p)
    except TomlFileError as exc:
        raise ConfigError(f"{p}: {exc.reason}") from None
    try:
        return from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None


def from_dict(data: dict[str, Any]) -> DLCPConfig:
    data = dict(data)
    policy_table = data.pop("policy", {})
    cfg = _build(DLCPConfig, {k: v for k, v in data.items()}, "", skip={"policy"})
    return dataclasses.replace(cfg, policy=_build_policy(policy_table))


def _build_policy(table: Any) -> Policy:
    if not isinstance(table, dict):
        raise ConfigError("policy: expected a table")
    table = dict(table)
    kinds = Policy().kinds.copy()
    for kind in MessageKind:
        name = kind.name.lower()
        if name in table:
            sub = table.pop(name)
            if not isinstance(sub, dict):
                raise ConfigError(f"policy.{name}: expected a table")
            sub = dict(sub)
            if "layer_bounds" in sub:
                sub["layer_bounds"] = _layer_bounds(sub["layer_bounds"], f"policy.{name}.layer_bounds")
            base = dataclasses.asdict(kinds[kind])
            base.update(sub)
            kinds[kind] = _build(KindPolicy, base, f"policy.{name}.")
    policy = _build(Policy, table, "policy.", skip={"kinds"})
    return dataclasses.replace(policy, kinds=kinds)


def _layer_bounds(raw: Any, path: str) -> dict[int, float]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a table of layer = bound")
    out: dict[int, float] = {}
    for k, v in raw.items():
        try:
            layer = int(k)
        except ValueError:
            raise ConfigError(f"{path}: layer key {k!r} is not an integer") from None
        out[layer] = v
    return out


def _build(cls: type, table: Any, prefix: str, skip: frozenset[str] | set[str] = frozenset()) -> Any:
    if not isinstance(table, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a table")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(table) - names
    if unknown:
        raise ConfigError(f"unknown field(s) {', '.join(prefix + u for u in sorted(unknown))}")
    kwargs: dict[str, Any] = {}
    for name, value in table.items():
        if name in skip:
            continue
        kwargs[name] = _convert(value, hints[name], prefix + name)
    try:
        return cls(**kwargs)
    except checks.BadValue as exc:
        raise ConfigError(str(exc if exc.name.startswith(prefix) else exc.renamed(prefix + exc.name))) from None
    except ValueError as exc:
        raise ConfigError(f"{prefix}{exc}" if prefix else str(exc)) from None


def _convert(value: Any, hint: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value, path + ".")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{path}: must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected an array, got {value!r}")
        return tuple(_convert(v, args[0], f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a table, got {value!r}")
        return {k: _convert(v, args[1], f"{path}.{k}") for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):
        return value
    raise ConfigError(f"{path}: unsupported field type {hint}")
