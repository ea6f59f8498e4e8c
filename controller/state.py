"""The desired state of every switch, computed from the fabric and its jobs (no switch is contacted)."""

from __future__ import annotations

from collections import Counter

import finsy as fy

from dlcp.controller import classification, ecmp, routing, selective_drop, trim_sessions
from dlcp.controller.entries import Entry
from dlcp.controller.fabric import FabricError
from dlcp.controller.model import Fabric
from dlcp.controller.paths import Paths
from dlcp.p4 import names, sizes

CAPACITY = {
    names.IPV4_ROUTES: sizes.TABLE_SIZES["IPV4_ROUTES_SIZE"],
    names.NEXT_HOPS: sizes.TABLE_SIZES["ECMP_GROUPS"],
    names.DLCP_PORTS: sizes.TABLE_SIZES["DLCP_PORTS_SIZE"],
    names.DLCP_CLASSES: sizes.TABLE_SIZES["DLCP_CLASSES_SIZE"],
    names.DLCP_DROP_THRESHOLDS: sizes.TABLE_SIZES["DLCP_DROP_THRESHOLDS_SIZE"],
    names.TRIM_SESSIONS: sizes.TABLE_SIZES["TRIM_SESSIONS_SIZE"],
}
"""Entries each table holds (the P4 program's ``size``)."""


def job_switches(fabric: Fabric, paths: Paths, job_id: int) -> set[str]:
    """The switches a job's packets may cross."""
    job = fabric.jobs[job_id]
    return {sw for a, b in job.pairs() for sw, _ in paths.hops(a, b)}


def desired(fabric: Fabric) -> dict[str, list[Entry]]:
    """Switch name -> the entries it should hold. Raises :class:`FabricError` when a table would overflow."""
    paths = Paths(fabric)
    on_switch = {job_id: job_switches(fabric, paths, job_id) for job_id in fabric.jobs}
    out: dict[str, list[Entry]] = {}
    errs = []
    for name in fabric.switches:
        sets = routing.next_hop_sets(fabric, paths, name)
        groups, route_groups = ecmp.assign(sets)
        state = ecmp.entries(fabric, name, groups) + routing.entries(fabric, route_groups)
        for job in sorted(fabric.jobs.values(), key=lambda j: j.id):
            if name in on_switch[job.id]:
                state += classification.port_entries(job) + classification.class_entries(job)
        state += selective_drop.entries(fabric, paths, name)
        try:
            state += trim_sessions.entries(fabric.switches[name])
        except ValueError as exc:
            errs.append(str(exc))
        counts = Counter(e.entity.table_id for e in state if isinstance(e.entity, fy.P4TableEntry))
        for table, n in counts.items():
            if n > CAPACITY[table]:
                errs.append(f"switch.{name}: {n} entries for {table}, which holds {CAPACITY[table]}")
        out[name] = state
    if errs:
        raise FabricError(errs, fabric.source)
    return out
