"""``dlcp controller run``: stay connected to every switch as primary and keep it configured.

Each switch is kept connected through finsy (arbitrate, push DLCP's program when the
switch has none), reconnecting within :data:`RECONNECT_S` of a lost connection. Whenever a switch becomes ready as
primary (first contact, after it restarted with empty tables, after this controller
regains primacy) the controller reads it and writes the difference, then checks it
again every ``interval`` seconds. finsy cancels that work the moment another
controller takes over, so a backup never writes; the change is reported both ways.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import finsy as fy

from dlcp.controller.apply import SwitchReport
from dlcp.controller.diff import diff
from dlcp.controller.entries import Entry
from dlcp.controller.model import Fabric, SwitchSpec
from dlcp.controller.session import (
    DEFAULT_ELECTION_ID,
    DEFAULT_TIMEOUT_S,
    SwitchError,
    describe,
    options,
    read_entries,
    schema_of,
    write,
)
from dlcp.controller.state import desired
from dlcp.p4 import names

log = logging.getLogger(__name__)

EventKind = Literal["applied", "unchanged", "failed", "primary", "backup", "down", "unreachable", "error"]


@dataclass
class Event:
    switch: str
    kind: EventKind
    message: str
    time: float = field(default_factory=time.time)
    report: SwitchReport | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"time": self.time, "switch": self.switch, "event": self.kind, "message": self.message}
        if self.report is not None:
            out["report"] = self.report.as_dict()
        return out


async def run(
    fabric: Fabric,
    on_event: Callable[[Event], None],
    *,
    election_id: int = DEFAULT_ELECTION_ID,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = 30.0,
    stop: asyncio.Event | None = None,
    switches: list[str] | None = None,
) -> None:
    """Keep every switch of ``fabric`` (or those named) configured until ``stop`` is set (or the task is
    cancelled)."""
    wanted = desired(fabric)  # checked before any switch is contacted
    keepers = [
        _Keeper(fabric.switches[name], wanted[name], on_event, election_id, timeout, interval)
        for name in switches or fabric.switches
    ]
    tasks = [asyncio.create_task(k.keep(), name=f"dlcp-controller:{k.spec.name}") for k in keepers]
    watch = [asyncio.create_task(k.watch()) for k in keepers]
    try:
        if stop is None:
            await asyncio.gather(*tasks)
        else:
            await stop.wait()
    finally:
        for t in tasks + watch:
            t.cancel()
        await asyncio.gather(*tasks, *watch, return_exceptions=True)


def serve(fabric: Fabric, on_event: Callable[[Event], None], **kw: Any) -> None:
    """:func:`run` (with its keyword arguments ``kw``) until SIGINT or SIGTERM, either of which stops it as ``stop``
    does: ``dlcp controller run``, and the testbed's controller that stays (:mod:`dlcp.testbed.reconciler`)."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        await run(fabric, on_event, stop=stop, **kw)

    asyncio.run(main())


RECONNECT_S = 0.5
"""How soon a switch that cannot be reached, or whose connection was lost, is tried again. finsy's own life cycle
(``Switch.run``) waits 10 s after an attempt that failed within 2 s, which is what a switch that is restarting
gives; its tables would stay empty that long, longer than the hosts' peer timeout (5 s)."""


class _Keeper:
    """One switch: its finsy ``Switch``, event hooks and the reconcile loop."""

    def __init__(
        self,
        spec: SwitchSpec,
        wanted: list[Entry],
        on_event: Callable[[Event], None],
        election_id: int,
        timeout: float,
        interval: float,
    ) -> None:
        self.spec = spec
        self.wanted = wanted
        self.emit = lambda kind, msg, report=None: on_event(Event(spec.name, kind, msg, report=report))
        self.timeout = timeout
        self.interval = interval
        opts = options(spec, election_id, authoritative=True)(ready_handler=self._ready)
        self.sw = fy.Switch(spec.name, spec.grpc, opts)
        self.sw.ee.on(fy.SwitchEvent.BECOME_BACKUP, self._backup)
        self.sw.ee.on(fy.SwitchEvent.BECOME_PRIMARY, self._primary)
        self.sw.ee.on(fy.SwitchEvent.CHANNEL_DOWN, self._down)
        self._lost = asyncio.Event()

    async def keep(self) -> None:
        """Stay connected: connect, arbitrate (finsy; the ready handler reconciles), wait until the channel goes
        down, and connect again; an attempt that fails is retried after :data:`RECONNECT_S`."""
        while True:
            self._lost.clear()
            try:
                async with self.sw:
                    await self._lost.wait()
            except Exception as exc:  # any failure to connect: the switch is not (yet) there
                log.debug("%s: connection failed: %s", describe(self.spec), exc)
            await asyncio.sleep(RECONNECT_S)

    def _backup(self, sw: fy.Switch) -> None:
        self.emit(
            "backup",
            f"{describe(self.spec)}: lost primacy to election id {sw.primary_id} (ours {sw.election_id}); "
            "stopped writing",
        )

    def _primary(self, sw: fy.Switch) -> None:
        self.emit("primary", f"{describe(self.spec)}: primary again (election id {sw.election_id}); reconciling")

    def _down(self, sw: fy.Switch) -> None:
        self._lost.set()
        self.emit("down", f"{describe(self.spec)}: connection lost; it is reconfigured when it comes back")

    async def watch(self) -> None:
        """Report a switch that does not come up in time (finsy keeps trying, quietly)."""
        while True:
            await asyncio.sleep(self.timeout)
            if not self.sw.is_up:
                self.emit("unreachable", f"{describe(self.spec)}: no answer within {self.timeout:g} s; still trying")
                await asyncio.sleep(max(self.interval, self.timeout))

    async def _ready(self, sw: fy.Switch) -> None:
        if not sw.is_primary:
            self.emit(
                "backup",
                f"{describe(self.spec)}: another controller is primary (election id {sw.primary_id} > ours "
                f"{sw.election_id}); not writing",
            )
            return
        while True:
            await self.reconcile(sw)
            await asyncio.sleep(self.interval)

    async def reconcile(self, sw: fy.Switch) -> None:
        report = SwitchReport(self.spec.name, self.spec.grpc, "ok")
        try:
            schema = schema_of(sw)
            current = await read_entries(sw, self.spec, self.timeout)
            plan = diff(self.spec.name, current, self.wanted, schema, schema.tables[names.NEXT_HOPS].id)
            report.changes, report.summary = plan.changes, plan.summary()
            report.outcome = await write(sw, self.spec, plan.changes, self.timeout)
        except SwitchError as exc:
            report.status, report.error = "error", str(exc)
            self.emit("error", str(exc), report)
            return
        if not report.outcome.ok:
            report.status = "failed"
            self.emit("failed", f"{describe(self.spec)}: {len(report.outcome.failed)} updates refused", report)
        elif plan.changes:
            s = plan.summary()
            self.emit(
                "applied",
                f"{describe(self.spec)}: inserted {s['inserted']}, modified {s['modified']}, deleted {s['deleted']}, "
                f"unchanged {s['unchanged']}",
                report,
            )
        else:
            self.emit("unchanged", f"{describe(self.spec)}: up to date ({plan.unchanged} entries)", report)
