"""A testbed fabric file: the controller's fabric and jobs, plus a ``[testbed]`` table, checked whole.

The fabric (switches, hosts, links, jobs) is the controller's schema
(:mod:`dlcp.controller.fabric`, docs/controller.md); the testbed reads it with the
controller's loader, so one file drives both. What only the testbed needs sits in
its own table::

    [testbed]
    name = "star"            # namespaces dlcp-star-*; default: the file's stem
    switch = "dlcp"          # or "bmv2" (simple_switch_grpc, where installed)

    [testbed.traffic]        # background traffic (dlcp testbed traffic, dlcp demo)
    load = 0.3               # of the bottleneck's rate
    cdf = "web-search"       # or "data-mining" (dlcp.flow_sizes)
    incast = 4               # senders of each incast burst toward the job's servers
    duration = "20s"

Every check runs before anything is created. Besides the controller's checks,
each link's settings must be ones the switch can carry out (rate, buffer, delay,
MTU against the software switch's limits); errors name the field
(``link.h3-s1.rate``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dlcp import flow_sizes
from dlcp import switch_limits as swcfg
from dlcp.controller import fabric as fabric_file
from dlcp.controller.model import Fabric, LinkSpec
from dlcp.tomlfile import TomlFileError, read_toml
from dlcp.units import parse_duration

SwitchKind = Literal["dlcp", "bmv2"]
SWITCH_KINDS: tuple[SwitchKind, ...] = ("dlcp", "bmv2")
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_]{0,19}")  # fullmatch only: "$" matches before a final newline
HOST_NAME_RE = re.compile(r"[A-Za-z0-9_.]{1,32}")
"""Fabric names: short (namespace names ``dlcp-<name>-<host>``), no ``-`` (it separates the parts)."""
_TESTBED_KEYS = {"name", "switch", "traffic"}
_TRAFFIC_KEYS = {"load", "cdf", "incast", "incast_bytes", "duration", "flows", "udp_share", "seed"}
INCAST_BYTES = 128_000
"""What each sender of an incast burst sends, by default."""


class SpecError(ValueError):
    """The fabric file is invalid; the message names every field at fault."""

    def __init__(self, errors: list[str], source: str = "") -> None:
        self.errors = list(errors)
        head = f"{source}: " if source else ""
        body = errors[0] if len(errors) == 1 else f"{len(errors)} errors:\n  " + "\n  ".join(errors)
        super().__init__(head + body)


@dataclass(frozen=True)
class TrafficSettings:
    """Background traffic: flows drawn from a flow-size CDF at ``load`` of the bottleneck, plus incast."""

    load: float = 0.3
    cdf: str = flow_sizes.WEB_SEARCH
    incast: int = 0
    """Senders of each incast burst toward the servers (0: no incast)."""
    incast_bytes: int = INCAST_BYTES
    """What each of them sends per burst (in whole datagrams, at least one)."""
    duration_s: float = 20.0
    flows: int = 2000
    """At most this many flows in all (the run is bounded in time and count)."""
    udp_share: float = 0.5
    """Fraction of the flows sent as UDP (the rest TCP)."""
    seed: int = 0


@dataclass(frozen=True)
class TestbedSettings:
    name: str
    switch: SwitchKind = "dlcp"
    traffic: TrafficSettings = field(default_factory=TrafficSettings)


@dataclass(frozen=True)
class TestbedSpec:
    """What ``dlcp testbed up`` builds: the checked fabric and the testbed's own settings."""

    path: Path
    fabric: Fabric
    settings: TestbedSettings

    @property
    def name(self) -> str:
        return self.settings.name


def load(path: str | Path, *, switch: SwitchKind | None = None) -> TestbedSpec:
    """Read and check a fabric file (``switch`` overrides ``testbed.switch``)."""
    p = Path(path)
    try:
        doc = read_toml(p)
    except TomlFileError as exc:
        raise SpecError([exc.reason], str(p)) from None
    return from_dict(doc, p, switch=switch)


def from_dict(doc: dict[str, Any], path: Path, *, switch: SwitchKind | None = None) -> TestbedSpec:
    doc = dict(doc)
    raw = doc.pop("testbed", {})
    errs: list[str] = []
    settings = _settings(raw, path, errs)
    if switch is not None:
        settings = TestbedSettings(settings.name, switch, settings.traffic)
    try:
        fab = fabric_file.from_dict(doc, str(path), base_dir=path.parent)
    except fabric_file.FabricError as exc:
        raise SpecError(errs + exc.errors, str(path)) from None
    errs += switch_limits(fab)
    if settings.switch == "bmv2":
        errs += bmv2_limits(fab)
    errs += [
        f"host.{h}.name: {h!r} must be 1-32 of A-Z, a-z, 0-9, _ and . (it names the host's namespace)"
        for h in fab.hosts
        if not HOST_NAME_RE.fullmatch(h)
    ]
    if errs:
        raise SpecError(errs, str(path))
    return TestbedSpec(path.resolve(), fab, settings)


def _settings(raw: Any, path: Path, errs: list[str]) -> TestbedSettings:
    if not isinstance(raw, dict):
        errs.append("testbed: expected a table")
        raw = {}
    for key in sorted(set(raw) - _TESTBED_KEYS):
        errs.append(f"testbed.{key}: unknown field (known: {', '.join(sorted(_TESTBED_KEYS))})")
    name = raw.get("name", re.sub(r"[^a-z0-9_]", "_", path.stem.lower())[:20])
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        errs.append(f"testbed.name: {name!r} must be 1-20 of a-z, 0-9 and _ (it names the namespaces)")
        name = "fabric"
    kind = raw.get("switch", "dlcp")
    if kind not in SWITCH_KINDS:
        errs.append(f"testbed.switch: must be one of {', '.join(SWITCH_KINDS)}, got {kind!r}")
        kind = "dlcp"
    return TestbedSettings(name, kind, _traffic(raw.get("traffic", {}), errs))


def _number(t: dict[str, Any], key: str, default: float, lo: float, hi: float, errs: list[str]) -> float:
    value = t.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        errs.append(f"testbed.traffic.{key}: must be a number in {lo:g}..{hi:g}, got {value!r}")
        return default
    return float(value)


def _traffic(t: Any, errs: list[str]) -> TrafficSettings:
    if not isinstance(t, dict):
        errs.append("testbed.traffic: expected a table")
        return TrafficSettings()
    for key in sorted(set(t) - _TRAFFIC_KEYS):
        errs.append(f"testbed.traffic.{key}: unknown field (known: {', '.join(sorted(_TRAFFIC_KEYS))})")
    cdf = t.get("cdf", flow_sizes.WEB_SEARCH)
    if cdf not in flow_sizes.ACCEPTED:
        errs.append(f"testbed.traffic.cdf: must be one of {', '.join(flow_sizes.ACCEPTED)}, got {cdf!r}")
    cdf = flow_sizes.canonical(cdf) if cdf in flow_sizes.ACCEPTED else flow_sizes.WEB_SEARCH
    duration = t.get("duration", 20.0)
    try:
        duration_s = parse_duration(duration, "testbed.traffic.duration") / 1e9
        if not 0.1 <= duration_s <= 3600:
            raise ValueError(f"testbed.traffic.duration: {duration!r} is out of range 0.1s..3600s")
    except ValueError as exc:
        errs.append(str(exc))
        duration_s = 20.0
    return TrafficSettings(
        load=_number(t, "load", 0.3, 0.0, 1.0, errs),
        cdf=cdf,
        incast=int(_number(t, "incast", 0, 0, 64, errs)),
        incast_bytes=int(_number(t, "incast_bytes", INCAST_BYTES, 1, 4_000_000, errs)),
        duration_s=duration_s,
        flows=int(_number(t, "flows", 2000, 1, 100_000, errs)),
        udp_share=_number(t, "udp_share", 0.5, 0.0, 1.0, errs),
        seed=int(_number(t, "seed", 0, 0, 2**31 - 1, errs)),
    )


def switch_limits(fab: Fabric) -> list[str]:
    """Link settings the software switch cannot carry out, each naming its field."""
    errs: list[str] = []
    for link in fab.links.values():
        errs += _link_limits(link)
    return errs


def bmv2_limits(fab: Fabric) -> list[str]:
    """Link settings BMv2 cannot carry out at all: loss and delay (only DLCP's software switch has them)."""
    errs = []
    for link in fab.links.values():
        if link.loss:
            errs.append(f"link.{link.name}.loss: BMv2 cannot drop at random (only the dlcp switch carries out loss)")
        if link.delay_ns:
            errs.append(f"link.{link.name}.delay: BMv2 cannot delay a port (only the dlcp switch carries out delay)")
    return errs


def _link_limits(link: LinkSpec) -> list[str]:
    where = f"link.{link.name}"
    out = []
    if link.rate_bps is not None and not swcfg.MIN_RATE_BPS <= link.rate_bps <= swcfg.MAX_RATE_BPS:
        out.append(
            f"{where}.rate: {link.rate_bps} bit/s is beyond what the switch can shape "
            f"({swcfg.MIN_RATE_BPS}..{swcfg.MAX_RATE_BPS} bit/s)"
        )
    lo = max(swcfg.MIN_BUFFER, swcfg.DEFAULT_MAX_FRAME)
    if not lo <= link.buffer_bytes <= swcfg.MAX_BUFFER:
        out.append(
            f"{where}.buffer: {link.buffer_bytes} B is beyond what a switch port holds ({lo}..{swcfg.MAX_BUFFER} B)"
        )
    if link.delay_ns > swcfg.MAX_DELAY_NS:
        out.append(f"{where}.delay: {link.delay_ns} ns is above the switch's most, {swcfg.MAX_DELAY_NS} ns")
    if link.mtu + 14 > swcfg.DEFAULT_MAX_FRAME:
        out.append(f"{where}.mtu: {link.mtu} B frames exceed the switch's largest ({swcfg.DEFAULT_MAX_FRAME} B)")
    return out
