"""The simulator benchmark: stock ns-3 against DLCP's engine, same fabric and traffic.

Three runs forward the same DLCP permutation traffic over a 256-host leaf-spine
(16 leaves of 16 hosts, 8 spines, 100 Gbit/s), each in its own process, in one
command; the ratios are what to read on a noisy machine. "global" is stock ns-3
(an IPv4 stack and global routing on every switch, point-to-point devices and queue
discs); "dlcp_ns3" is DLCP's routing (O(1) next hops, switches without an IP stack:
routing.h) on ns-3's devices and queue discs; "dlcp" is DLCP's routing on DLCP's
port model (port.h), the default. Rates are given per wall second and per CPU
second of the run (the latter discounts other processes).
"""

from __future__ import annotations

from typing import Any

from dlcp.simulations import runner, scenario

RUNS = {"global": ("global", "ns3"), "dlcp_ns3": ("dlcp", "ns3"), "dlcp": ("dlcp", "dlcp")}
"""The benchmark's runs: name -> (routing, ports)."""


def table(
    routing: str, hosts_per_leaf: int = 16, leaves: int = 16, spines: int = 8, kb: int = 256, ports: str = "dlcp"
) -> dict[str, Any]:
    return {
        "name": f"bench-{routing}-{ports}",
        "seed": 1,
        "stop_s": 1.0,
        "routing": routing,
        "ports": ports,
        "topology": {"kind": "leaf_spine", "leaves": leaves, "spines": spines, "hosts_per_leaf": hosts_per_leaf},
        "switch": {"buffer_packets": 1000},
        "workload": [{"type": "permutation", "bytes": kb * 1024, "rounds": 2, "gap_us": 100}],
    }


def bench(leaves: int = 16, hosts_per_leaf: int = 16, spines: int = 8, kb: int = 256) -> dict[str, Any]:
    tables = {
        name: table(routing, hosts_per_leaf, leaves, spines, kb, ports) for name, (routing, ports) in RUNS.items()
    }
    runner.check_memory([scenario.from_table(t) for t in tables.values()])  # all, before any starts
    out: dict[str, Any] = {}
    for name, t in tables.items():
        r = runner.run(t)
        out[name] = r["perf"] | {"hosts": r["hosts"], "completed": r["flows"]["gradient"]["completed"]}
    for name, key in (("dlcp", "speedup"), ("dlcp_ns3", "speedup_ns3_ports")):
        for rate, suffix in (("packets_per_s", ""), ("packets_per_cpu_s", "_cpu")):
            g, d = out["global"][rate], out[name][rate]
            out[key + suffix] = round(d / g, 2) if g else None
    g, d = out["dlcp_ns3"]["packets_per_cpu_s"], out["dlcp"]["packets_per_cpu_s"]
    out["port_model_cpu"] = round(d / g, 2) if g else None
    return out
