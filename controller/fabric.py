"""Fabric and job configuration: TOML into :class:`~dlcp.controller.model.Fabric`, checked as a whole.

A fabric file declares the switches, hosts and links (or a ``[topology]`` that
generates them, :mod:`dlcp.controller.topologies`) and the jobs that run on it::

    [defaults]
    buffer = "1MiB"          # egress buffer of every switch port unless its link says otherwise
    mtu = 9000

    [[switch]]
    name = "s1"
    grpc = "127.0.0.1:9559"  # omitted: [addresses] grpc_host and grpc_port + index
    ports = { 1 = "h1-s1", 2 = "h2-s1", 3 = "h3-s1" }   # port -> link

    [[host]]
    name = "h1"
    switch = "s1"
    port = 1                 # ip and mac: from the allocator when omitted

    [[link]]
    name = "h3-s1"
    rate = "1gbit"           # the bottleneck
    buffer = "512KiB"

    [[job]]
    id = 7
    mode = "ps"              # or "ring" (the collective: ring all-reduce)
    workers = ["h1", "h2", "h3"]
    servers = ["h3"]
    [job.transport]          # the host's own job tables: [transport], [policy], [limits]
    port = 19111
    [job.switch]
    on_congestion = "trim"

Every error names the field (``host.h4.switch``, ``job.7.transport.port``) and all
errors are reported together, before anything is written to a switch. Errors are
:class:`FabricError` (a :class:`dlcp.config.ConfigError`, so a ``ValueError``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from dlcp import config as host_config
from dlcp import switch_limits
from dlcp.config import ConfigError
from dlcp.controller import topologies
from dlcp.controller.model import (
    IP_OVERHEAD,
    Fabric,
    HostSpec,
    JobSpec,
    JobSwitchConfig,
    LinkSpec,
    SwitchSpec,
    mac_text,
)
from dlcp.controller.paths import Paths
from dlcp.frames import ETH_HEADER
from dlcp.protocol import NUM_DROP_CLASSES, UDP_PORT
from dlcp.tomlfile import TomlFileError, read_toml
from dlcp.units import format_size, parse_duration, parse_rate, parse_size

MAX_PORT = switch_limits.MAX_PORT
"""Highest switch port: ports are 9 bits and v1model reserves 511 as its drop port."""
MTU_RANGE = (576, switch_limits.DEFAULT_MAX_FRAME - ETH_HEADER.size)
"""IPv4's minimum to the software switch's largest frame (a 9216-byte jumbo frame) less Ethernet."""
TARGETS = ("dlcp", "bmv2", "tofino")
DEFAULTS: dict[str, Any] = {"target": "dlcp", "buffer": "4MiB", "mtu": 9000}
ADDRESSES: dict[str, Any] = {
    "subnet": "10.0.0.0/16",
    "host_mac_prefix": "02:dc:00",
    "switch_mac_prefix": "02:dd",
    "grpc_host": "127.0.0.1",
    "grpc_port": 9559,
    "device_id": 1,
}
# `testbed`: the emulation settings of dlcp.testbed (link impairments, traffic), which share the
# fabric file; the controller has nothing to write for them and leaves them alone.
_TOP_KEYS = {"topology", "addresses", "defaults", "switch", "host", "link", "job", "testbed"}
_SWITCH_KEYS = {"name", "grpc", "device_id", "role", "target", "ports", "thrift", "p4blob", "mac"}
_HOST_KEYS = {"name", "ip", "mac", "switch", "port"}
_LINK_KEYS = {"name", "rate", "buffer", "mtu", "delay", "loss"}
_JOB_KEYS = {"id", "name", "mode", "workers", "servers", "token", "config", "policy", "transport", "limits", "switch"}
_JOB_SWITCH_KEYS = {"features", "on_congestion", "thresholds", "burst_packets"}


class FabricError(ConfigError):
    """The fabric or job configuration is invalid; the message lists every error, each naming its field."""

    def __init__(self, errors: list[str], source: str = "") -> None:
        self.errors = list(errors)
        head = f"{source}: " if source else ""
        if len(errors) == 1:
            super().__init__(head + errors[0])
        else:
            super().__init__(head + f"{len(errors)} errors:\n  " + "\n  ".join(errors))


def load(path: str | Path) -> Fabric:
    """Load and check a fabric file."""
    p = Path(path)
    try:
        doc = read_toml(p)
    except TomlFileError as exc:
        raise FabricError([exc.reason], str(p)) from None
    return from_dict(doc, str(p), base_dir=p.parent)


def from_dict(doc: dict[str, Any], source: str = "<config>", base_dir: Path | None = None) -> Fabric:
    """Build and check a :class:`Fabric` from parsed TOML."""
    errs: list[str] = []
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        errs.append(f"unknown table(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(_TOP_KEYS))})")
    tables = dict(doc)
    if "topology" in doc:
        try:
            tables.update(topologies.merge(topologies.expand(doc["topology"]), doc))
        except topologies.TopologyError as exc:
            raise FabricError([str(exc)], source) from None
    defaults = _settings(doc, "defaults", DEFAULTS, errs)
    addresses = _settings(doc, "addresses", ADDRESSES, errs)
    links = _links(_array(tables, "link", errs), defaults, errs)
    switches = _switches(_array(tables, "switch", errs), defaults, addresses, errs)
    hosts = _hosts(_array(tables, "host", errs), addresses, errs)
    _connect(switches, hosts, links, defaults, errs)
    if not errs:
        _check_addresses(switches, hosts, errs)
    if errs:
        raise FabricError(errs, source)
    fabric = Fabric(switches, hosts, links, {}, source)
    jobs = _jobs(_array(tables, "job", errs), fabric, base_dir, errs)
    if errs:
        raise FabricError(errs, source)
    fabric = replace(fabric, jobs=jobs)
    _check_jobs(fabric, errs)
    if errs:
        raise FabricError(errs, source)
    return fabric


# ---------------------------------------------------------------- small readers


def _array(doc: dict[str, Any], key: str, errs: list[str]) -> list[dict[str, Any]]:
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        errs.append(f"{key}: expected an array of tables ([[{key}]])")
        return []
    return value


def _settings(doc: dict[str, Any], key: str, known: dict[str, Any], errs: list[str]) -> dict[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        errs.append(f"{key}: expected a table")
        return dict(known)
    unknown = set(value) - set(known)
    if unknown:
        errs.append(f"unknown field(s) {', '.join(f'{key}.{u}' for u in sorted(unknown))}")
    return {**known, **value}


def _name(entry: dict[str, Any], kind: str, i: int, errs: list[str]) -> str | None:
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        errs.append(f"{kind}[{i}].name: required, a non-empty string")
        return None
    return name


def _unknown(entry: dict[str, Any], known: set[str], where: str, errs: list[str]) -> None:
    unknown = set(entry) - known
    if unknown:
        errs.append(f"unknown field(s) {', '.join(f'{where}.{u}' for u in sorted(unknown))}")


def _int(value: Any, where: str, lo: int, hi: int, errs: list[str]) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        errs.append(f"{where}: expected an integer, got {value!r}")
        return None
    if not lo <= value <= hi:
        errs.append(f"{where}: {value} is out of range {lo}..{hi}")
        return None
    return value


def _address(value: Any, where: str, errs: list[str]) -> str | None:
    if not isinstance(value, str):
        errs.append(f"{where}: expected HOST:PORT, got {value!r}")
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        errs.append(f"{where}: {value!r} is not HOST:PORT (port 1..65535)")
        return None
    return value


def _mac(value: Any, where: str, errs: list[str]) -> int | None:
    parts = value.split(":") if isinstance(value, str) else []
    try:
        if len(parts) != 6 or not all(1 <= len(p) <= 2 for p in parts):
            raise ValueError
        return int("".join(f"{int(p, 16):02x}" for p in parts), 16)
    except ValueError:
        errs.append(f"{where}: {value!r} is not a MAC address (xx:xx:xx:xx:xx:xx)")
        return None


def _prefix(value: Any, where: str, length: int, errs: list[str]) -> int:
    parts = value.split(":") if isinstance(value, str) else []
    try:
        if len(parts) != length:
            raise ValueError
        return int("".join(f"{int(p, 16):02x}" for p in parts), 16)
    except ValueError:
        errs.append(f"{where}: {value!r} is not {length} MAC bytes (xx:...)")
        return 0


def _quantity(parse: Any, value: Any, where: str, errs: list[str]) -> int | None:
    try:
        return int(parse(value, where))
    except ValueError as exc:
        errs.append(str(exc))
        return None


# ---------------------------------------------------------------- links, switches, hosts


def _links(entries: list[dict[str, Any]], defaults: dict[str, Any], errs: list[str]) -> dict[str, LinkSpec]:
    out: dict[str, LinkSpec] = {}
    for i, e in enumerate(entries):
        name = _name(e, "link", i, errs)
        if name is None:
            continue
        where = f"link.{name}"
        if name in out:
            errs.append(f"{where}: link named twice")
            continue
        _unknown(e, _LINK_KEYS, where, errs)
        out[name] = _link(name, e, defaults, where, errs)
    return out


def _link(name: str, e: dict[str, Any], defaults: dict[str, Any], where: str, errs: list[str]) -> LinkSpec:
    rate = e.get("rate", defaults.get("rate"))
    loss = e.get("loss", 0.0)
    if isinstance(loss, bool) or not isinstance(loss, int | float) or not 0.0 <= loss < 1.0:
        errs.append(f"{where}.loss: must be a probability in [0, 1), got {loss!r}")
        loss = 0.0
    mtu = _int(e.get("mtu", defaults["mtu"]), f"{where}.mtu", *MTU_RANGE, errs) or MTU_RANGE[1]
    buffer = _quantity(parse_size, e.get("buffer", defaults["buffer"]), f"{where}.buffer", errs) or 1 << 22
    if buffer < mtu + ETH_HEADER.size:
        errs.append(f"{where}.buffer: {format_size(buffer)} cannot hold one frame of the link's MTU ({mtu} B)")
    return LinkSpec(
        name=name,
        rate_bps=None if rate is None else _quantity(parse_rate, rate, f"{where}.rate", errs),
        buffer_bytes=buffer,
        mtu=mtu,
        delay_ns=_quantity(parse_duration, e.get("delay", 0), f"{where}.delay", errs) or 0,
        loss=float(loss),
    )


def _switches(
    entries: list[dict[str, Any]], defaults: dict[str, Any], addresses: dict[str, Any], errs: list[str]
) -> dict[str, SwitchSpec]:
    out: dict[str, SwitchSpec] = {}
    mac_prefix = _prefix(addresses["switch_mac_prefix"], "addresses.switch_mac_prefix", 2, errs)
    grpc_host = addresses["grpc_host"]
    grpc_base = _int(addresses["grpc_port"], "addresses.grpc_port", 1, 65535, errs) or ADDRESSES["grpc_port"]
    if defaults["target"] not in TARGETS:
        errs.append(f"defaults.target: must be one of {', '.join(TARGETS)}, got {defaults['target']!r}")
    for i, e in enumerate(entries):
        name = _name(e, "switch", i, errs)
        if name is None:
            continue
        where = f"switch.{name}"
        if name in out:
            errs.append(f"{where}: switch named twice")
            continue
        _unknown(e, _SWITCH_KEYS, where, errs)
        grpc = _address(e.get("grpc", f"{grpc_host}:{grpc_base + i}"), f"{where}.grpc", errs) or ""
        device_id = _int(e.get("device_id", addresses["device_id"]), f"{where}.device_id", 1, (1 << 64) - 1, errs)
        target = e.get("target", defaults["target"])
        if target not in TARGETS:
            errs.append(f"{where}.target: must be one of {', '.join(TARGETS)}, got {target!r}")
        role = e.get("role", "")
        if not isinstance(role, str):
            errs.append(f"{where}.role: expected a P4Runtime role name (a string), got {role!r}")
        thrift = e.get("thrift")
        if thrift is not None:
            _address(thrift, f"{where}.thrift", errs)
            if target != "bmv2":
                errs.append(f"{where}.thrift: only a bmv2 switch has a Thrift server (target is {target!r})")
        p4blob = e.get("p4blob")
        if p4blob is not None and not isinstance(p4blob, str):
            errs.append(f"{where}.p4blob: expected a path, got {p4blob!r}")
        mac = _mac(e["mac"], f"{where}.mac", errs) if "mac" in e else (mac_prefix << 32) | (i + 1) << 16
        ports: dict[int, str] = {}
        raw_ports = e.get("ports")
        if not isinstance(raw_ports, dict) or not raw_ports:
            errs.append(f"{where}.ports: required, a table of port = link name")
            raw_ports = {}
        for key, link in raw_ports.items():
            try:
                port = int(key)
            except ValueError:
                errs.append(f"{where}.ports.{key}: a port is a number")
                continue
            if not 0 <= port <= MAX_PORT:
                errs.append(f"{where}.ports.{key}: port {port} is out of range 0..{MAX_PORT}")
                continue
            if not isinstance(link, str) or not link:
                errs.append(f"{where}.ports.{key}: expected a link name, got {link!r}")
                continue
            ports[port] = link
        out[name] = SwitchSpec(
            name=name,
            grpc=grpc,
            device_id=device_id or 1,
            role=role if isinstance(role, str) else "",
            target=target if target in TARGETS else "dlcp",
            mac=mac or 0,
            ports=ports,
            thrift=thrift if isinstance(thrift, str) else None,
            p4blob=p4blob if isinstance(p4blob, str) else None,
        )
    return out


def _hosts(entries: list[dict[str, Any]], addresses: dict[str, Any], errs: list[str]) -> dict[str, HostSpec]:
    out: dict[str, HostSpec] = {}
    try:
        subnet = ipaddress.IPv4Network(addresses["subnet"])
    except (ValueError, TypeError):
        errs.append(f"addresses.subnet: {addresses['subnet']!r} is not an IPv4 network (a.b.c.d/n)")
        subnet = ipaddress.IPv4Network(ADDRESSES["subnet"])
    mac_prefix = _prefix(addresses["host_mac_prefix"], "addresses.host_mac_prefix", 3, errs)
    given_ips = {e["ip"] for e in entries if isinstance(e.get("ip"), str)}
    free = (str(a) for a in subnet.hosts() if str(a) not in given_ips)
    given_macs = {e["mac"].lower() for e in entries if isinstance(e.get("mac"), str)}
    free_macs = (m for m in ((mac_prefix << 24) | n for n in range(1, 1 << 24)) if mac_text(m) not in given_macs)
    for i, e in enumerate(entries):
        name = _name(e, "host", i, errs)
        if name is None:
            continue
        where = f"host.{name}"
        if name in out:
            errs.append(f"{where}: host named twice")
            continue
        _unknown(e, _HOST_KEYS, where, errs)
        ip = e.get("ip")
        if ip is None:
            ip = next(free, None)
            if ip is None:
                errs.append(f"{where}.ip: subnet {subnet} has no address left for it")
                ip = "0.0.0.0"
        else:
            try:
                ip = str(ipaddress.IPv4Address(ip))
            except (ValueError, TypeError):
                errs.append(f"{where}.ip: {ip!r} is not an IPv4 address")
                ip = "0.0.0.0"
        mac = _mac(e["mac"], f"{where}.mac", errs) if "mac" in e else next(free_macs)
        switch = e.get("switch")
        if not isinstance(switch, str):
            errs.append(f"{where}.switch: required, the name of the switch it is attached to")
            switch = ""
        port = _int(e.get("port"), f"{where}.port", 0, MAX_PORT, errs)
        out[name] = HostSpec(name=name, ip=ip, mac=mac or 0, switch=switch, port=-1 if port is None else port)
    return out


def _connect(
    switches: dict[str, SwitchSpec],
    hosts: dict[str, HostSpec],
    links: dict[str, LinkSpec],
    defaults: dict[str, Any],
    errs: list[str],
) -> None:
    """Resolve every link's two ends; links named only in port maps get the default settings."""
    both = set(switches) & set(hosts)
    for name in sorted(both):
        errs.append(f"host.{name}: a switch has the same name")
    ends: dict[str, list[tuple[str, int | None]]] = {name: [] for name in links}
    for sw in switches.values():
        for port, link in sorted(sw.ports.items()):
            if link not in links:
                links[link] = _link(link, {}, defaults, f"link.{link}", errs)
                ends[link] = []
            ends[link].append((sw.name, port))
    for h in hosts.values():
        where = f"host.{h.name}"
        attached = switches.get(h.switch)
        if not h.switch:
            continue  # already reported
        if attached is None:
            errs.append(f"{where}.switch: unknown switch {h.switch!r} (switches: {', '.join(sorted(switches))})")
            continue
        if h.port not in attached.ports:
            if h.port >= 0:
                known = ", ".join(map(str, sorted(attached.ports)))
                errs.append(f"{where}.port: switch {attached.name} has no port {h.port} (ports: {known})")
            continue
        ends[attached.ports[h.port]].append((h.name, None))
    for name, link_ends in ends.items():
        shown = ", ".join(n if p is None else f"{n}:{p}" for n, p in link_ends)
        if not link_ends:
            errs.append(f"link.{name}: not on any switch port")
        elif len(link_ends) == 1:
            errs.append(f"link.{name}: only one end ({shown}); it leads nowhere")
        elif len(link_ends) > 2:
            errs.append(f"link.{name}: has {len(link_ends)} ends ({shown}); a link joins two")
        elif all(p is None for _, p in link_ends):
            errs.append(f"link.{name}: joins two hosts; every link has a switch at one end at least")
        else:
            links[name] = replace(links[name], ends=tuple(link_ends))


def _check_addresses(switches: dict[str, SwitchSpec], hosts: dict[str, HostSpec], errs: list[str]) -> None:
    seen_ip: dict[str, str] = {}
    seen_mac: dict[int, str] = {}
    for sw in switches.values():
        for port in sw.ports:
            seen_mac.setdefault(sw.port_mac(port), f"switch {sw.name} port {port}")
    for h in hosts.values():
        if h.ip in seen_ip:
            errs.append(f"host.{h.name}.ip: duplicate IP {h.ip} (also host {seen_ip[h.ip]})")
        seen_ip.setdefault(h.ip, h.name)
        if h.mac in seen_mac:
            errs.append(f"host.{h.name}.mac: duplicate MAC {mac_text(h.mac)} (also {seen_mac[h.mac]})")
        seen_mac.setdefault(h.mac, f"host {h.name}")
    devices: dict[tuple[str, int], str] = {}
    for sw in switches.values():
        key = (sw.grpc, sw.device_id)
        if key in devices:
            errs.append(
                f"switch.{sw.name}.grpc: {sw.grpc} device {sw.device_id} is also switch {devices[key]}'s "
                "(give each switch its own address or device_id)"
            )
        devices.setdefault(key, sw.name)


# ---------------------------------------------------------------- jobs


def _jobs(entries: list[dict[str, Any]], fabric: Fabric, base_dir: Path | None, errs: list[str]) -> dict[int, JobSpec]:
    out: dict[int, JobSpec] = {}
    ports: dict[int, int] = {}
    for i, e in enumerate(entries):
        job_id = _int(e.get("id"), f"job[{i}].id", 0, (1 << 16) - 1, errs)
        if job_id is None:
            continue
        where = f"job.{job_id}"
        if job_id in out:
            errs.append(f"{where}.id: two jobs have id {job_id}")
            continue
        _unknown(e, _JOB_KEYS, where, errs)
        job = _job(job_id, e, fabric, base_dir, where, errs)
        if job is None:
            continue
        other = ports.get(job.udp_port)
        if other is not None:
            errs.append(f"{where}.transport.port: UDP port {job.udp_port} is also job {other}'s; give each job its own")
        ports.setdefault(job.udp_port, job_id)
        out[job_id] = job
    return out


def _job(
    job_id: int, e: dict[str, Any], fabric: Fabric, base_dir: Path | None, where: str, errs: list[str]
) -> JobSpec | None:
    n_errs = len(errs)
    name = e.get("name", f"job{job_id}")
    mode = e.get("mode")
    if mode not in ("ps", "ring"):
        errs.append(f'{where}.mode: must be "ps" or "ring" (the collective: ring all-reduce), got {mode!r}')
    workers = _host_list(e.get("workers"), f"{where}.workers", fabric, errs)
    servers = _host_list(e.get("servers", []), f"{where}.servers", fabric, errs)
    if mode == "ps":
        if not servers:
            errs.append(f"{where}.servers: a ps job needs at least one server")
        for s in servers:
            if s not in workers:
                errs.append(
                    f"{where}.servers: {s} is not among the workers (a server is a worker rank that also serves)"
                )
    elif mode == "ring" and servers:
        errs.append(f"{where}.servers: a ring job has no servers")
    if len(workers) < 2:
        errs.append(f"{where}.workers: at least two hosts")
    token = e.get("token")
    if token is not None:
        token = _int(token, f"{where}.token", 0, (1 << 32) - 1, errs)
    switch = _job_switch(e.get("switch", {}), f"{where}.switch", errs)
    host = _host_config(job_id, name, mode, e, len(workers), max(1, len(servers)), base_dir, where, errs)
    if len(errs) > n_errs or host is None or switch is None:
        return None
    if host.transport.port == 0:
        errs.append(f"{where}.transport.port: 0 (any free port) cannot be recognised by switches; give a port")
    if not switch.features and host.transport.port == UDP_PORT:
        errs.append(
            f"{where}.switch.features: false needs transport.port other than {UDP_PORT}, "
            "which the P4 program always treats as DLCP"
        )
    ranks = tuple(servers) + tuple(w for w in workers if w not in servers)
    return JobSpec(job_id, str(name), mode, ranks, tuple(servers), token, host, switch)  # type: ignore[arg-type]


def _host_list(value: Any, where: str, fabric: Fabric, errs: list[str]) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        errs.append(f"{where}: expected an array of host names")
        return []
    for v in value:
        if v not in fabric.hosts:
            errs.append(f"{where}: unknown host {v!r}")
    dup = sorted({v for v in value if value.count(v) > 1})
    if dup:
        errs.append(f"{where}: {', '.join(dup)} listed twice")
    return [v for v in value if v in fabric.hosts]


def _job_switch(value: Any, where: str, errs: list[str]) -> JobSwitchConfig | None:
    if not isinstance(value, dict):
        errs.append(f"{where}: expected a table")
        return None
    _unknown(value, _JOB_SWITCH_KEYS, where, errs)
    features = value.get("features", True)
    if not isinstance(features, bool):
        errs.append(f"{where}.features: expected true or false, got {features!r}")
    on = value.get("on_congestion", "trim")
    if on not in ("trim", "drop"):
        errs.append(f'{where}.on_congestion: must be "trim" or "drop", got {on!r}')
    burst = _int(value.get("burst_packets", 4), f"{where}.burst_packets", 1, 1 << 16, errs)
    thresholds: dict[int, int] = {}
    raw = value.get("thresholds", {})
    if not isinstance(raw, dict):
        errs.append(f"{where}.thresholds: expected a table of drop class = packets")
        raw = {}
    for key, packets in raw.items():
        try:
            dc = int(key)
        except ValueError:
            dc = -1
        if not 1 <= dc < NUM_DROP_CLASSES:
            errs.append(f"{where}.thresholds.{key}: drop class must be 1..{NUM_DROP_CLASSES - 1} (0 is never dropped)")
            continue
        n = _int(packets, f"{where}.thresholds.{key}", 1, (1 << 32) - 1, errs)
        if n is not None:
            thresholds[dc] = n
    if not isinstance(features, bool) or on not in ("trim", "drop") or burst is None:
        return None
    return JobSwitchConfig(features=features, on_congestion=on, thresholds=thresholds, burst_packets=burst)


def _host_config(
    job_id: int,
    name: Any,
    mode: Any,
    e: dict[str, Any],
    workers: int,
    servers: int,
    base_dir: Path | None,
    where: str,
    errs: list[str],
) -> host_config.DLCPConfig | None:
    """The job's host-side configuration, built by :mod:`dlcp.config` (one source with the workers)."""
    tables: dict[str, Any] = {k: e[k] for k in ("policy", "transport", "limits") if k in e}
    if "config" in e:
        if tables:
            errs.append(f"{where}.config: give the host tables inline or in the file, not both ({sorted(tables)})")
            return None
        path = Path(e["config"]) if isinstance(e["config"], str) else None
        if path is None:
            errs.append(f"{where}.config: expected the path of a job file")
            return None
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            file_doc = read_toml(path)
        except TomlFileError as exc:
            errs.append(f"{where}.config: {exc}")
            return None
        file_job = file_doc.pop("job", {})
        for key, mine in (("id", job_id), ("mode", mode), ("workers", workers)):
            if key in file_job and file_job[key] != mine:
                errs.append(f"{where}.config: {path} says job.{key} = {file_job[key]!r}, the fabric {mine!r}")
        tables = file_doc
    if mode not in ("ps", "ring") or not isinstance(name, str):
        if not isinstance(name, str):
            errs.append(f"{where}.name: expected a string, got {name!r}")
        return None
    job = {"id": job_id, "name": name, "mode": mode, "workers": max(1, workers), "servers": servers}
    try:
        return host_config.from_dict({"job": job, **tables})
    except ConfigError as exc:
        errs.append(f"{where}.{exc}")
        return None


def _check_jobs(fabric: Fabric, errs: list[str]) -> None:
    """What needs paths: reachability, MTU, thresholds against buffers, one congestion action per switch."""
    from dlcp.controller import modes

    paths = Paths(fabric)
    actions: dict[str, dict[str, int]] = {}
    for job in fabric.jobs.values():
        where = f"job.{job.id}"
        unreachable = [(a, b) for a, b in job.pairs() if not paths.reachable(a, b)]
        if unreachable:
            a, b = unreachable[0]
            errs.append(
                f"{where}.workers: {a} cannot reach {b} (no path from switch {fabric.hosts[a].switch} to "
                f"{fabric.hosts[b].switch})"
                + (f" and {len(unreachable) - 1} more pairs" if len(unreachable) > 1 else "")
            )
            continue
        hops = {hop for a, b in job.pairs() for hop in paths.hops(a, b)}
        ip_bytes = job.host.transport.payload_bytes + IP_OVERHEAD
        for sw, port in sorted(_with_ingress(fabric, job, hops)):
            link = fabric.link_of(sw, port)
            if ip_bytes > link.mtu:
                errs.append(
                    f"{where}.transport.payload_bytes: {job.host.transport.payload_bytes} B + {IP_OVERHEAD} B of "
                    f"headers exceed the MTU {link.mtu} of link {link.name}"
                )
                break
        for dc, packets in sorted(job.switch.thresholds.items()):
            for sw, port in sorted(hops):
                link = fabric.link_of(sw, port)
                if packets * job.frame_bytes > link.buffer_bytes:
                    errs.append(
                        f"{where}.switch.thresholds.{dc}: {packets} packets of {job.frame_bytes} B "
                        f"({format_size(packets * job.frame_bytes)}) exceed the {format_size(link.buffer_bytes)} "
                        f"buffer of link {link.name} ({sw} port {port})"
                    )
                    break
        if job.switch.features and modes.eligible_queues(job):
            for sw in {s for s, _ in hops}:
                actions.setdefault(sw, {}).setdefault(job.switch.on_congestion, job.id)
    for sw, by_action in sorted(actions.items()):
        if len(by_action) > 1:
            (a1, j1), (a2, j2) = sorted(by_action.items(), key=lambda kv: kv[1])[:2]
            errs.append(
                f"job.{j2}.switch.on_congestion: {a2!r} differs from job {j1}'s {a1!r} on switch {sw} "
                "(a switch has one trim-or-drop setting per queue and drop class, not per job)"
            )


def _with_ingress(fabric: Fabric, job: JobSpec, hops: set[tuple[str, int]]) -> Iterator[tuple[str, int]]:
    """The egress hops and the senders' own access links."""
    yield from hops
    for h in job.workers:
        host = fabric.hosts[h]
        yield host.switch, host.port
