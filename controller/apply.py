"""Apply, dry-run and clear: read each switch, write only the difference, report per switch.

Switches are handled concurrently and independently: one that is down, slow or
refuses a write is reported (named, with the reason) and the others are still
configured. Each switch's write is one batch, all or nothing where the switch
supports it; otherwise the report lists exactly which updates were applied.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from finsy import P4Schema
from finsy.proto import p4r

from dlcp.controller import queues
from dlcp.controller.diff import Change, Plan, canonical, diff
from dlcp.controller.entries import Entry
from dlcp.controller.model import Fabric, SwitchSpec
from dlcp.controller.session import (
    DEFAULT_ELECTION_ID,
    DEFAULT_TIMEOUT_S,
    SwitchError,
    WriteOutcome,
    connect,
    read_entries,
    schema_of,
    write,
)
from dlcp.controller.state import desired
from dlcp.p4 import names

log = logging.getLogger(__name__)

Status = Literal["ok", "planned", "failed", "unreachable", "not-primary", "error"]
PlanFilter = Callable[[Plan, P4Schema], Plan]


@dataclass
class SwitchReport:
    switch: str
    address: str
    status: Status
    summary: dict[str, int] = field(default_factory=dict)
    """inserted, modified, deleted (what was written, or would be for a dry run), unchanged."""
    changes: list[Change] = field(default_factory=list)
    outcome: WriteOutcome | None = None
    error: str = ""
    queues: list[str] = field(default_factory=list)
    """Queue depths and rates set over Thrift (BMv2)."""

    def as_dict(self, verbose: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "switch": self.switch,
            "address": self.address,
            "status": self.status,
            **self.summary,
        }
        if self.error:
            out["error"] = self.error
        if self.outcome is not None and not self.outcome.ok:
            out["atomic"] = self.outcome.atomic
            out["applied"] = [_change(c) for c in self.outcome.applied]
            out["failed"] = [{**_change(f.change), "code": f.code, "message": f.message} for f in self.outcome.failed]
            out["not_applied"] = [_change(c) for c in self.outcome.skipped]
        if verbose:
            out["changes"] = [_change(c) for c in self.changes]
        if self.queues:
            out["queues"] = self.queues
        return out


def _change(c: Change) -> dict[str, str]:
    return {"op": c.op, "entry": c.note, "owner": c.owner}


async def configure(
    fabric: Fabric,
    *,
    dry_run: bool = False,
    clear_job: int | None = None,
    clear_all: bool = False,
    election_id: int = DEFAULT_ELECTION_ID,
    timeout: float = DEFAULT_TIMEOUT_S,
    switches: list[str] | None = None,
) -> list[SwitchReport]:
    """Bring every switch (or those named) to the fabric's desired state; or remove one job's entries
    (``clear_job``) or every entry (``clear_all``). The desired state is computed (and checked) before any
    switch is contacted."""
    wanted = desired(fabric)
    plan_filter: PlanFilter | None = None
    known = wanted
    if clear_all:
        wanted = {name: [] for name in wanted}
    elif clear_job is not None:
        if clear_job not in fabric.jobs:
            raise ValueError(f"--job {clear_job}: no such job in {fabric.source} (jobs: {sorted(fabric.jobs)})")
        with_job = wanted
        wanted = desired(fabric.without_job(clear_job))
        plan_filter = _only_job(clear_job, with_job, wanted)
    names_ = switches or list(fabric.switches)
    tasks = [
        _one(
            fabric,
            fabric.switches[n],
            wanted[n],
            known.get(n, []),
            dry_run,
            plan_filter,
            election_id,
            timeout,
            configure_queues=not clear_all,
        )
        for n in names_
    ]
    return list(await asyncio.gather(*tasks))


async def _one(
    fabric: Fabric,
    spec: SwitchSpec,
    wanted: list[Entry],
    known: list[Entry],
    dry_run: bool,
    plan_filter: PlanFilter | None,
    election_id: int,
    timeout: float,
    configure_queues: bool,
) -> SwitchReport:
    report = SwitchReport(spec.name, spec.grpc, "ok")
    try:
        # A dry run never takes over a switch: lowest election id, and the switch's own pipeline.
        async with connect(
            spec, election_id=1 if dry_run else election_id, timeout=timeout, authoritative=not dry_run
        ) as sw:
            schema = schema_of(sw)
            current = await read_entries(sw, spec, timeout)
            plan = diff(spec.name, current, wanted, schema, schema.tables[names.NEXT_HOPS].id, known)
            if plan_filter is not None:
                plan = plan_filter(plan, schema)
            report.changes = plan.changes
            report.summary = plan.summary()
            if dry_run:
                report.status = "planned"
                return report
            report.outcome = await write(sw, spec, plan.changes, timeout)
            if not report.outcome.ok:
                report.status = "failed"
                applied = report.outcome.applied
                report.summary = {**Plan(spec.name, applied, plan.unchanged).summary()}
                first = report.outcome.failed[0] if report.outcome.failed else None
                report.error = (
                    f"switch {spec.name} refused {len(report.outcome.failed)} of {len(plan.changes)} updates"
                    + (f"; first: {first.change.note}: {first.code}: {first.message}" if first else "")
                    + (
                        "; nothing was applied (all or nothing)"
                        if report.outcome.atomic
                        else f"; {len(applied)} applied"
                    )
                )
        if configure_queues and spec.target == "bmv2" and spec.thrift and report.status == "ok":
            report.queues = await asyncio.to_thread(queues.configure_bmv2, fabric, spec, timeout)
    except SwitchError as exc:
        report.status = {"Unreachable": "unreachable", "NotPrimary": "not-primary"}.get(type(exc).__name__, "error")  # type: ignore[assignment]
        report.error = str(exc)
    except queues.QueueError as exc:
        report.status = "error"
        report.error = str(exc)
    return report


def _only_job(job_id: int, with_job: dict[str, list[Entry]], without: dict[str, list[Entry]]) -> PlanFilter:
    """Keep only the changes that removing ``job_id`` causes: its own entries, and the shared thresholds it
    shaped. Entries of the job left on a switch by an older configuration (matched by job id) go too."""

    def keep(plan: Plan, schema: P4Schema) -> Plan:
        before = {canonical(e.entity.encode(schema)) for e in with_job[plan.switch]}
        after = {canonical(e.entity.encode(schema)) for e in without[plan.switch]}
        affected = {k for k, _ in before ^ after}
        classes = schema.tables[names.DLCP_CLASSES]
        job_field = classes.match_fields["job_id"].id
        out = Plan(plan.switch, unchanged=plan.unchanged)
        for change in plan.changes:
            key, _ = canonical(change.entity)
            if key in affected or (
                change.op == "delete"
                and change.entity.table_entry.table_id == classes.id
                and _job_of(change.entity, job_field) == job_id
            ):
                out.changes.append(change)
            else:
                out.unchanged += 1
        return out

    return keep


def _job_of(entity: p4r.Entity, job_field: int) -> int | None:
    for m in entity.table_entry.match:
        if m.field_id == job_field and m.HasField("ternary"):
            return int.from_bytes(m.ternary.value, "big")
    return None
