"""A switch's desired state: finsy table entries, each with who owns it and a line saying what it is."""

from __future__ import annotations

from dataclasses import dataclass

import finsy as fy

FABRIC = "fabric"
"""Owner of routes and ECMP groups: they follow the topology, not any one job."""


def job_owner(job_id: int) -> str:
    return f"job {job_id}"


@dataclass(frozen=True)
class Entry:
    entity: fy.P4TableEntry | fy.P4CloneSessionEntry
    """A table entry, or (Tofino's trim mirror sessions) a clone session."""
    owner: str
    """``fabric``, ``job 7``, or ``jobs 7,8`` for a setting shared by several jobs."""
    note: str
    """What it does, for people: ``10.0.0.2/32 -> group 3``."""
