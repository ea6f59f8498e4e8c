"""The shared switch test vectors (``tests/vectors/switch``) on the software switch.

:func:`install` turns a vector's entries (P4Info names, JSON values) into the
canonical entries of :mod:`dlcp.testbed.switch.entries` and writes them through
any :class:`TableBackend`; an ``action_set`` becomes action-profile members and a
group, as a P4Runtime server does with a one-shot. :func:`run_virtual` runs a
case on virtual ports on a virtual clock (no sockets, no root): stalled queues
are paused from the moment the last settle packet has left until every packet is
in, which is the "software switch" realisation of ``docs/switch.md``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from dlcp.p4 import names, sizes, vectors
from dlcp.p4.vectors import Case, Frame
from dlcp.testbed.switch.config import PortConfig
from dlcp.testbed.switch.dataplane import KEYS, DataPlane
from dlcp.testbed.switch.entries import (
    Action,
    FieldMatch,
    MatchKind,
    Op,
    ProfileGroup,
    ProfileMember,
    TableBackend,
    TableEntry,
)

_KINDS = {"exact": MatchKind.EXACT, "lpm": MatchKind.LPM, "ternary": MatchKind.TERNARY}


def _value(v: Any) -> int:
    """Vector values: integers, dotted IPv4 addresses and colon MAC addresses."""
    if isinstance(v, int):
        return v
    text = str(v)
    if ":" in text:
        return int(text.replace(":", ""), 16)
    return int(ipaddress.IPv4Address(text))


def _action(a: vectors.Action) -> Action:
    return Action(a.name, tuple((k, _value(v)) for k, v in a.params.items()))


@dataclass
class IdAllocator:
    """Member and group ids for one-shot action sets (P4Runtime leaves them to the server)."""

    next_member: int = 1
    next_group: int = 1

    def member(self) -> int:
        self.next_member += 1
        return self.next_member - 1

    def group(self) -> int:
        self.next_group += 1
        return self.next_group - 1


def table_entry(e: vectors.Entry, **target: Any) -> TableEntry:
    """The canonical entry of a vector entry (match fields in P4Info order); ``target``: member_id/group_id."""
    order = KEYS[e.table]
    match = []
    for key in sorted(e.match, key=order.index):
        kind, raw = next(iter(e.match[key].items()))
        if kind == "exact":
            match.append(FieldMatch(key, MatchKind.EXACT, _value(raw)))
        else:
            match.append(FieldMatch(key, _KINDS[kind], _value(raw[0]), _value(raw[1])))
    return TableEntry(
        table=e.table,
        match=tuple(match),
        priority=e.priority or 0,
        action=_action(e.action) if e.action is not None else None,
        **target,
    )


def install(backend: TableBackend, e: vectors.Entry, ids: IdAllocator) -> None:
    if e.action is not None:
        backend.write_entry(Op.INSERT, table_entry(e))
        return
    members = []
    for a in e.action_set:
        mid = ids.member()
        backend.write_member(Op.INSERT, ProfileMember(names.ECMP_SELECTOR, mid, _action(a)))
        members.append((mid, 1))
    gid = ids.group()
    backend.write_group(Op.INSERT, ProfileGroup(names.ECMP_SELECTOR, gid, tuple(members)))
    backend.write_entry(Op.INSERT, table_entry(e, group_id=gid))


@dataclass
class VectorResult:
    name: str
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def counter_deltas(
    dp: DataPlane, case: Case, before: dict[str, list[int]] | None
) -> tuple[dict[str, list[int]], list[str]]:
    """Snapshot the case's counters; with ``before``, also check the deltas against the case."""
    now = {n: [int(x) for x in dp.counters(n)[0]] for n in case.counter_names}
    failures: list[str] = []
    if before is not None:
        slots = [(p, c) for p in sorted(case.ports()) for c in range(1 << sizes.CLASS_BITS)]
        for n in case.counter_names:
            delta = {(p, c): now[n][p << sizes.CLASS_BITS | c] - before[n][p << sizes.CLASS_BITS | c] for p, c in slots}
            failures += vectors.check_counters(case, n, delta)
    return now, failures


def run_virtual(case: Case) -> VectorResult:
    """One case on a fresh switch with virtual ports (every port the case uses)."""
    dp = DataPlane(virtual_clock=True)
    for port in sorted(case.ports()):
        dp.add_port(PortConfig(port=port, interface=None))
    ids = IdAllocator()
    for e in case.entries:
        install(dp, e, ids)
    before, _ = counter_deltas(dp, case, None)
    last_settle = max((i for i, pkt in enumerate(case.packets) if pkt.settle), default=-1)
    seen: list[Frame] = []

    def stall(on: bool) -> None:
        for port, queue in case.stalled_queues:
            dp.pause(port, queue, on)

    if last_settle < 0:
        stall(True)
    for i, pkt in enumerate(case.packets):
        dp.inject(pkt.frame.port, pkt.frame.data)
        seen += [Frame(port, data) for port, data in dp.drain()]
        if i == last_settle:
            stall(True)
    stall(False)
    seen += [Frame(port, data) for port, data in dp.drain()]
    result = VectorResult(case.name, vectors.check_outputs(case, seen))
    _, failures = counter_deltas(dp, case, before)
    result.failures += failures
    dp.close()
    return result
