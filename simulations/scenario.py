"""Scenario files: TOML loaded into validated dataclasses, refused before anything runs.

A scenario describes one simulation::

    name = "incast"
    seed = 1
    baseline = "dlcp"          # dlcp | dctcp | tcp | pfabric | tensor_priority | dlcp_no_{priority,drop,spray,bound}
    routing = "dlcp"           # dlcp | global (ns-3's global routing)
    ports = "dlcp"             # dlcp (DLCP's port model where it applies) | ns3 (ns-3's devices and queue discs)
    stop_s = 0.05              # simulated-time limit
    retransmissions = "paced"  # paced | burst (the host stack's)
    host_pacing = "share"      # share (each DLCP sender at its share, as the controller paces) | active | line
    probe_timeout_us = 1000.0  # DLCP's first probe timeout, doubling up to max_probe_timeout_us

    [topology]                 # leaf_spine | fat_tree | star (hosts, host_down_gbps, bottleneck_host, bottleneck_gbps)
    kind = "leaf_spine"
    leaves = 2
    spines = 2
    hosts_per_leaf = 8
    host_gbps = 100.0
    fabric_gbps = 100.0
    delay_us = 1.0
    mtu = 9000

    [switch]
    buffer_packets = 256
    ecn_threshold_packets = 32
    congestion_action = "drop"   # drop | trim
    drop_thresholds = [32, 16, 8]  # drop classes 1..3

    [tcp]                      # TCP messages: variant (auto | newreno | dctcp), min_rto_us, buffer_bytes,
    stack = "lean"             # lean (the TCP baselines on the port model) | ns3 (ns-3's sockets everywhere)

    [rate]                     # overrides of the rate rule's numbers (dlcp/rate_control.py): min_bps, increase_bps,
                               # decrease_above (0: the rule's own)

    [dlcp]                     # a DLCP job file's tables: policy, transport (docs/configuration.md)
    [dlcp.transport]
    payload_bytes = 8192

    [[workload]]
    type = "incast"            # incast | background | ps | ring | permutation
    ...

Errors name the field by its path (``workload[1].load``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dlcp import flow_sizes
from dlcp.config import DLCPConfig, from_dict
from dlcp.simulations import models, topology
from dlcp.tomlfile import TomlFileError, read_toml


@dataclass(frozen=True)
class Features:
    """What a baseline turns on: the transport of gradients, the switch's queue, DLCP's techniques."""

    queue: Literal["dlcp", "red_ecn", "fifo"] = "dlcp"
    """Switch ports: the DLCP queue disc, RED with ECN marking (DCTCP), or a drop-tail FIFO."""
    dlcp_transport: bool = True
    """Gradients over DLCP's transport (else TCP: DCTCP on red_ecn, NewReno on fifo)."""
    priority: bool = True
    """Packet-level priority: each layer's class from the policy (else every gradient in class 0)."""
    selective_drop: bool = True
    """Drop-eligible classes dropped or trimmed above their thresholds (else nothing is eligible)."""
    spraying: bool = True
    """Per-packet spraying of DLCP data (else per-flow ECMP)."""
    bounded_loss: bool = True
    """Messages complete within their loss bound (else every message is reliable: bound 0)."""
    srpt: bool = False
    """pFabric: every message (background too) over the reliable transport, class by remaining size."""


BASELINE_FEATURES: dict[str, Features] = {
    "dlcp": Features(),
    "dctcp": Features(queue="red_ecn", dlcp_transport=False),
    "tcp": Features(queue="fifo", dlcp_transport=False),
    # pFabric (Alizadeh et al. 2013): SRPT priority by remaining size, tiny buffers, the
    # lowest priority pushed out when full, line-rate start; approximated with DLCP's 8 classes.
    "pfabric": Features(priority=False, selective_drop=False, spraying=True, bounded_loss=False, srpt=True),
    # ByteScheduler / P3: tensor-level priority (front layers first), nothing dropped on purpose,
    # every byte delivered, flow-level ECMP.
    "tensor_priority": Features(selective_drop=False, spraying=False, bounded_loss=False),
    # DLCP with one technique off at a time (the ablation).
    "dlcp_no_priority": Features(priority=False),
    "dlcp_no_drop": Features(selective_drop=False),
    "dlcp_no_spray": Features(spraying=False),
    "dlcp_no_bound": Features(bounded_loss=False),
}
BASELINES = tuple(BASELINE_FEATURES)


class ScenarioError(ValueError):
    """A scenario value is missing, of the wrong type, or out of range; the message names the field."""


@dataclass(frozen=True)
class TopologySpec:
    kind: Literal["leaf_spine", "fat_tree", "star"] = "leaf_spine"
    leaves: int = 2
    spines: int = 2
    hosts_per_leaf: int = 8
    hosts: int = 8
    """star only."""
    host_down_gbps: float = 0.0
    """star only: the switch's rate toward every host (0: ``host_gbps`` both ways)."""
    bottleneck_host: int = -1
    """star only: this host's port on the switch runs at ``bottleneck_gbps`` toward the host (-1: none)."""
    bottleneck_gbps: float = 0.0
    k: int = 4
    """fat_tree only."""
    host_gbps: float = 100.0
    fabric_gbps: float = 100.0
    delay_us: float = 1.0
    mtu: int = 9000

    def size(self) -> topology.Size:
        """The fabric's counts, without building it; :class:`topology.TopologyError` for a fabric that cannot be."""
        if self.kind == "leaf_spine":
            size = topology.leaf_spine_size(self.leaves, self.spines, self.hosts_per_leaf)
        elif self.kind == "fat_tree":
            size = topology.fat_tree_size(self.k)
        else:
            size = topology.star_size(self.hosts)
        size.check()
        return size

    def fabric(self) -> topology.Fabric:
        d = self.delay_us * 1e-6
        if self.kind == "leaf_spine":
            f = topology.leaf_spine(self.leaves, self.spines, self.hosts_per_leaf, self.host_gbps, self.fabric_gbps, d)
        elif self.kind == "fat_tree":
            f = topology.fat_tree(self.k, self.host_gbps, d)
        else:
            f = topology.star(
                self.hosts, self.host_gbps, d, self.host_down_gbps, self.bottleneck_host, self.bottleneck_gbps
            )
        f.check()
        return f


@dataclass(frozen=True)
class SwitchSpec:
    buffer_packets: int = 256
    ecn_threshold_packets: int = 32
    """DCTCP's K: marking threshold for ECN-capable packets (DCTCP baseline, and TCP background under DLCP)."""
    congestion_action: Literal["drop", "trim"] = "drop"
    drop_thresholds: tuple[int, ...] = (32, 16, 8)
    """Queue occupancy (packets) above which drop classes 1, 2, 3 are dropped or trimmed."""
    buffer_policy: Literal["push_out", "tail_drop"] = "push_out"
    """DLCP ports when the buffer is full: push out the newest packet of the lowest class below
    (the software switch's policy, docs/protocol.md) or drop the arriving packet."""
    pfabric_buffer_packets: int = 0
    """pfabric baseline's buffer per port; 0: two bandwidth-delay products of the longest path."""


@dataclass(frozen=True)
class TcpSpec:
    variant: Literal["auto", "newreno", "dctcp"] = "auto"
    """auto: NewReno on drop-tail FIFOs (the tcp baseline), DCTCP wherever switches mark ECN."""
    min_rto_us: float = 1000.0
    buffer_bytes: int = 4 << 20
    stack: Literal["lean", "ns3"] = "lean"
    """lean: the dctcp and tcp baselines' TCP on the port model is the lean TCP (simulations/cpp/lean_tcp.h:
    ns-3's TCP rules without its sockets and the hosts' IP stacks; tests/test_sim_lean_tcp.py compares the
    two); ns3: ns-3's TCP sockets everywhere (always with ``ports = "ns3"`` and under DLCP's runs)."""


@dataclass(frozen=True)
class RateSpec:
    """Overrides of the DLCP senders' rate-control numbers (:mod:`dlcp.rate_control`); 0: the rule's own."""

    min_bps: float = 0.0
    """The lowest rate (0: a thousandth of the host link; a paced sender's: the rule's, ``paced``)."""
    increase_bps: float = 0.0
    """The additive step per clean verdict (0: a hundredth of the host link; 1/8 of a paced sender's share)."""
    decrease_above: float = 0.0
    """The loss fraction of a verdict above which the rate falls (0: twice the policy's largest bound, >= 2%)."""


@dataclass(frozen=True)
class Workload:
    type: Literal["incast", "background", "ps", "ring", "permutation"]
    tag: str = ""
    start_us: float = 0.0
    # incast / permutation
    senders: int = 0
    receiver: int = -1
    bytes: int = 0
    rounds: int = 1
    gap_us: float = 0.0
    kind: Literal["push", "pull", "reduce_scatter", "all_gather"] = "push"
    transport: Literal["gradient", "tcp"] = "gradient"
    """incast / permutation: the baseline's gradient transport, or always TCP (traffic that is not the job's,
    such as the testbed's incast bursts)."""
    layer: int = 0
    num_layers: int = 1
    # background
    distribution: str = flow_sizes.WEB_SEARCH
    load: float = 0.0
    duration_us: float = 0.0
    max_flow_bytes: int = 0
    # ps / ring
    model: str = ""
    workers: int = 0
    servers: int = 1
    iterations: int = 1
    bucket_bytes: int = 0
    partition_bytes: int = 0
    """ps / ring: a layer larger than this is cut into parts of at most this many bytes before the layers are
    bucketed (BytePS's ``BYTEPS_PARTITION_BYTES``, MXNet's big-array split), so that a PS spreads one large
    layer over several servers rather than serving it whole from one; 0: layers whole."""
    max_buckets: int = 0
    """ps / ring: only the first (front) buckets of the model, for small runs; 0: all of it."""
    gpu_tflops: float = 100.0
    layer_bytes: tuple[int, ...] = ()
    """ps / ring: the buckets' gradient bytes, front first, instead of a ``model``: a model the simulator
    does not define, such as the testbed's; their compute is ``compute_us``, spread over them by size."""
    compute_us: float = 0.0
    """ps / ring: forward plus backward time of one iteration, spread over the buckets by their FLOPs
    (0: from ``gpu_tflops``); for hosts whose time is not FLOPs (a CPU, a testbed's Python loop)."""
    batch: int = 32
    first_host: int = 0
    hosts: tuple[int, ...] = ()
    """ps / ring: the job's hosts in rank order (the workers, then a PS's servers) instead of consecutive hosts
    from ``first_host``: a ring whose consecutive ranks sit on different leaves, as the testbed's leaf-spine
    bench places them."""


@dataclass(frozen=True)
class Scenario:
    name: str = "scenario"
    seed: int = 1
    baseline: str = "dlcp"
    stop_s: float = 1.0
    retransmissions: Literal["paced", "burst"] = "paced"
    """DLCP senders: retransmissions paced at the sender's rate ahead of first passes, or sent at once
    (as the host stack's receive thread does)."""
    host_pacing: Literal["share", "active", "line"] = "share"
    """DLCP senders start at (and never exceed) their share of the narrowest port their data crosses, less the
    wire's headroom, as the controller paces the testbed's hosts (:mod:`dlcp.simulations.pacing`); ``active``:
    each sender paces each receiver at its pair's share over the senders active now
    (:func:`dlcp.rate_control.active_rates`), its line capping the sum; or ``line``: at the host's line rate,
    halving on congestion (an unpaced host). The pfabric baseline is always at the line."""
    probe_timeout_us: float = 1000.0
    """DLCP senders' first probe timeout (it doubles on silence up to ``max_probe_timeout_us``); the host
    stack's is 10 ms (host/endpoint.py), sized for loopback and namespaces, not for 100 Gbit/s fabrics.
    The pfabric baseline ignores both: pFabric's fixed timeout of 3 round trips."""
    max_probe_timeout_us: float = 20000.0
    routing: Literal["dlcp", "global"] = "dlcp"
    """dlcp: O(1) next hops with per-packet spraying; global: ns-3's own global routing (random ECMP)."""
    ports: Literal["dlcp", "ns3"] = "dlcp"
    """dlcp: DLCP's port model (simulations/cpp/port.h: lean devices and links with DLCP's queues, DLCP
    transport straight to the host's port) where routing is ``dlcp`` and switch queues are DLCP's (every
    baseline but dctcp and tcp); ns3: ns-3's point-to-point devices, channels and queue discs. Same
    results (tests/test_sim_ports.py); the port model is faster."""
    topology: TopologySpec = field(default_factory=TopologySpec)
    switch: SwitchSpec = field(default_factory=SwitchSpec)
    tcp: TcpSpec = field(default_factory=TcpSpec)
    rate: RateSpec = field(default_factory=RateSpec)
    dlcp: DLCPConfig = field(default_factory=DLCPConfig)
    workload: tuple[Workload, ...] = ()

    @property
    def features(self) -> Features:
        return BASELINE_FEATURES[self.baseline]

    def with_baseline(self, baseline: str) -> Scenario:
        return validate(dataclasses.replace(self, baseline=baseline))


def load(path: str | Path, **overrides: Any) -> Scenario:
    p = Path(path)
    try:
        data = read_toml(p)
    except TomlFileError as exc:
        raise ScenarioError(f"{p}: {exc.reason}") from None
    data.update(overrides)
    try:
        return from_table(data)
    except ScenarioError as exc:
        raise ScenarioError(f"{p}: {exc}") from None


def from_table(data: dict[str, Any]) -> Scenario:
    data = dict(data)
    known = {f.name for f in dataclasses.fields(Scenario)}
    unknown = set(data) - known
    if unknown:
        raise ScenarioError(f"unknown field(s) {', '.join(sorted(unknown))}")
    try:
        dlcp_cfg = from_dict(data.pop("dlcp", {}))
    except ValueError as exc:
        raise ScenarioError(f"dlcp: {exc}") from None
    loads = data.pop("workload", [])
    if not isinstance(loads, list):
        raise ScenarioError("workload: expected an array of tables ([[workload]])")
    kwargs: dict[str, Any] = {"dlcp": dlcp_cfg}
    for name, cls in (("topology", TopologySpec), ("switch", SwitchSpec), ("tcp", TcpSpec), ("rate", RateSpec)):
        kwargs[name] = _table(cls, data.pop(name, {}), name)
    kwargs["workload"] = tuple(_table(Workload, w, f"workload[{i}]") for i, w in enumerate(loads))
    for name, value in data.items():
        kwargs[name] = _scalar(Scenario, name, value, name)
    return validate(Scenario(**kwargs))


def _table(cls: type, table: Any, path: str) -> Any:
    if not isinstance(table, dict):
        raise ScenarioError(f"{path}: expected a table")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(table) - names
    if unknown:
        raise ScenarioError(f"unknown field(s) {', '.join(f'{path}.{u}' for u in sorted(unknown))}")
    if cls is Workload and "type" not in table:
        raise ScenarioError(f"{path}.type: missing (incast, background, ps, ring or permutation)")
    return cls(**{k: _scalar(cls, k, v, f"{path}.{k}") for k, v in table.items()})


def _scalar(cls: type, name: str, value: Any, path: str) -> Any:
    default = {f.name: f for f in dataclasses.fields(cls)}[name]
    hint = str(default.type)
    if hint.startswith("Literal"):
        allowed = [a.strip().strip("'\"") for a in hint[len("Literal[") : -1].split(",")]
        if value not in allowed:
            raise ScenarioError(f"{path}: must be one of {', '.join(allowed)}, got {value!r}")
        return value
    if hint == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError(f"{path}: expected an integer, got {value!r}")
        return value
    if hint == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScenarioError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if hint == "str":
        if not isinstance(value, str):
            raise ScenarioError(f"{path}: expected a string, got {value!r}")
        return value
    if hint.startswith("tuple"):
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ScenarioError(f"{path}: expected an array of integers, got {value!r}")
        return tuple(value)
    raise ScenarioError(f"{path}: cannot be set in a scenario file")


def _positive(path: str, value: float, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise ScenarioError(f"{path}: must be {'>= 0' if allow_zero else '> 0'}, got {value}")


def validate(s: Scenario) -> Scenario:
    """Check every cross-field rule; returns the scenario or raises ScenarioError naming the field."""
    if s.baseline not in BASELINES:
        raise ScenarioError(f"baseline: unknown baseline {s.baseline!r} (implemented: {', '.join(BASELINES)})")
    _positive("stop_s", s.stop_s)
    _positive("probe_timeout_us", s.probe_timeout_us)
    if s.max_probe_timeout_us < s.probe_timeout_us:
        raise ScenarioError(
            f"max_probe_timeout_us: must be >= probe_timeout_us ({s.probe_timeout_us}), got {s.max_probe_timeout_us}"
        )
    t = s.topology
    for name in ("host_gbps", "fabric_gbps"):
        _positive(f"topology.{name}", getattr(t, name))
    _positive("topology.delay_us", t.delay_us, allow_zero=True)
    _positive("topology.host_down_gbps", t.host_down_gbps, allow_zero=True)
    for name in ("leaves", "spines", "hosts_per_leaf", "hosts", "k"):
        _positive(f"topology.{name}", getattr(t, name))
    if t.bottleneck_host >= 0:
        if t.kind != "star" or t.bottleneck_host >= t.hosts:
            raise ScenarioError(
                f"topology.bottleneck_host: a host of a star (0..{t.hosts - 1}), got {t.bottleneck_host} ({t.kind})"
            )
        _positive("topology.bottleneck_gbps", t.bottleneck_gbps)
    payload = s.dlcp.transport.payload_bytes
    if t.mtu < payload + 40 + 8 + 20 or t.mtu > 65535:
        raise ScenarioError(
            f"topology.mtu: {t.mtu} cannot carry dlcp.transport.payload_bytes = {payload} plus 68 header bytes"
        )
    try:
        size = t.size()  # counted, not built: a fabric too large for the memory is refused by its estimate
    except topology.TopologyError as exc:
        raise ScenarioError(str(exc)) from None
    sw = s.switch
    _positive("switch.buffer_packets", sw.buffer_packets)
    _positive("switch.ecn_threshold_packets", sw.ecn_threshold_packets, allow_zero=True)
    _positive("switch.pfabric_buffer_packets", sw.pfabric_buffer_packets, allow_zero=True)
    if len(sw.drop_thresholds) > 3 or any(v < 0 for v in sw.drop_thresholds):
        raise ScenarioError(
            f"switch.drop_thresholds: up to 3 non-negative values (classes 1..3), got {sw.drop_thresholds}"
        )
    _positive("tcp.min_rto_us", s.tcp.min_rto_us)
    _positive("rate.min_bps", s.rate.min_bps, allow_zero=True)
    _positive("rate.increase_bps", s.rate.increase_bps, allow_zero=True)
    if not 0 <= s.rate.decrease_above < 1:
        raise ScenarioError(f"rate.decrease_above: must be in [0, 1) (0: the rule's), got {s.rate.decrease_above}")
    _positive("tcp.buffer_bytes", s.tcp.buffer_bytes)
    if not s.workload:
        raise ScenarioError("workload: a scenario needs at least one [[workload]]")
    for i, w in enumerate(s.workload):
        _check_workload(w, f"workload[{i}]", size.hosts)
    return s


def _check_workload(w: Workload, path: str, hosts: int) -> None:
    _positive(f"{path}.start_us", w.start_us, allow_zero=True)
    if w.type in ("incast", "permutation"):
        _positive(f"{path}.bytes", w.bytes)
        _positive(f"{path}.rounds", w.rounds)
        _positive(f"{path}.gap_us", w.gap_us, allow_zero=True)
        if w.type == "incast" and not 1 <= w.senders < hosts:
            raise ScenarioError(f"{path}.senders: must be in 1..{hosts - 1} (the fabric has {hosts} hosts)")
        if w.receiver >= hosts:
            raise ScenarioError(f"{path}.receiver: host {w.receiver} does not exist (0..{hosts - 1})")
        if not 0 <= w.layer < w.num_layers:
            raise ScenarioError(f"{path}.layer: must be in 0..num_layers-1, got {w.layer}")
    elif w.type == "background":
        if w.distribution not in flow_sizes.ACCEPTED:
            raise ScenarioError(
                f"{path}.distribution: unknown {w.distribution!r} (known: {', '.join(flow_sizes.ACCEPTED)})"
            )
        if not 0 < w.load < 1:
            raise ScenarioError(f"{path}.load: must be a fraction of the host link rate in (0, 1), got {w.load}")
        _positive(f"{path}.duration_us", w.duration_us)
        _positive(f"{path}.max_flow_bytes", w.max_flow_bytes, allow_zero=True)
    elif w.layer_bytes:
        if w.model:
            raise ScenarioError(f"{path}.layer_bytes: give a model or layer_bytes, not both")
        if any(b <= 0 for b in w.layer_bytes):
            raise ScenarioError(f"{path}.layer_bytes: every bucket must be > 0 bytes, got {list(w.layer_bytes)}")
        _check_job(w, path, hosts)
    else:
        if w.model not in models.MODELS:
            raise ScenarioError(f"{path}.model: unknown model {w.model!r} (known: {', '.join(sorted(models.MODELS))})")
        _check_job(w, path, hosts)


def _check_job(w: Workload, path: str, hosts: int) -> None:
    need = w.workers + (w.servers if w.type == "ps" else 0)
    if w.hosts:
        fits = len(w.hosts) == len(set(w.hosts)) == need and all(0 <= h < hosts for h in w.hosts)
        if w.workers < 2 or not fits:
            raise ScenarioError(
                f"{path}.hosts: {list(w.hosts)} must be {need} distinct hosts of the fabric's {hosts}: "
                + f"{w.workers} workers (at least 2)"
                + (f" and {w.servers} servers" if w.type == "ps" else "")
            )
    elif w.workers < 2 or w.first_host < 0 or w.first_host + need > hosts:
        raise ScenarioError(
            f"{path}.workers: {w.workers} workers"
            + (f" and {w.servers} servers" if w.type == "ps" else "")
            + f" from host {w.first_host} do not fit the fabric's {hosts} hosts (and need >= 2 workers)"
        )
    if w.type == "ps":
        _positive(f"{path}.servers", w.servers)
    _positive(f"{path}.iterations", w.iterations)
    _positive(f"{path}.bucket_bytes", w.bucket_bytes, allow_zero=True)
    _positive(f"{path}.max_buckets", w.max_buckets, allow_zero=True)
    _positive(f"{path}.partition_bytes", w.partition_bytes, allow_zero=True)
    _positive(f"{path}.gpu_tflops", w.gpu_tflops)
    _positive(f"{path}.compute_us", w.compute_us, allow_zero=True)
    _positive(f"{path}.batch", w.batch)
