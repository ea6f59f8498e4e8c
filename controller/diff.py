"""What to write: the difference between what a switch holds and what it should hold.

Entries are compared as P4Runtime encodes them (finsy's canonical encoding): the
key is the table, the match and the priority; the value is the action. A one-shot's
members are compared as a set, since a switch may list them in another order.
Clone sessions (Tofino's trim mirror sessions) are keyed by their session id; the
value is the rest (class of service, truncation, replicas as a set).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from finsy import P4Schema
from finsy.proto import p4r

from dlcp.controller.entries import Entry

Op = Literal["insert", "modify", "delete"]
_UPDATE_TYPE = {"insert": p4r.Update.INSERT, "modify": p4r.Update.MODIFY, "delete": p4r.Update.DELETE}


@dataclass(frozen=True)
class Change:
    op: Op
    entity: p4r.Entity
    note: str
    owner: str

    def update(self) -> p4r.Update:
        return p4r.Update(type=_UPDATE_TYPE[self.op], entity=self.entity)


@dataclass
class Plan:
    """The changes for one switch, in the order they are written."""

    switch: str
    changes: list[Change] = field(default_factory=list)
    unchanged: int = 0

    def count(self, op: Op) -> int:
        return sum(1 for c in self.changes if c.op == op)

    def summary(self) -> dict[str, int]:
        return {
            "inserted": self.count("insert"),
            "modified": self.count("modify"),
            "deleted": self.count("delete"),
            "unchanged": self.unchanged,
        }


def _is_clone_session(entity: p4r.Entity) -> bool:
    pre = entity.packet_replication_engine_entry
    return entity.HasField("packet_replication_engine_entry") and pre.HasField("clone_session_entry")


def canonical(entity: p4r.Entity) -> tuple[bytes, bytes]:
    """(key, value) of a table entry or a clone session as bytes."""
    if _is_clone_session(entity):
        cs = entity.packet_replication_engine_entry.clone_session_entry
        value = p4r.CloneSessionEntry(class_of_service=cs.class_of_service, packet_length_bytes=cs.packet_length_bytes)
        value.replicas.extend(sorted(cs.replicas, key=_bytes))
        return b"c" + _bytes(p4r.CloneSessionEntry(session_id=cs.session_id)), _bytes(value)
    te = entity.table_entry
    key = p4r.TableEntry(table_id=te.table_id, priority=te.priority, is_default_action=te.is_default_action)
    key.match.extend(sorted(te.match, key=lambda m: m.field_id))
    value = p4r.TableAction()
    value.CopyFrom(te.action)
    if value.HasField("action_profile_action_set"):
        members = sorted(value.action_profile_action_set.action_profile_actions, key=lambda a: _bytes(a))
        del value.action_profile_action_set.action_profile_actions[:]
        value.action_profile_action_set.action_profile_actions.extend(members)
    return b"t" + _bytes(key), _bytes(value)


def _bytes(msg: object) -> bytes:
    return msg.SerializeToString(deterministic=True)  # type: ignore[attr-defined, no-any-return]


def _order(change: Change, table_order: dict[int, int]) -> tuple[int, int]:
    """Groups are written before the routes that use them and deleted after; deletes first otherwise,
    so that a full table has room for what replaces them."""
    is_group = table_order.get(change.entity.table_entry.table_id, 0)
    phase = {("insert", 1): 0, ("modify", 1): 1, ("delete", 0): 2, ("modify", 0): 3, ("insert", 0): 4}
    return phase.get((change.op, is_group), 5), 0


def diff(
    switch: str,
    current: Iterable[p4r.Entity],
    desired: Iterable[Entry],
    schema: P4Schema,
    groups_table: int,
    known: Iterable[Entry] = (),
) -> Plan:
    """The plan that turns ``current`` (read from the switch) into ``desired``. ``known``: entries that
    describe (owner and note) what is deleted, when the switch holds them."""
    have: dict[bytes, tuple[bytes, p4r.Entity]] = {}
    for entity in current:
        is_entry = entity.HasField("table_entry") and not entity.table_entry.is_default_action
        if is_entry or _is_clone_session(entity):
            k, v = canonical(entity)
            have[k] = (v, entity)
    plan = Plan(switch)
    wanted: set[bytes] = set()
    for entry in desired:
        entity = entry.entity.encode(schema)
        k, v = canonical(entity)
        wanted.add(k)
        old = have.get(k)
        if old is None:
            plan.changes.append(Change("insert", entity, entry.note, entry.owner))
        elif old[0] != v:
            plan.changes.append(Change("modify", entity, entry.note, entry.owner))
        else:
            plan.unchanged += 1
    notes = {canonical(e.entity.encode(schema))[0]: e for e in known}
    for k, (_, entity) in have.items():
        if k not in wanted:
            seen = notes.get(k)
            note, owner = (seen.note, seen.owner) if seen else (describe(entity, schema), "-")
            plan.changes.append(Change("delete", _key_only(entity), note, owner))
    order = {groups_table: 1}
    plan.changes.sort(key=lambda c: _order(c, order))
    return plan


def _key_only(entity: p4r.Entity) -> p4r.Entity:
    """A DELETE carries the key only (P4Runtime ignores the action; BMv2 is happier without one)."""
    out = p4r.Entity()
    if _is_clone_session(entity):
        session = entity.packet_replication_engine_entry.clone_session_entry.session_id
        out.packet_replication_engine_entry.clone_session_entry.session_id = session
        return out
    te = entity.table_entry
    out.table_entry.table_id = te.table_id
    out.table_entry.priority = te.priority
    out.table_entry.match.extend(te.match)
    return out


def describe(entity: p4r.Entity, schema: P4Schema) -> str:
    """A one-line description of an entry read from a switch."""
    import finsy as fy

    if _is_clone_session(entity):
        return f"clone session {entity.packet_replication_engine_entry.clone_session_entry.session_id}"
    try:
        entry = fy.P4TableEntry.decode(entity, schema)
    except (ValueError, KeyError, LookupError):
        return f"table {entity.table_entry.table_id} entry"
    table = schema.tables[entry.table_id]
    match = entry.match.format_str(table) if entry.match else "*"
    return f"{table.alias} {match}" + (f" priority {entry.priority}" if entry.priority else "")
