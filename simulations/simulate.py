"""One scenario in this process: build the fabric in the simulator, add the traffic, run, summarise.

ns-3's simulator is a process-wide singleton, so :func:`simulate` runs once per
process: in a simulation process (:mod:`dlcp.simulations.child`), which
:mod:`dlcp.simulations.runner` starts. The memory estimate that decides whether
runs fit (:func:`check_memory`) is here too, beside what it estimates.
"""

from __future__ import annotations

import logging
import math
import resource
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from dlcp import rate_control, resources
from dlcp.frames import IPV4_HEADER, PPP_HEADER_BYTES
from dlcp.p4 import sizes
from dlcp.protocol import NUM_PRIORITY_CLASSES, UDP_PORT, PacketType
from dlcp.simulations import engine, pacing, workloads
from dlcp.simulations.scenario import Scenario

log = logging.getLogger(__name__)

WIRE_OVERHEAD = IPV4_HEADER.size + PPP_HEADER_BYTES
"""Bytes below UDP per packet: IPv4 header and ns-3's point-to-point (PPP) header (DLCP's ports,
port.cc, count the same bytes)."""
PFABRIC_THRESHOLDS = (16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)
"""pfabric: remaining-size cuts (bytes) between its classes, shortest remaining in the top data class."""
PFABRIC_RTO_RTTS = 3.0
"""pfabric: its retransmission timeout in base round trips (the paper's 3 RTTs at 10 Gbit/s: 45 us)."""
PATH_LINKS = {"star": 2, "leaf_spine": 4, "fat_tree": 6}
BASE_MB = 260.0
"""Memory of a process with the simulator loaded and an empty fabric (measured: about 215 MB)."""
MODEL_MB = 320.0
"""A ps or ring workload reads its model's layers from torch (simulations/models.py): torch's import
(measured: about 300 MB)."""
MEMORY_SHARE = 0.8
"""The share of ``MemAvailable`` a sweep's simulations may use at once."""


class MemoryRefused(RuntimeError):
    """The simulation would not fit in this machine's memory."""


def fabric_memory_mb(s: Scenario, nodes: int, links: int) -> float:
    """The part of :func:`estimate_memory_mb` the fabric alone needs: the process, every switch port's buffer full
    at once (1.5 KB a queued packet: the packet, its header bytes, its queue item), per node and port the ns-3
    objects, and torch's import where a workload reads a model."""
    ports = 2 * links
    buffered = ports * s.switch.buffer_packets * 1.5e-3
    per_node = nodes * 0.06 + ports * 0.03
    model = MODEL_MB if any(w.model for w in s.workload) else 0.0
    return BASE_MB + model + buffered + per_node


def estimate_memory_mb(s: Scenario, traffic: workloads.Traffic, nodes: int, links: int) -> float:
    """A coarse, deliberately high estimate of a run's peak memory (docs/simulations.md).

    Packets carry no payload bytes in the simulator (ns-3's zero-filled virtual data), so
    what grows is the fabric's part (:func:`fabric_memory_mb`) and the traffic's: per
    message its sender and receiver state (2 KB) and a few bytes per packet (bitmaps, drop
    classes); 30 KB per TCP connection's sockets (one per pair of hosts and tag,
    tcp_channels.h); per training job the same for every push and pull of every worker, all
    alive at once.
    """
    payload = s.dlcp.transport.payload_bytes
    packets = sum(m.bytes for m in traffic.messages) / payload
    connections = {
        (m.tag, min(m.src, m.dst), max(m.src, m.dst)) for m in traffic.messages if m.transport != workloads.DLCP
    }
    msgs = packets * 64e-6 + len(traffic.messages) * 2e-3 + len(connections) * 30e-3
    jobs = 0.0
    for j in traffic.jobs:
        per_iteration = len(j.workers) * 2 * len(j.layer_bytes)
        jobs += sum(j.layer_bytes) * len(j.workers) * 2 / payload * 64e-6 + per_iteration * j.iterations * 2e-3
    return fabric_memory_mb(s, nodes, links) + msgs + jobs


def memory_estimate(s: Scenario, limit_mb: float = float("inf")) -> float:
    """The scenario's memory estimate (MB), from its fabric and generated traffic.

    Where the fabric's part alone (from its counts, nothing built) is over ``limit_mb``, that part is returned: the
    whole estimate is larger still, and a fabric of a million hosts is refused without building it or its traffic.
    """
    size = s.topology.size()
    fabric_mb = fabric_memory_mb(s, size.nodes, size.links)
    if fabric_mb > limit_mb:
        return fabric_mb
    traffic = workloads.generate(s.workload, size.hosts, s.topology.host_gbps * 1e9, s.features, s.dlcp.policy, s.seed)
    return estimate_memory_mb(s, traffic, size.nodes, size.links)


def available_mb() -> float:
    avail = resources.available_memory()
    return float("inf") if avail is None else avail / 2**20


def check_memory(scenarios: Sequence[Scenario], parallel: int = 1, limit_mb: float | None = None) -> list[float]:
    """Refuse, before any simulation starts, what this machine's memory cannot hold; returns the estimates.

    Each run alone, and the ``parallel`` largest at once, must fit in ``limit_mb`` (default:
    80% of ``MemAvailable``).
    """
    limit = available_mb() * MEMORY_SHARE if limit_mb is None else limit_mb
    estimates = [memory_estimate(s, limit) for s in scenarios]
    where = "80% of MemAvailable" if limit_mb is None else "the limit given"
    for s, est in zip(scenarios, estimates, strict=True):
        if est > limit:
            raise MemoryRefused(
                f"scenario {s.name!r} needs about {est:.0f} MB by estimate, over the {limit:.0f} MB this machine can"
                f" give ({where}); make it smaller (hosts, buffer_packets, workload sizes)"
            )
    at_once = sum(sorted(estimates, reverse=True)[: max(1, parallel)])
    if parallel > 1 and at_once > limit:
        raise MemoryRefused(
            f"{parallel} simulations at a time need about {at_once:.0f} MB by estimate, over the {limit:.0f} MB"
            f" this machine can give ({where}); run fewer at a time (--parallel)"
        )
    return estimates


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started (its image: ``VmHWM``).

    Not ``getrusage``'s ``ru_maxrss``: Linux carries that across fork and exec, so a simulation
    started by a large process (a test session of 1.5 GB) would report its parent's peak.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def base_rtt_s(s: Scenario) -> float:
    """The longest host-to-host round trip of an empty fabric: propagation and one full packet per hop."""
    t = s.topology
    hop = t.delay_us * 1e-6 + t.mtu * 8 / (t.fabric_gbps * 1e9)
    return 2 * PATH_LINKS[t.kind] * hop


def pfabric_buffer_packets(s: Scenario) -> int:
    """pFabric's buffer: two bandwidth-delay products of the longest host-to-host round trip."""
    if s.switch.pfabric_buffer_packets:
        return s.switch.pfabric_buffer_packets
    t = s.topology
    return max(8, math.ceil(2 * base_rtt_s(s) * t.host_gbps * 1e9 / 8 / t.mtu))


def _install_tables(sim: Any, s: Scenario, ns: Any) -> None:
    """The controller's entries on every DLCP switch: data classes are drop-eligible by class."""
    policy = s.dlcp.policy
    action = 2 if s.switch.congestion_action == "trim" else 1
    any_ = (0, 0)
    for prio in range(policy.data_classes if s.features.selective_drop else 0):
        vm = [*any_, int(PacketType.DATA), 0xF, prio, 0xFF, *any_, *any_]
        sim.AddClassRule(10, vm, 1, prio)  # mark_drop_eligible, queue = its class
        for drop_class, threshold in enumerate(s.switch.drop_thresholds, start=1):
            sim.SetDlcpThreshold(prio, drop_class, action, threshold)
    if s.dlcp.transport.port != UDP_PORT:
        sim.AddDlcpPort(s.dlcp.transport.port)


def simulate(s: Scenario, refuse_over_mb: float | None = None) -> dict[str, Any]:
    """Run one scenario in this process (once per process: ns-3's simulator is global).

    The memory check belongs before the process starts (:func:`run`, :func:`check_memory`);
    ``refuse_over_mb`` refuses here too, for in-process use.
    """
    wall0 = time.monotonic()
    fabric = s.topology.fabric()
    host_bps = s.topology.host_gbps * 1e9
    feat = s.features
    traffic = workloads.generate(s.workload, fabric.hosts, host_bps, feat, s.dlcp.policy, s.seed)
    est = estimate_memory_mb(s, traffic, fabric.nodes, len(fabric.links))
    if refuse_over_mb is not None and est > refuse_over_mb:
        raise MemoryRefused(
            f"scenario {s.name!r} needs about {est:.0f} MB by estimate, over the {refuse_over_mb:.0f} MB given"
        )
    ns = engine.load()
    sim = ns.Simulation(s.seed)
    for n in range(fabric.nodes):
        sim.AddNode(fabric.is_host(n))
    for link in fabric.links:
        sim.AddLink(link.a, link.b, link.rate_bps, link.delay_s, link.rate_ba_bps)
    sim.SetMtu(s.topology.mtu)
    buffer = pfabric_buffer_packets(s) if feat.srpt else s.switch.buffer_packets
    sim.SetSwitchQueue(feat.queue, buffer, s.switch.ecn_threshold_packets if feat.queue != "fifo" else 0)
    sim.SetBufferPolicy(s.switch.buffer_policy)
    sim.SetSpraying(feat.spraying)
    sim.SetRouting(s.routing)
    sim.SetPorts(s.ports)
    tp = ns.TransportParams()
    tp.payload_bytes = s.dlcp.transport.payload_bytes
    tp.job_id = s.dlcp.job.id
    tp.rate = _rate_rule(ns, s, rate_control.unpaced(host_bps / 8, s.dlcp.policy.largest_bound))
    if s.host_pacing == "active" and not feat.srpt:
        _active_shares(sim, fabric, traffic, s.dlcp.transport.payload_bytes, feat.spraying)
        # Each receiver paced at its pair's share over the active senders; the host's own rule caps their sum at
        # its line, less the same headroom.
        tp.rate = _rate_rule(
            ns,
            s,
            rate_control.paced(
                host_bps * rate_control.headroom(s.dlcp.transport.payload_bytes) / 8, s.dlcp.policy.largest_bound
            ),
        )
    if s.host_pacing == "share" and not feat.srpt:
        shares = pacing.host_rates(fabric, traffic, s.dlcp.transport.payload_bytes, feat.spraying)
        tp.host_rates = [
            _rate_rule(ns, s, rate_control.paced(shares[h] / 8, s.dlcp.policy.largest_bound))
            if h in shares
            else tp.rate
            for h in range(fabric.hosts)
        ]
    tp.wire_overhead = WIRE_OVERHEAD
    tp.line_rate = host_bps / 8
    tp.pace_retx = s.retransmissions == "paced"
    tp.initial_rto = s.probe_timeout_us * 1e-6
    tp.max_rto = s.max_probe_timeout_us * 1e-6
    if feat.srpt:
        tp.srpt_thresholds = list(PFABRIC_THRESHOLDS)
        tp.top_data_class = s.dlcp.policy.data_classes - 1
        # pFabric's transport: line rate always (its priorities, not the senders, share the
        # bottleneck; it backs off only after repeated timeouts, not modelled), and a fixed
        # timeout of about 3 round trips (Alizadeh et al. 2013, section 4.2).
        line = tp.rate
        line.decrease_above = 1.0  # never a congestion verdict
        tp.rate = line
        tp.initial_rto = tp.max_rto = PFABRIC_RTO_RTTS * base_rtt_s(s)
    sim.SetTransport(tp)
    mss = s.topology.mtu - 20 - 20 - 12  # IPv4, TCP and the timestamp option
    variant = s.tcp.variant if s.tcp.variant != "auto" else "newreno" if feat.queue == "fifo" else "dctcp"
    sim.SetTcp(variant, s.tcp.min_rto_us * 1e-6, mss, s.tcp.buffer_bytes)
    sim.SetTcpStack(s.tcp.stack)
    _install_tables(sim, s, ns)
    sim.Build()
    if s.routing == "dlcp":
        _install_routes(sim, fabric)
    ids: list[tuple[int, str]] = []
    for m in traffic.messages:
        meta = ns.MessageMeta()
        meta.transport, meta.kind, meta.layer, meta.priority = m.transport, m.kind, m.layer, m.priority
        meta.loss_bound = m.loss_bound
        meta.drop_fractions = list(m.drop_fractions)
        ids.append((sim.AddMessage(m.src, m.dst, m.start_s, m.bytes, meta, traffic.tag_id(m.tag)), m.tag))
    for job in traffic.jobs:
        spec = ns.JobSpec()
        spec.mode, spec.transport, spec.iterations, spec.start = job.mode, job.transport, job.iterations, job.start_s
        spec.tag = traffic.tag_id(job.tag)
        spec.workers, spec.servers = list(job.workers), list(job.servers)
        spec.layer_bytes, spec.forward_s, spec.backward_s = (
            list(job.layer_bytes),
            list(job.forward_s),
            list(job.backward_s),
        )
        spec.priority, spec.push_bound, spec.pull_bound = list(job.priority), list(job.push_bound), list(job.pull_bound)
        spec.ring_weights = pacing.ring_weights(fabric, job, s.dlcp.transport.payload_bytes, host_bps, feat.spraying)
        spec.push_drop_fractions, spec.pull_drop_fractions = (
            list(job.push_drop_fractions),
            list(job.pull_drop_fractions),
        )
        sim.AddJob(spec)
    build_s = time.monotonic() - wall0
    t0, c0 = time.monotonic(), time.process_time()
    sim.Run(s.stop_s)
    run_s, cpu_s = time.monotonic() - t0, time.process_time() - c0
    out = summarise(s, sim, traffic, len(traffic.jobs))
    sw = out["counters"]
    out["perf"] = {
        "build_s": round(build_s, 3),
        "wall_s": round(run_s, 3),
        "events": int(sim.Events()),
        "packets": sw["host_rx_packets"],
        "packet_hops": sw["switch_forwarded"],
        "packets_per_s": round(sw["host_rx_packets"] / run_s) if run_s > 0 else 0,
        # CPU time of the run: on a shared machine, wall time also counts other processes' turns.
        "cpu_s": round(cpu_s, 3),
        "packets_per_cpu_s": round(sw["host_rx_packets"] / cpu_s) if cpu_s > 0 else 0,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "port_model": bool(sim.UsesPortModel()),
        "memory_estimate_mb": round(est),
    }
    return out


def _active_shares(sim: Any, fabric: Any, traffic: workloads.Traffic, payload_bytes: int, spraying: bool) -> None:
    """The simulator's mirror of :func:`dlcp.rate_control.active_rates`: every port's rate and every DLCP data
    pair's path, its senders counted as their messages start and finish."""
    rates = pacing.port_rates(fabric)
    index = {port: i for i, port in enumerate(rates)}
    shares = sim.Shares()
    shares.SetPorts(list(rates.values()))
    shares.SetHeadroom(rate_control.headroom(payload_bytes))
    for (src, dst), through in pacing.pair_paths(fabric, pacing.data_pairs(traffic), spraying).items():
        shares.SetPath(src, dst, [index[p] for p in through], list(through.values()))
    sim.SetActivePacing(True)


def _rate_rule(ns: Any, s: Scenario, rule: rate_control.RateRule) -> Any:
    """The core's rule as the simulator's ``RateRule``, with the scenario's ``[rate]`` overrides."""
    out = ns.RateRule()
    out.max_rate = rule.max_rate
    out.min_rate = min(rule.max_rate, s.rate.min_bps / 8 or rule.min_rate)
    out.increase = s.rate.increase_bps / 8 or rule.increase
    out.decrease_above = s.rate.decrease_above or rule.decrease_above
    out.decrease_by_loss = rule.decrease_by_loss
    return out


def _install_routes(sim: Any, fabric: Any) -> None:
    table = fabric.next_hops()
    adj = fabric.neighbours()
    for h in range(fabric.hosts):
        sim.SetGroup(h, 0, [adj[h][0]])
        sim.SetDefaultGroup(h, 0)
    for node in range(fabric.hosts, fabric.nodes):
        groups: dict[tuple[int, ...], int] = {}
        host_gid = [-1] * fabric.hosts
        for dst, hops in table[node].items():
            host_gid[dst] = groups.setdefault(hops, len(groups))
        for hops, gid in groups.items():
            sim.SetGroup(node, gid, list(hops))
        sim.SetHostGroups(node, host_gid)


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else float("nan")


def summarise(s: Scenario, sim: Any, traffic: workloads.Traffic, njobs: int) -> dict[str, Any]:
    n = int(sim.NumRecords())
    fields = ("tag", "transport", "bytes", "start", "end", "lost_elems", "elems", "packets", "retx", "trimmed")
    rec = {f: np.empty(n) for f in fields}
    for i in range(n):
        r = sim.Record(i)
        for f in fields:
            rec[f][i] = getattr(r, f)
    flows: dict[str, Any] = {}
    for tid, tag in enumerate(traffic.tags):
        sel = rec["tag"] == tid
        done = sel & (rec["end"] >= 0)
        fct = (rec["end"] - rec["start"])[done]
        elems = rec["elems"][sel]
        flows[tag] = {
            "count": int(sel.sum()),
            "completed": int(done.sum()),
            "bytes": int(rec["bytes"][sel].sum()),
            "fct_mean_s": float(fct.mean()) if fct.size else float("nan"),
            "fct_p50_s": _pct(fct, 50),
            "fct_p99_s": _pct(fct, 99),
            "fct_max_s": float(fct.max()) if fct.size else float("nan"),
            "loss_fraction": float(rec["lost_elems"][sel].sum() / elems.sum()) if elems.sum() else 0.0,
            "retransmitted_packets": int(rec["retx"][sel].sum()),
            "trimmed_packets": int(rec["trimmed"][sel].sum()),
        }
    jobs = []
    for j in range(njobs):
        ends = list(sim.JobIterationEnds(j))
        start = traffic.jobs[j].start_s
        prev = [start, *ends[:-1]]
        times = [e - p if e >= 0 and p >= 0 else float("nan") for e, p in zip(ends, prev, strict=True)]
        jobs.append({"tag": traffic.jobs[j].tag, "iteration_ends_s": ends, "iteration_s": times})
    h = sim.Hosts()
    sw = sim.Switches()
    per_class = {
        name: [int(v) for v in getattr(sw, name)]
        for name in ("forwarded", "dropped", "trimmed", "overflow", "pushed_out", "marked")
    }
    if len(per_class["forwarded"]) != NUM_PRIORITY_CLASSES:
        raise RuntimeError("the simulator's class count differs from dlcp.protocol's (stale library?)")
    counters: dict[str, Any] = {
        "dlcp_data_sent": int(h.data_sent),
        "dlcp_data_received": int(h.data_received),
        "dlcp_trimmed_received": int(h.trimmed_received),
        "dlcp_control_sent": int(h.control_sent),
        "dlcp_control_received": int(h.control_received),
        "dlcp_duplicates": int(h.duplicates),
        "dlcp_late": int(h.late),
        "qdisc_received": int(sw.qdisc_received),
        "qdisc_dropped": int(sw.qdisc_dropped),
        "qdisc_sent": int(sw.qdisc_sent),
        "switch_forwarded": int(sw.switch_forwarded),
        "host_rx_packets": int(sw.host_rx_packets),
        "route_lookups": int(sw.route_lookups),
        "switch_dropped": int(sw.switch_dropped),
        # the port model's switch ports: packets an arrival found queued, on average and at most
        "queue_at_arrival_mean": round(int(sw.arrival_depth_sum) / max(1, int(sw.switch_arrivals)), 3),
        "queue_at_arrival_peak": int(sw.arrival_depth_peak),
        # seconds DLCP senders' pacers added over their lines (per data packet: interval less line time)
        "pacing_excess_s": round(float(h.pacing_excess_s), 6),
        "tcp_connections": int(sim.TcpConnections()),
        "per_class": per_class,
    }
    hosts = s.topology.fabric().hosts
    return {
        "scenario": s.name,
        "baseline": s.baseline,
        "seed": s.seed,
        "hosts": hosts,
        "sim_time_s": float(sim.Now()),
        # Every DLCP sender's rate where its rate control left it (bits/s, host order): a paced sender
        # starts at its share, an unpaced one at the line.
        "host_rate_bps": [round(float(sim.HostRate(h)) * 8) for h in range(hosts)],
        # Seconds each host's pacer added over its line (counters.pacing_excess_s, per host).
        "host_pacing_excess_s": [round(float(sim.HostPacingExcess(h)), 6) for h in range(hosts)],
        "flows": flows,
        "jobs": jobs,
        "counters": counters,
        "trim_queue": sizes.TRIM_QUEUE,
    }
