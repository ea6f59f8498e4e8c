"""The simulator benchmark: stock ns-3 against DLCP's engine, same fabric and traffic.

Three runs forward the same DLCP permutation traffic over a 256-host leaf-spine
(16 leaves of 16 hosts, 8 spines, 100 Gbit/s), each in its own process, in one
command; the ratios are what to read on a noisy machine. "global" is stock ns-3
(an IPv4 stack and global routing on every switch, point-to-point devices and queue
discs); "dlcp_ns3" is DLCP's routing (O(1) next hops, switches without an IP stack:
routing.h) on ns-3's devices and queue discs; "dlcp" is DLCP's routing on DLCP's
port model (port.h), the default. With ``baselines``, the same traffic over the
DCTCP and TCP baselines (RED/ECN and drop-tail switch queues, persistent TCP
connections) runs on ns-3's devices and queue discs ("dctcp_ns3", "tcp_ns3") and on
the port model ("dctcp", "tcp"). Rates are given per wall second and per CPU second
of the run (the latter discounts other processes).
"""

from __future__ import annotations

from typing import Any

from dlcp.simulations import runner, scenario, simulate

RUNS = {"global": ("dlcp", "global", "ns3"), "dlcp_ns3": ("dlcp", "dlcp", "ns3"), "dlcp": ("dlcp", "dlcp", "dlcp")}
"""The benchmark's runs: name -> (baseline, routing, ports)."""
BASELINE_RUNS = {
    name: (baseline, "dlcp", ports)
    for baseline in ("dctcp", "tcp")
    for name, ports in ((f"{baseline}_ns3", "ns3"), (baseline, "dlcp"))
}
"""With ``baselines``: the TCP baselines on ns-3's devices and queue discs, then on the port model."""


def table(
    routing: str,
    hosts_per_leaf: int = 16,
    leaves: int = 16,
    spines: int = 8,
    kb: int = 256,
    ports: str = "dlcp",
    baseline: str = "dlcp",
) -> dict[str, Any]:
    return {
        "name": f"bench-{baseline}-{routing}-{ports}",
        "seed": 1,
        "stop_s": 1.0,
        "baseline": baseline,
        "routing": routing,
        "ports": ports,
        "topology": {"kind": "leaf_spine", "leaves": leaves, "spines": spines, "hosts_per_leaf": hosts_per_leaf},
        "switch": {"buffer_packets": 1000},
        "workload": [{"type": "permutation", "bytes": kb * 1024, "rounds": 2, "gap_us": 100}],
    }


def _ratio(out: dict[str, Any], new: str, old: str, rate: str) -> float | None:
    o, n = out[old][rate], out[new][rate]
    return round(n / o, 2) if o else None


def bench(
    leaves: int = 16, hosts_per_leaf: int = 16, spines: int = 8, kb: int = 256, baselines: bool = False
) -> dict[str, Any]:
    runs = RUNS | (BASELINE_RUNS if baselines else {})
    tables = {
        name: table(routing, hosts_per_leaf, leaves, spines, kb, ports, baseline)
        for name, (baseline, routing, ports) in runs.items()
    }
    simulate.check_memory([scenario.from_table(t) for t in tables.values()])  # all, before any starts
    out: dict[str, Any] = {}
    for name, t in tables.items():
        r = runner.run(t)
        out[name] = r["perf"] | {"hosts": r["hosts"], "completed": r["flows"]["gradient"]["completed"]}
    for name, key in (("dlcp", "speedup"), ("dlcp_ns3", "speedup_ns3_ports")):
        for rate, suffix in (("packets_per_s", ""), ("packets_per_cpu_s", "_cpu")):
            out[key + suffix] = _ratio(out, name, "global", rate)
    out["port_model_cpu"] = _ratio(out, "dlcp", "dlcp_ns3", "packets_per_cpu_s")
    if baselines:
        for baseline in ("dctcp", "tcp"):
            out[f"port_model_cpu_{baseline}"] = _ratio(out, baseline, f"{baseline}_ns3", "packets_per_cpu_s")
    return out
