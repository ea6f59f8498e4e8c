"""The routing benchmark: stock ns-3 global routing against DLCP's O(1) routing, same fabric and traffic.

Both runs forward the same DLCP permutation traffic over a 256-host leaf-spine
(16 leaves of 16 hosts, 8 spines, 100 Gbit/s), each in its own process, in one
command; the ratio is what to read on a noisy machine. "global" is stock ns-3
(an IPv4 stack and global routing on every switch); "dlcp" is DLCP's routing
(O(1) next hops, switches without an IP stack: routing.h). Rates are given per
wall second and per CPU second of the run (the latter discounts other processes).
"""

from __future__ import annotations

from typing import Any

from dlcp.simulations import runner, scenario


def table(routing: str, hosts_per_leaf: int = 16, leaves: int = 16, spines: int = 8, kb: int = 256) -> dict[str, Any]:
    return {
        "name": f"bench-{routing}",
        "seed": 1,
        "stop_s": 1.0,
        "routing": routing,
        "topology": {"kind": "leaf_spine", "leaves": leaves, "spines": spines, "hosts_per_leaf": hosts_per_leaf},
        "switch": {"buffer_packets": 1000},
        "workload": [{"type": "permutation", "bytes": kb * 1024, "rounds": 2, "gap_us": 100}],
    }


def bench(leaves: int = 16, hosts_per_leaf: int = 16, spines: int = 8, kb: int = 256) -> dict[str, Any]:
    tables = {routing: table(routing, hosts_per_leaf, leaves, spines, kb) for routing in ("global", "dlcp")}
    runner.check_memory([scenario.from_table(t) for t in tables.values()])  # both, before either starts
    out: dict[str, Any] = {}
    for routing, t in tables.items():
        r = runner.run(t)
        out[routing] = r["perf"] | {"hosts": r["hosts"], "completed": r["flows"]["gradient"]["completed"]}
    g, d = out["global"]["packets_per_s"], out["dlcp"]["packets_per_s"]
    out["speedup"] = round(d / g, 2) if g else None
    g, d = out["global"]["packets_per_cpu_s"], out["dlcp"]["packets_per_cpu_s"]
    out["speedup_cpu"] = round(d / g, 2) if g else None
    return out
