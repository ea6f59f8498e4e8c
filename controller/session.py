"""One P4Runtime session with one switch, on finsy: connect within a deadline, read, write, report.

finsy does the transport, arbitration, the pipeline push (only when the switch's
cookie differs), entity encoding and error decoding. What it lacks, and this module
adds:

* a bounded connect: finsy waits for a switch as long as it takes; here a switch
  that does not answer within ``timeout`` is :class:`Unreachable`, named;
* all-or-nothing writes: finsy's ``Switch.write`` sends ``CONTINUE_ON_ERROR``
  batches. :func:`write` sends ``ROLLBACK_ON_ERROR`` through finsy's own
  ``P4Client`` (the one private attribute used, pinned by ``finsy==0.30.*``) and,
  where a switch does not implement that atomicity (BMv2's PI answers
  UNIMPLEMENTED), sends ``CONTINUE_ON_ERROR`` and reports exactly which updates
  were applied;
* primacy checks before each write: a backup never writes (:class:`NotPrimary`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import finsy as fy
from finsy import P4ClientError, P4Schema
from finsy.proto import p4r

from dlcp.controller.diff import Change
from dlcp.controller.model import SwitchSpec
from dlcp.p4.paths import BMV2_JSON, COMMITTED_P4INFO

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_ELECTION_ID = 10
_Code = fy.GRPCStatusCode


class SwitchError(Exception):
    """A switch could not be read or configured; the message names it."""


class Unreachable(SwitchError):
    """The switch did not answer in time, or refused the connection."""


class NotPrimary(SwitchError):
    """Another controller is primary for the switch: this one may not write."""


def describe(spec: SwitchSpec) -> str:
    return f"switch {spec.name} ({spec.grpc}, device {spec.device_id})"


def options(spec: SwitchSpec, election_id: int, *, authoritative: bool) -> fy.SwitchOptions:
    """finsy options for ``spec``. Authoritative: this controller pushes DLCP's program when the switch runs
    another (or none); otherwise it reads the switch's P4Info (dry runs; Tofino, whose pipeline is loaded by
    the vendor's tools)."""
    if not authoritative or spec.target == "tofino":
        return fy.SwitchOptions(device_id=spec.device_id, initial_election_id=election_id)
    blob: Path | bytes = b""
    if spec.target == "bmv2":
        blob = Path(spec.p4blob) if spec.p4blob else BMV2_JSON
        if not blob.exists():
            raise SwitchError(f"{describe(spec)}: BMv2 program {blob} not found (build it: dlcp p4 build)")
    return fy.SwitchOptions(
        p4info=COMMITTED_P4INFO, p4blob=blob, device_id=spec.device_id, initial_election_id=election_id
    )


@asynccontextmanager
async def connect(
    spec: SwitchSpec,
    *,
    election_id: int = DEFAULT_ELECTION_ID,
    timeout: float = DEFAULT_TIMEOUT_S,
    authoritative: bool = True,
) -> AsyncIterator[fy.Switch]:
    """An open, arbitrated finsy ``Switch`` (primary or backup: check ``is_primary``)."""
    if spec.role:
        raise SwitchError(f"{describe(spec)}: P4Runtime roles other than the default are not supported yet")
    sw = fy.Switch(spec.name, spec.grpc, options(spec, election_id, authoritative=authoritative))
    ready_as_primary = asyncio.Event()
    sw.ee.on(fy.SwitchEvent.CHANNEL_READY, lambda s: ready_as_primary.set() if s.is_primary else None)
    try:
        await asyncio.wait_for(sw.__aenter__(), timeout)
    except TimeoutError:
        raise Unreachable(f"{describe(spec)}: no answer within {timeout:g} s") from None
    except P4ClientError as exc:
        raise Unreachable(f"{describe(spec)}: {exc.code.name}: {exc.message}") from None
    try:
        if authoritative and not sw.is_primary and sw.primary_id <= election_id:
            # Our election id is in use: this controller's previous session, whose stream the switch has not yet
            # seen close (an apply right after another). finsy bids one lower, a backup, and takes primacy once
            # that stream goes; wait for it (and the pipeline) rather than refuse the write. A live controller
            # with a higher id is not waited for; one with our own id still holds it after the wait: NotPrimary.
            try:
                await asyncio.wait_for(ready_as_primary.wait(), timeout)
            except TimeoutError:
                log.warning("%s: election id %d still in use after %g s", describe(spec), election_id, timeout)
        yield sw
    finally:
        await sw.__aexit__(None, None, None)


def schema_of(sw: fy.Switch) -> P4Schema:
    """The switch's schema, or DLCP's when the switch has no pipeline yet (a dry run)."""
    return sw.p4info if sw.p4info.exists else P4Schema(COMMITTED_P4INFO)


async def _bounded(spec: SwitchSpec, what: str, timeout: float, coro: object) -> object:
    try:
        return await asyncio.wait_for(coro, timeout)  # type: ignore[arg-type]
    except TimeoutError:
        raise Unreachable(f"{describe(spec)}: {what}: no answer within {timeout:g} s") from None


async def read_entries(sw: fy.Switch, spec: SwitchSpec, timeout: float = DEFAULT_TIMEOUT_S) -> list[p4r.Entity]:
    """Every table entry the switch holds (not the default actions), encoded; on Tofino its clone sessions too
    (the trim mirror sessions, :mod:`dlcp.controller.trim_sessions`)."""
    schema = schema_of(sw)
    queries: list[fy.P4TableEntry | fy.P4CloneSessionEntry] = [fy.P4TableEntry()]
    if spec.target == "tofino":
        queries.append(fy.P4CloneSessionEntry())  # session 0: every clone session

    async def read() -> list[p4r.Entity]:
        try:
            return [e.encode(schema) async for e in sw.read(queries)]  # type: ignore[attr-defined]
        except P4ClientError as exc:
            if exc.is_pipeline_missing:
                return []
            raise SwitchError(f"{describe(spec)}: read failed: {exc.code.name}: {exc.message}") from None

    out = await _bounded(spec, "read", timeout, read())
    assert isinstance(out, list)
    return out


async def read_counters(
    sw: fy.Switch, spec: SwitchSpec, counters: Sequence[str], indices: Sequence[int], timeout: float = DEFAULT_TIMEOUT_S
) -> dict[tuple[str, int], tuple[int, int]]:
    """``(counter name, index) -> (packets, bytes)`` for the cells asked (one read request)."""
    schema = schema_of(sw)
    queries = [fy.P4CounterEntry(name, index=i) for name in counters for i in indices]

    async def read() -> dict[tuple[str, int], tuple[int, int]]:
        out = {}
        try:
            async for cell in sw.read(queries):  # type: ignore[attr-defined]
                name = schema.counters[cell.counter_id].name
                out[(name, cell.index or 0)] = (cell.packet_count, cell.byte_count)
        except P4ClientError as exc:
            raise SwitchError(f"{describe(spec)}: counter read failed: {exc.code.name}: {exc.message}") from None
        return out

    result = await _bounded(spec, "counter read", timeout, read())
    assert isinstance(result, dict)
    return result


@dataclass
class Failure:
    change: Change
    code: str
    message: str


@dataclass
class WriteOutcome:
    """What a write did: ``applied`` are on the switch; ``failed`` were refused (with the switch's reason);
    ``skipped`` were not applied because another update failed (all-or-nothing) or not attempted."""

    atomic: bool
    applied: list[Change] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)
    skipped: list[Change] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.skipped


def _client(sw: fy.Switch) -> fy.P4Client:
    # finsy 0.30's Switch.write has no atomicity argument; its P4Client sends any request and
    # adds the election id. The attribute is private but stable within the pinned 0.30 series.
    client = sw._p4client
    if client is None:
        raise SwitchError(f"switch {sw.name}: not connected")
    return client


async def write(
    sw: fy.Switch, spec: SwitchSpec, changes: list[Change], timeout: float = DEFAULT_TIMEOUT_S
) -> WriteOutcome:
    """Write ``changes`` in one batch, all or nothing where the switch supports it."""
    if not changes:
        return WriteOutcome(atomic=True)
    if not sw.is_primary:
        raise NotPrimary(
            f"{describe(spec)}: not primary (election id {sw.election_id}; the primary holds {sw.primary_id}); "
            "nothing written"
        )
    updates = [c.update() for c in changes]
    for atomicity in (p4r.WriteRequest.ROLLBACK_ON_ERROR, p4r.WriteRequest.CONTINUE_ON_ERROR):
        request = p4r.WriteRequest(device_id=spec.device_id, updates=updates, atomicity=atomicity)
        atomic = atomicity == p4r.WriteRequest.ROLLBACK_ON_ERROR
        try:
            what = f"write of {len(updates)} updates (state unknown until read again)"
            await _bounded(spec, what, timeout, _client(sw).request(request))
            return WriteOutcome(atomic=atomic, applied=list(changes))
        except P4ClientError as exc:
            if exc.code == _Code.PERMISSION_DENIED:
                raise NotPrimary(f"{describe(spec)}: the switch refused the write: {exc.message}") from None
            if atomic and not exc.details and exc.code in (_Code.UNIMPLEMENTED, _Code.INVALID_ARGUMENT):
                log.info("%s: no ROLLBACK_ON_ERROR (%s: %s)", spec.name, exc.code.name, exc.message)
                continue
            if not exc.details:
                raise SwitchError(f"{describe(spec)}: write refused: {exc.code.name}: {exc.message}") from None
            return _outcome(changes, exc, atomic)
    raise AssertionError("unreachable")  # pragma: no cover


def _outcome(changes: list[Change], exc: P4ClientError, atomic: bool) -> WriteOutcome:
    out = WriteOutcome(atomic=atomic)
    for i, change in enumerate(changes):
        err = exc.details.get(i)
        if err is None:
            (out.skipped if atomic else out.applied).append(change)
        elif err.canonical_code == _Code.ABORTED:
            out.skipped.append(change)
        else:
            out.failed.append(Failure(change, err.canonical_code.name, err.message))
    return out
