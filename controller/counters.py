"""Counters control (``p4src/v1model/counters.p4``): forwarded, dropped and trimmed, per port and class.

The P4 program counts packets and bytes per (egress port, queue): ``forwarded`` in
egress, ``dropped`` and ``trimmed`` in ingress where the decision is taken, under
the queue the packet was headed for. There is no job in the index, so a cell is
given to a job when the job's traffic may leave by that port (its paths) in that
queue (its classes, :func:`dlcp.controller.modes.queues_of`) and no other job's
may; a cell that several jobs may share is reported as shared, never split.

Per job: ``delivered`` is what left the fabric toward the job's hosts (forwarded
on the ports that face them), so a packet is counted once however many switches
it crossed; ``dropped`` and ``trimmed`` add up over every switch (each packet is
dropped or trimmed once).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from dlcp.controller.model import Fabric
from dlcp.controller.modes import queues_of
from dlcp.controller.paths import Paths
from dlcp.controller.session import DEFAULT_TIMEOUT_S, SwitchError, connect, read_counters
from dlcp.p4 import names
from dlcp.p4.sizes import CLASS_BITS
from dlcp.protocol import NUM_PRIORITY_CLASSES

KINDS = {names.FORWARDED: "forwarded", names.DROPPED: "dropped", names.TRIMMED: "trimmed"}


def index(port: int, queue: int) -> int:
    """The counters' index: ``port << CLASS_BITS | queue`` (``port_class_t`` in the P4 program)."""
    return port << CLASS_BITS | queue


@dataclass
class Cell:
    switch: str
    port: int
    queue: int
    jobs: tuple[int, ...]
    """Jobs whose traffic may be counted here (one: attributed; several: shared; none: other traffic)."""
    values: dict[str, tuple[int, int]] = field(default_factory=dict)
    """``forwarded``/``dropped``/``trimmed`` -> (packets, bytes)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "switch": self.switch,
            "port": self.port,
            "queue": self.queue,
            "jobs": list(self.jobs),
            **{k: {"packets": p, "bytes": b} for k, (p, b) in self.values.items()},
        }


@dataclass
class Stats:
    cells: list[Cell]
    errors: dict[str, str]
    """Switch -> why it could not be read."""
    jobs: dict[int, dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "cells": [c.as_dict() for c in self.cells],
            "jobs": {str(k): v for k, v in self.jobs.items()},
            "errors": self.errors,
        }


def attribution(fabric: Fabric) -> dict[tuple[str, int, int], tuple[int, ...]]:
    """(switch, port, queue) -> the jobs whose packets may be counted there."""
    paths = Paths(fabric)
    out: dict[tuple[str, int, int], list[int]] = {}
    for job in sorted(fabric.jobs.values(), key=lambda j: j.id):
        hops = {hop for a, b in job.pairs() for hop in paths.hops(a, b)}
        for sw, port in hops:
            for q in queues_of(job):
                out.setdefault((sw, port, q), []).append(job.id)
    return {k: tuple(v) for k, v in out.items()}


async def read(fabric: Fabric, *, timeout: float = DEFAULT_TIMEOUT_S, switches: list[str] | None = None) -> Stats:
    """Read every configured port's cells of the three counters from every switch (concurrently)."""
    owners = attribution(fabric)

    async def one(name: str) -> tuple[str, list[Cell] | str]:
        spec = fabric.switches[name]
        cells = [(p, q) for p in sorted(spec.ports) for q in range(NUM_PRIORITY_CLASSES)]
        try:
            # Reading needs no primacy: the lowest election id never takes a switch from its controller.
            async with connect(spec, election_id=1, timeout=timeout, authoritative=False) as sw:
                got = await read_counters(sw, spec, list(KINDS), [index(p, q) for p, q in cells], timeout)
        except SwitchError as exc:
            return name, str(exc)
        out = []
        for p, q in cells:
            values = {KINDS[c]: got.get((c, index(p, q)), (0, 0)) for c in KINDS}
            if any(v != (0, 0) for v in values.values()):
                out.append(Cell(name, p, q, owners.get((name, p, q), ()), values))
        return name, out

    results = await asyncio.gather(*(one(n) for n in switches or fabric.switches))
    cells = [c for _, r in results if isinstance(r, list) for c in r]
    errors = {n: r for n, r in results if isinstance(r, str)}
    return Stats(cells, errors, per_job(fabric, cells))


def per_job(fabric: Fabric, cells: list[Cell]) -> dict[int, dict[str, Any]]:
    """Per job: delivered (at the ports facing its hosts), dropped and trimmed, in total and by queue,
    from the cells attributed to it alone; ``shared_cells`` counts cells it shares with other jobs."""
    out: dict[int, dict[str, Any]] = {}
    for job in fabric.jobs.values():
        facing = {(fabric.hosts[h].switch, fabric.hosts[h].port) for h in job.workers}
        totals = {k: [0, 0] for k in ("delivered", "dropped", "trimmed")}
        by_queue: dict[int, dict[str, list[int]]] = {}
        shared = 0
        for c in cells:
            if job.id not in c.jobs:
                continue
            if len(c.jobs) > 1:
                shared += 1
                continue
            parts = [("dropped", c.values["dropped"]), ("trimmed", c.values["trimmed"])]
            if (c.switch, c.port) in facing:
                parts.append(("delivered", c.values["forwarded"]))
            for kind, (packets, nbytes) in parts:
                for acc in (totals[kind], by_queue.setdefault(c.queue, {k: [0, 0] for k in totals})[kind]):
                    acc[0] += packets
                    acc[1] += nbytes
        out[job.id] = {
            **{k: {"packets": v[0], "bytes": v[1]} for k, v in totals.items()},
            "by_queue": {
                str(q): {k: {"packets": v[0], "bytes": v[1]} for k, v in d.items()} for q, d in sorted(by_queue.items())
            },
            "shared_cells": shared,
        }
    return out
