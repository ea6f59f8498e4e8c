"""Generated fabrics: ``[topology]`` expands into the ``[[switch]]``, ``[[host]]`` and ``[[link]]`` tables.

* ``kind = "star"``: one switch ``s1``, ``hosts`` hosts ``h1..hN`` on ports 1..N.
* ``kind = "leaf-spine"``: ``leaves`` leaves, ``spines`` spines, ``hosts_per_leaf`` hosts on each
  leaf (ports 1..H), leaf port H+s goes to spine s, spine port l to leaf l.
* ``kind = "fat-tree"``: the k-ary fat-tree (``k`` even): k pods of k/2 edge and k/2 aggregation
  switches, (k/2)^2 cores; ``hosts_per_edge`` hosts (default k/2) on each edge switch.

Links are named ``h1-s1``, ``leaf1-spine2``, ``edge1_1-agg1_2``, ``agg1_1-core1``; their settings
come from ``host_link`` and ``fabric_link`` (rate, buffer, mtu, delay, loss), and a ``[[link]]``
entry with a generated name overrides them for that link (a bottleneck). Addresses are left
to the allocator (:mod:`dlcp.controller.fabric`).
"""

from __future__ import annotations

from typing import Any

Tables = dict[str, list[dict[str, Any]]]
KINDS = ("star", "leaf-spine", "fat-tree")
_LINK_KEYS = {"rate", "buffer", "mtu", "delay", "loss"}


class TopologyError(ValueError):
    pass


def _count(table: dict[str, Any], key: str, default: int | None, lo: int, hi: int) -> int:
    value = table.get(key, default)
    if value is None:
        raise TopologyError(f"topology.{key}: required for kind {table.get('kind')!r}")
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise TopologyError(f"topology.{key}: must be an integer in {lo}..{hi}, got {value!r}")
    return value


def expand(table: Any) -> Tables:
    """The switch, host and link tables of a generated fabric."""
    if not isinstance(table, dict):
        raise TopologyError("topology: expected a table")
    kind = table.get("kind")
    allowed = {
        "star": {"hosts"},
        "leaf-spine": {"leaves", "spines", "hosts_per_leaf"},
        "fat-tree": {"k", "hosts_per_edge"},
    }
    if kind not in allowed:
        raise TopologyError(f"topology.kind: must be one of {', '.join(KINDS)}, got {kind!r}")
    unknown = set(table) - allowed[kind] - {"kind", "host_link", "fabric_link"}
    if unknown:
        raise TopologyError(f"unknown field(s) {', '.join('topology.' + u for u in sorted(unknown))} for {kind}")
    host_link = _link_settings(table, "host_link")
    fabric_link = _link_settings(table, "fabric_link")
    out: Tables = {"switch": [], "host": [], "link": []}

    def switch(name: str) -> dict[str, Any]:
        sw: dict[str, Any] = {"name": name, "ports": {}}
        out["switch"].append(sw)
        return sw

    def host(name: str, sw: dict[str, Any], port: int) -> None:
        link = f"{name}-{sw['name']}"
        sw["ports"][str(port)] = link
        out["host"].append({"name": name, "switch": sw["name"], "port": port})
        out["link"].append({"name": link, **host_link})

    def cable(a: dict[str, Any], pa: int, b: dict[str, Any], pb: int) -> None:
        link = f"{a['name']}-{b['name']}"
        a["ports"][str(pa)] = link
        b["ports"][str(pb)] = link
        out["link"].append({"name": link, **fabric_link})

    if kind == "star":
        s1 = switch("s1")
        for i in range(1, _count(table, "hosts", None, 1, 500) + 1):
            host(f"h{i}", s1, i)
    elif kind == "leaf-spine":
        n_leaves = _count(table, "leaves", None, 1, 64)
        n_spines = _count(table, "spines", None, 1, 64)
        per_leaf = _count(table, "hosts_per_leaf", None, 1, 256)
        leaves = [switch(f"leaf{i}") for i in range(1, n_leaves + 1)]
        spines = [switch(f"spine{i}") for i in range(1, n_spines + 1)]
        n = 0
        for li, leaf in enumerate(leaves, 1):
            for p in range(1, per_leaf + 1):
                n += 1
                host(f"h{n}", leaf, p)
            for si, spine in enumerate(spines, 1):
                cable(leaf, per_leaf + si, spine, li)
    else:
        k = _count(table, "k", None, 2, 16)
        if k % 2:
            raise TopologyError(f"topology.k: must be even, got {k}")
        half = k // 2
        per_edge = _count(table, "hosts_per_edge", half, 1, 64)
        cores = [switch(f"core{i}") for i in range(1, half * half + 1)]
        n = 0
        for pod in range(1, k + 1):
            edges = [switch(f"edge{pod}_{i}") for i in range(1, half + 1)]
            aggs = [switch(f"agg{pod}_{i}") for i in range(1, half + 1)]
            for edge in edges:
                for p in range(1, per_edge + 1):
                    n += 1
                    host(f"h{n}", edge, p)
            for ei, edge in enumerate(edges, 1):
                for ai, agg in enumerate(aggs, 1):
                    cable(edge, per_edge + ai, agg, ei)
            for ai, agg in enumerate(aggs):
                for j in range(half):
                    core = cores[ai * half + j]
                    cable(agg, half + j + 1, core, pod)
    return out


def _link_settings(table: dict[str, Any], key: str) -> dict[str, Any]:
    value = table.get(key, {})
    if not isinstance(value, dict):
        raise TopologyError(f"topology.{key}: expected a table of link settings")
    unknown = set(value) - _LINK_KEYS
    if unknown:
        raise TopologyError(f"unknown field(s) {', '.join(f'topology.{key}.{u}' for u in sorted(unknown))}")
    return dict(value)


def merge(generated: Tables, doc: dict[str, Any]) -> Tables:
    """Apply the file's ``[[link]]`` and ``[[host]]`` entries to the generated ones, by name."""
    if doc.get("switch"):
        raise TopologyError("switch: a generated fabric ([topology]) takes no [[switch]] entries")
    out = {k: [dict(v) for v in vs] for k, vs in generated.items()}
    for kind, keys in (("link", _LINK_KEYS), ("host", {"ip", "mac"})):
        entries = doc.get(kind, [])
        if not isinstance(entries, list):
            raise TopologyError(f"{kind}: expected an array of tables ([[{kind}]])")
        by_name = {e["name"]: e for e in out[kind]}
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or "name" not in entry:
                raise TopologyError(f"{kind}[{i}]: needs a name")
            target = by_name.get(entry["name"])
            if target is None:
                raise TopologyError(
                    f"{kind}[{i}].name: {entry['name']!r} is not in the generated fabric (e.g. {next(iter(by_name))})"
                )
            unknown = set(entry) - keys - {"name"}
            if unknown:
                raise TopologyError(
                    f"{kind}[{i}]: a generated {kind} takes only {', '.join(sorted(keys))}, not {sorted(unknown)}"
                )
            target.update(entry)
    return out
