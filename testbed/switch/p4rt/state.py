"""The server's index of what is installed, and how one P4Runtime update changes it and the data plane.

The forwarding state lives in the backend (the C data plane); this index holds
what P4Runtime needs besides: the entries as written (to answer Read and give
ALREADY_EXISTS / NOT_FOUND), members, groups and who references them, the
current default actions, and the hidden members and groups behind one-shot
entries. Every update is validated completely before it touches anything; what
it then does to the backend and the index is recorded in a :class:`Journal`, so
a failure half-way (the backend refusing, say, the third member of a one-shot)
undoes the update's earlier steps, and a ROLLBACK_ON_ERROR batch undoes the
whole batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import grpc
from finsy.proto import p4r

from dlcp import switch_limits as limits
from dlcp.testbed.switch import entries
from dlcp.testbed.switch.entries import Op
from dlcp.testbed.switch.p4rt import codec, errors
from dlcp.testbed.switch.p4rt.errors import P4RuntimeError
from dlcp.testbed.switch.p4rt.schema import ProfileInfo, Schema, TableInfo

log = logging.getLogger(__name__)

Key = tuple[tuple[entries.FieldMatch, ...], int]
"""What identifies an entry in its table: the canonical match and the priority."""

_OPS = {p4r.Update.INSERT: Op.INSERT, p4r.Update.MODIFY: Op.MODIFY, p4r.Update.DELETE: Op.DELETE}


@dataclass(frozen=True, slots=True)
class OneShotAction:
    """One action of a one-shot action set, and the hidden member that carries it."""

    action: entries.Action
    weight: int
    member_id: int


@dataclass(frozen=True, slots=True)
class Installed:
    """A table entry as installed: what the backend has, plus what only P4Runtime sees."""

    entry: entries.TableEntry
    controller_metadata: int = 0
    metadata: bytes = b""
    one_shot: tuple[OneShotAction, ...] | None = None
    """The action set of a one-shot entry (``entry.group_id`` is then its hidden group)."""


@dataclass(frozen=True, slots=True)
class _Target:
    """A decoded table action: exactly one of the four is set."""

    action: entries.Action | None = None
    member_id: int | None = None
    group_id: int | None = None
    one_shot: tuple[tuple[entries.Action, int], ...] | None = None


class Journal:
    """Undo steps of what has been applied, run newest first by :meth:`rollback`."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def call(self, what: str, do: Callable[[], None], undo: Callable[[], None]) -> None:
        """Apply a backend step; a :class:`~dlcp.testbed.switch.entries.BackendError` fails the update."""
        try:
            do()
        except entries.BackendError as exc:
            code = grpc.StatusCode.RESOURCE_EXHAUSTED if exc.resource_exhausted else grpc.StatusCode.INTERNAL
            raise P4RuntimeError(code, f"{what}: the data plane refused it: {exc}") from exc
        self._undo.append(undo)

    def record(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def rollback(self) -> None:
        while self._undo:
            step = self._undo.pop()
            try:
                step()
            except Exception:
                log.exception("undoing a step failed: the data plane may now differ from the server's index")

    def __len__(self) -> int:
        return len(self._undo)


def _set(journal: Journal, d: dict[Any, Any], key: Any, value: Any) -> None:
    had, old = key in d, d.get(key)
    d[key] = value

    def undo() -> None:
        if had:
            d[key] = old
        else:
            d.pop(key, None)

    journal.record(undo)


def _pop(journal: Journal, d: dict[Any, Any], key: Any) -> None:
    old = d.pop(key)
    journal.record(lambda: d.__setitem__(key, old))


class SwitchState:
    """The installed entries of DLCP's program on one backend."""

    def __init__(self, schema: Schema, backend: entries.TableBackend) -> None:
        self.schema = schema
        self.backend = backend
        self.tables: dict[int, dict[Key, Installed]] = {}
        self.defaults: dict[int, entries.Action | None] = {}
        self.members: dict[int, dict[int, entries.ProfileMember]] = {}
        self.groups: dict[int, dict[int, entries.ProfileGroup]] = {}
        self.hidden_members: dict[int, dict[int, entries.ProfileMember]] = {}
        """Per profile: the members created for one-shot entries (never read back as members)."""
        self.hidden_groups: dict[int, dict[int, entries.ProfileGroup]] = {}
        self.clear()

    def clear(self) -> None:
        """Forget everything (the backend is reset by the caller)."""
        self.tables = {t: {} for t in self.schema.tables}
        self.defaults = {t.id: t.initial_default for t in self.schema.tables.values()}
        for d in (self.members, self.groups, self.hidden_members, self.hidden_groups):
            d.clear()
            d.update({p: {} for p in self.schema.profiles})

    # ---------------------------------------------------------------- writes

    def apply(self, update: p4r.Update, journal: Journal) -> None:
        """Apply one update; raise :class:`P4RuntimeError` (after undoing nothing: the caller rolls back)."""
        op = _OPS.get(update.type)
        if op is None:
            raise errors.invalid(f"update type {update.type} is not INSERT, MODIFY or DELETE")
        kind = update.entity.WhichOneof("entity")
        if kind == "table_entry":
            self._table_entry(op, update.entity.table_entry, journal)
        elif kind == "action_profile_member":
            self._member(op, update.entity.action_profile_member, journal)
        elif kind == "action_profile_group":
            self._group(op, update.entity.action_profile_group, journal)
        elif kind == "counter_entry":
            self._counter(op, update.entity.counter_entry, journal)
        elif kind is None:
            raise errors.invalid("the update's entity is not set")
        else:
            raise errors.unimplemented(f"{kind} is not supported by the DLCP switch")

    def _table(self, table_id: int) -> TableInfo:
        table = self.schema.tables.get(table_id)
        if table is None:
            raise errors.invalid(f"no table with id {table_id} in DLCP's P4Info")
        return table

    def _profile(self, profile_id: int) -> ProfileInfo:
        profile = self.schema.profiles.get(profile_id)
        if profile is None:
            raise errors.invalid(f"no action profile with id {profile_id} in DLCP's P4Info")
        return profile

    def _table_entry(self, op: Op, te: p4r.TableEntry, journal: Journal) -> None:
        table = self._table(te.table_id)
        if te.is_const:
            raise errors.invalid(f"table {table.name}: is_const must be false in a write")
        for name in ("counter_data", "meter_config", "meter_counter_data"):
            if te.HasField(name):
                raise errors.invalid(f"table {table.name} has no direct counter or meter ({name} is set)")
        if te.idle_timeout_ns:
            raise errors.invalid(f"table {table.name} does not support idle timeout")
        if len(te.metadata) > limits.P4RT_MAX_ENTRY_METADATA_BYTES:
            raise errors.invalid(
                f"table {table.name}: metadata of {len(te.metadata)} bytes; at most "
                f"{limits.P4RT_MAX_ENTRY_METADATA_BYTES} (the switch keeps it with the entry)"
            )
        if te.is_default_action:
            self._default_entry(op, table, te, journal)
            return
        match = codec.decode_match(table, te.match)
        priority = codec.decode_priority(table, te.priority)
        if not match and not table.fields:
            raise errors.invalid(f"table {table.name} is keyless: only its default entry can be written")
        key: Key = (match, priority)
        rows = self.tables[table.id]
        old = rows.get(key)
        if op is Op.DELETE:
            if old is None:
                raise errors.not_found(f"table {table.name}: no entry with this match and priority {priority}")
            journal.call(f"{table.name}: delete", *self._entry_op(Op.DELETE, old.entry, old.entry))
            if old.one_shot is not None:
                self._drop_one_shot(table, old, journal)
            _pop(journal, rows, key)
            return
        if op is Op.MODIFY and not te.HasField("action"):
            if old is None:
                raise errors.not_found(f"table {table.name}: no entry with this match and priority {priority}")
            return  # P4Runtime: a MODIFY without action and direct resources is a no-op
        if not te.HasField("action"):
            raise errors.invalid(f"table {table.name}: INSERT needs an action")
        target = self._decode_target(table, te.action)
        if op is Op.INSERT:
            if old is not None:
                raise P4RuntimeError(
                    grpc.StatusCode.ALREADY_EXISTS, f"table {table.name}: an entry with this match exists"
                )
            if len(rows) >= table.size:
                raise P4RuntimeError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"table {table.name} is full ({table.size})")
        elif old is None:
            raise errors.not_found(f"table {table.name}: no entry with this match and priority {priority}")
        entry = entries.TableEntry(table.name, match, priority, target.action, target.member_id, target.group_id)
        one_shot = None
        if target.one_shot is not None:
            entry, one_shot = self._add_one_shot(table, entry, target.one_shot, journal)
        journal.call(f"{op.value} into {table.name}", *self._entry_op(op, entry, old.entry if old else entry))
        if old is not None and old.one_shot is not None:
            self._drop_one_shot(table, old, journal)
        _set(journal, rows, key, Installed(entry, te.controller_metadata, te.metadata, one_shot))

    def _entry_op(
        self, op: Op, entry: entries.TableEntry, old: entries.TableEntry
    ) -> tuple[Callable[[], None], Callable[[], None]]:
        b = self.backend
        if op is Op.INSERT:
            return (lambda: b.write_entry(Op.INSERT, entry)), (lambda: b.write_entry(Op.DELETE, entry))
        if op is Op.MODIFY:
            return (lambda: b.write_entry(Op.MODIFY, entry)), (lambda: b.write_entry(Op.MODIFY, old))
        return (lambda: b.write_entry(Op.DELETE, entry)), (lambda: b.write_entry(Op.INSERT, entry))

    def _decode_target(self, table: TableInfo, ta: p4r.TableAction) -> _Target:
        kind = ta.WhichOneof("type")
        where = f"table {table.name}"
        if table.profile_id == 0:
            if kind != "action":
                raise errors.invalid(f"{where} is a direct table: its entries take an action, not {kind}")
            return _Target(action=codec.decode_action(self.schema, ta.action, table.actions, where=where))
        profile = self.schema.profiles[table.profile_id]
        if kind == "action_profile_member_id":
            if ta.action_profile_member_id not in self.members[profile.id]:
                raise errors.not_found(f"{where}: no member {ta.action_profile_member_id} in {profile.name}")
            return _Target(member_id=ta.action_profile_member_id)
        if kind == "action_profile_group_id" and profile.with_selector:
            if ta.action_profile_group_id not in self.groups[profile.id]:
                raise errors.not_found(f"{where}: no group {ta.action_profile_group_id} in {profile.name}")
            return _Target(group_id=ta.action_profile_group_id)
        if kind == "action_profile_action_set" and profile.with_selector:
            return _Target(one_shot=self._decode_action_set(table, profile, ta.action_profile_action_set))
        raise errors.invalid(
            f"{where} is implemented by {profile.name}: its entries take a member id"
            + (", a group id or a one-shot action set" if profile.with_selector else "")
            + f", not {kind or 'nothing'}"
        )

    def _decode_action_set(
        self, table: TableInfo, profile: ProfileInfo, action_set: p4r.ActionProfileActionSet
    ) -> tuple[tuple[entries.Action, int], ...]:
        where = f"table {table.name} one-shot"
        if action_set.action_selection_mode or action_set.size_semantics:
            raise errors.unimplemented(f"{where}: only the selector's own selection mode and size semantics")
        if not action_set.action_profile_actions:
            raise errors.invalid(f"{where}: the action set is empty")
        if self.members[profile.id] or self.groups[profile.id]:
            raise errors.invalid(
                f"{where}: {profile.name} is programmed with members and groups; P4Runtime forbids mixing one-shots in"
            )
        out = []
        for a in action_set.action_profile_actions:
            if a.WhichOneof("watch_kind") is not None:
                raise errors.unimplemented(f"{where}: watch ports are not supported")
            _check_weight(profile, a.weight, where)
            out.append(
                (
                    codec.decode_action(self.schema, a.action, self.schema.profile_actions(profile), where=where),
                    a.weight,
                )
            )
        if len(out) + self._member_count(profile) > profile.size:
            raise P4RuntimeError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{profile.name} is full ({profile.size})")
        return tuple(out)

    def _member_count(self, profile: ProfileInfo) -> int:
        return len(self.members[profile.id]) + len(self.hidden_members[profile.id])

    def _add_one_shot(
        self,
        table: TableInfo,
        entry: entries.TableEntry,
        actions: tuple[tuple[entries.Action, int], ...],
        journal: Journal,
    ) -> tuple[entries.TableEntry, tuple[OneShotAction, ...]]:
        profile = self.schema.profiles[table.profile_id]
        hidden_m, hidden_g = self.hidden_members[profile.id], self.hidden_groups[profile.id]
        b = self.backend
        out = []
        for action, weight in actions:
            member = entries.ProfileMember(profile.name, _free_id(hidden_m, self.members[profile.id]), action)
            journal.call(
                f"one-shot member of {profile.name}",
                lambda m=member: b.write_member(Op.INSERT, m),  # type: ignore[misc]
                lambda m=member: b.write_member(Op.DELETE, m),  # type: ignore[misc]
            )
            _set(journal, hidden_m, member.member_id, member)
            out.append(OneShotAction(action, weight, member.member_id))
        group = entries.ProfileGroup(
            profile.name,
            _free_id(hidden_g, self.groups[profile.id]),
            tuple((o.member_id, o.weight) for o in out),
        )
        journal.call(
            f"one-shot group of {profile.name}",
            lambda: b.write_group(Op.INSERT, group),
            lambda: b.write_group(Op.DELETE, group),
        )
        _set(journal, hidden_g, group.group_id, group)
        return replace(entry, group_id=group.group_id), tuple(out)

    def _drop_one_shot(self, table: TableInfo, old: Installed, journal: Journal) -> None:
        """Remove the hidden group and members of a one-shot entry that is gone or replaced."""
        profile = self.schema.profiles[table.profile_id]
        hidden_m, hidden_g = self.hidden_members[profile.id], self.hidden_groups[profile.id]
        b = self.backend
        assert old.entry.group_id is not None and old.one_shot is not None
        group = hidden_g[old.entry.group_id]
        journal.call(
            f"one-shot group of {profile.name}",
            lambda: b.write_group(Op.DELETE, group),
            lambda: b.write_group(Op.INSERT, group),
        )
        _pop(journal, hidden_g, group.group_id)
        for o in old.one_shot:
            member = hidden_m[o.member_id]
            journal.call(
                f"one-shot member of {profile.name}",
                lambda m=member: b.write_member(Op.DELETE, m),  # type: ignore[misc]
                lambda m=member: b.write_member(Op.INSERT, m),  # type: ignore[misc]
            )
            _pop(journal, hidden_m, o.member_id)

    def _default_entry(self, op: Op, table: TableInfo, te: p4r.TableEntry, journal: Journal) -> None:
        if op is not Op.MODIFY:
            raise errors.invalid(f"table {table.name}: the default entry can only be modified (not {op.value})")
        if te.match or te.priority:
            raise errors.invalid(f"table {table.name}: a default entry has no match and priority 0")
        if table.profile_id or table.const_default:
            raise errors.permission_denied(f"table {table.name}: its default action is constant")
        if te.HasField("action"):
            if te.action.WhichOneof("type") != "action":
                raise errors.invalid(f"table {table.name}: a default entry takes an action")
            where = f"table {table.name} default entry"
            action = codec.decode_action(self.schema, te.action.action, table.actions, where=where, as_default=True)
        elif table.initial_default is not None:
            action = table.initial_default
        else:
            raise errors.invalid(f"table {table.name} has no initial default action to reset to")
        old = self.defaults[table.id]
        b = self.backend
        journal.call(
            f"default action of {table.name}",
            lambda: b.set_default_action(table.name, action),
            (lambda: b.set_default_action(table.name, old)) if old is not None else (lambda: None),
        )
        _set(journal, self.defaults, table.id, action)

    def _member(self, op: Op, m: p4r.ActionProfileMember, journal: Journal) -> None:
        profile = self._profile(m.action_profile_id)
        where = f"{profile.name} member {m.member_id}"
        if m.member_id == 0:
            raise errors.invalid(f"{profile.name}: member id 0 is not valid")
        members = self.members[profile.id]
        old = members.get(m.member_id)
        b = self.backend
        if op is Op.DELETE:
            if old is None:
                raise errors.not_found(f"{where} does not exist")
            if any(m.member_id == mid for g in self.groups[profile.id].values() for mid, _ in g.members):
                raise errors.failed_precondition(f"{where} is in a group")
            if self._referenced(profile, member_id=m.member_id):
                raise errors.failed_precondition(f"{where} is used by a table entry")
            journal.call(where, lambda: b.write_member(Op.DELETE, old), lambda: b.write_member(Op.INSERT, old))
            _pop(journal, members, m.member_id)
            return
        if not m.HasField("action"):
            raise errors.invalid(f"{where}: an action is required")
        action = codec.decode_action(self.schema, m.action, self.schema.profile_actions(profile), where=where)
        new = entries.ProfileMember(profile.name, m.member_id, action)
        if op is Op.INSERT:
            if self.hidden_members[profile.id]:
                raise errors.invalid(
                    f"{where}: {profile.name} is programmed with one-shots; P4Runtime forbids mixing members in"
                )
            if old is not None:
                raise P4RuntimeError(grpc.StatusCode.ALREADY_EXISTS, f"{where} exists")
            if self._member_count(profile) >= profile.size:
                raise P4RuntimeError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{profile.name} is full ({profile.size})")
            journal.call(where, lambda: b.write_member(Op.INSERT, new), lambda: b.write_member(Op.DELETE, new))
        else:
            if old is None:
                raise errors.not_found(f"{where} does not exist")
            journal.call(where, lambda: b.write_member(Op.MODIFY, new), lambda: b.write_member(Op.MODIFY, old))
        _set(journal, members, m.member_id, new)

    def _group(self, op: Op, g: p4r.ActionProfileGroup, journal: Journal) -> None:
        profile = self._profile(g.action_profile_id)
        where = f"{profile.name} group {g.group_id}"
        if not profile.with_selector:
            raise errors.invalid(f"{profile.name} is not an action selector: it has no groups")
        if g.group_id == 0:
            raise errors.invalid(f"{profile.name}: group id 0 is not valid")
        groups = self.groups[profile.id]
        old = groups.get(g.group_id)
        b = self.backend
        if op is Op.DELETE:
            if old is None:
                raise errors.not_found(f"{where} does not exist")
            if self._referenced(profile, group_id=g.group_id):
                raise errors.failed_precondition(f"{where} is used by a table entry")
            journal.call(where, lambda: b.write_group(Op.DELETE, old), lambda: b.write_group(Op.INSERT, old))
            _pop(journal, groups, g.group_id)
            return
        members: list[tuple[int, int]] = []
        for m in g.members:
            if any(mid == m.member_id for mid, _ in members):
                raise errors.invalid(f"{where}: member {m.member_id} is listed twice")
            if m.WhichOneof("watch_kind") is not None:
                raise errors.unimplemented(f"{where}: watch ports are not supported")
            _check_weight(profile, m.weight, where)
            if m.member_id not in self.members[profile.id]:
                raise errors.not_found(f"{where}: member {m.member_id} does not exist")
            members.append((m.member_id, m.weight))
        if profile.max_group_size and not 0 < g.max_size <= profile.max_group_size:
            raise errors.invalid(f"{where}: max_size {g.max_size} is not in 1..{profile.max_group_size}")
        if g.max_size and sum(w for _, w in members) > g.max_size:
            raise P4RuntimeError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{where}: more members than its max_size")
        new = entries.ProfileGroup(profile.name, g.group_id, tuple(members), g.max_size)
        if op is Op.INSERT:
            if self.hidden_groups[profile.id]:
                raise errors.invalid(
                    f"{where}: {profile.name} is programmed with one-shots; P4Runtime forbids mixing groups in"
                )
            if old is not None:
                raise P4RuntimeError(grpc.StatusCode.ALREADY_EXISTS, f"{where} exists")
            journal.call(where, lambda: b.write_group(Op.INSERT, new), lambda: b.write_group(Op.DELETE, new))
        else:
            if old is None:
                raise errors.not_found(f"{where} does not exist")
            if g.max_size != old.max_size:
                raise errors.invalid(f"{where}: max_size cannot change ({old.max_size} when inserted)")
            journal.call(where, lambda: b.write_group(Op.MODIFY, new), lambda: b.write_group(Op.MODIFY, old))
        _set(journal, groups, g.group_id, new)

    def _referenced(self, profile: ProfileInfo, *, member_id: int = 0, group_id: int = 0) -> bool:
        for table_id in profile.table_ids:
            for row in self.tables[table_id].values():
                if member_id and row.entry.member_id == member_id:
                    return True
                if group_id and row.one_shot is None and row.entry.group_id == group_id:
                    return True
        return False

    def _counter(self, op: Op, c: p4r.CounterEntry, journal: Journal) -> None:
        info = self.schema.counters.get(c.counter_id)
        if info is None:
            raise errors.invalid(f"no counter with id {c.counter_id} in DLCP's P4Info")
        if op is not Op.MODIFY:
            raise errors.invalid(f"counter {info.name}: only MODIFY is allowed (not {op.value})")
        if not c.HasField("data"):
            return  # P4Runtime: no data, no change
        if c.data.packet_count < 0 or c.data.byte_count < 0:
            raise errors.invalid(f"counter {info.name}: negative value")
        indices = range(info.size) if not c.HasField("index") else [self._index(info.name, info.size, c.index.index)]
        b = self.backend
        for i in indices:
            packets, nbytes = b.read_counter(info.name, i)
            journal.call(
                f"counter {info.name}[{i}]",
                lambda i=i: b.write_counter(info.name, i, c.data.packet_count, c.data.byte_count),  # type: ignore[misc]
                lambda i=i, p=packets, n=nbytes: b.write_counter(info.name, i, p, n),  # type: ignore[misc]
            )

    @staticmethod
    def _index(name: str, size: int, index: int) -> int:
        if index < 0:
            raise errors.invalid(f"counter {name}: negative index {index}")
        if index >= size:
            raise errors.out_of_range(f"counter {name}: index {index} is not below its size {size}")
        return index

    # ----------------------------------------------------------------- reads

    def read(self, entity: p4r.Entity) -> Iterator[p4r.Entity]:
        """The installed entities that ``entity`` selects (P4Runtime wildcard rules)."""
        kind = entity.WhichOneof("entity")
        if kind == "table_entry":
            return self._read_table(entity.table_entry)
        if kind == "action_profile_member":
            return self._read_members(entity.action_profile_member)
        if kind == "action_profile_group":
            return self._read_groups(entity.action_profile_group)
        if kind == "counter_entry":
            return self._read_counters(entity.counter_entry)
        if kind is None:
            raise errors.invalid("a read request's entity is not set")
        raise errors.unimplemented(f"{kind} is not supported by the DLCP switch")

    def _read_table(self, te: p4r.TableEntry) -> Iterator[p4r.Entity]:
        if te.table_id == 0:
            if te.match or te.priority or te.HasField("action") or te.is_default_action:
                raise errors.invalid("a read of all tables (table_id 0) takes no other filter")
            tables = list(self.schema.tables.values())
            match: tuple[entries.FieldMatch, ...] | None = None
        else:
            tables = [self._table(te.table_id)]
            match = codec.decode_match(tables[0], te.match) if te.match else None
        if te.is_default_action:
            if te.match or te.priority:
                raise errors.invalid("a default entry has no match and priority 0")
            return iter([self._encode_default(tables[0])])
        action_id = te.action.action.action_id if te.action.WhichOneof("type") == "action" else 0
        found = []
        for table in tables:
            for (m, priority), row in self.tables[table.id].items():
                if match is not None and m != match:
                    continue
                if te.priority and priority != te.priority:
                    continue
                if te.controller_metadata and row.controller_metadata != te.controller_metadata:
                    continue
                if te.metadata and row.metadata != te.metadata:
                    continue
                if action_id and (row.entry.action is None or self._action_id(row.entry.action) != action_id):
                    continue
                found.append(p4r.Entity(table_entry=self._encode_entry(table, row)))
        return iter(found)

    def _action_id(self, action: entries.Action) -> int:
        return next(a.id for a in self.schema.actions.values() if a.name == action.name)

    def _encode_entry(self, table: TableInfo, row: Installed) -> p4r.TableEntry:
        e = row.entry
        out = p4r.TableEntry(
            table_id=table.id,
            match=codec.encode_match(table, e.match),
            priority=e.priority,
            controller_metadata=row.controller_metadata,
            metadata=row.metadata,
        )
        if row.one_shot is not None:
            out.action.action_profile_action_set.action_profile_actions.extend(
                p4r.ActionProfileAction(action=codec.encode_action(self.schema, o.action), weight=o.weight)
                for o in row.one_shot
            )
        elif e.action is not None:
            out.action.action.CopyFrom(codec.encode_action(self.schema, e.action))
        elif e.member_id is not None:
            out.action.action_profile_member_id = e.member_id
        elif e.group_id is not None:
            out.action.action_profile_group_id = e.group_id
        return out

    def _encode_default(self, table: TableInfo) -> p4r.Entity:
        out = p4r.TableEntry(table_id=table.id, is_default_action=True)
        action = self.defaults[table.id]
        if action is not None:
            out.action.action.CopyFrom(codec.encode_action(self.schema, action))
        return p4r.Entity(table_entry=out)

    def _profiles(self, profile_id: int, item_id: int, what: str) -> list[ProfileInfo]:
        if profile_id == 0:
            if item_id:
                raise errors.invalid(f"a read of all action profiles takes no {what} id")
            return list(self.schema.profiles.values())
        return [self._profile(profile_id)]

    def _read_members(self, m: p4r.ActionProfileMember) -> Iterator[p4r.Entity]:
        for profile in self._profiles(m.action_profile_id, m.member_id, "member"):
            for mid, member in sorted(self.members[profile.id].items()):
                if m.member_id and mid != m.member_id:
                    continue
                yield p4r.Entity(
                    action_profile_member=p4r.ActionProfileMember(
                        action_profile_id=profile.id,
                        member_id=mid,
                        action=codec.encode_action(self.schema, member.action),
                    )
                )

    def _read_groups(self, g: p4r.ActionProfileGroup) -> Iterator[p4r.Entity]:
        for profile in self._profiles(g.action_profile_id, g.group_id, "group"):
            for gid, group in sorted(self.groups[profile.id].items()):
                if g.group_id and gid != g.group_id:
                    continue
                yield p4r.Entity(
                    action_profile_group=p4r.ActionProfileGroup(
                        action_profile_id=profile.id,
                        group_id=gid,
                        members=[p4r.ActionProfileGroup.Member(member_id=m, weight=w) for m, w in group.members],
                        max_size=group.max_size,
                    )
                )

    def _read_counters(self, c: p4r.CounterEntry) -> Iterator[p4r.Entity]:
        if c.counter_id == 0:
            if c.HasField("index"):
                raise errors.invalid("a read of all counters (counter_id 0) takes no index")
            counters = list(self.schema.counters.values())
        else:
            info = self.schema.counters.get(c.counter_id)
            if info is None:
                raise errors.invalid(f"no counter with id {c.counter_id} in DLCP's P4Info")
            counters = [info]
        out = []
        for info in counters:
            if c.HasField("index"):
                indices: range | list[int] = [self._index(info.name, info.size, c.index.index)]
            else:
                indices = range(info.size)
            for i in indices:
                packets, nbytes = self.backend.read_counter(info.name, i)
                out.append(
                    p4r.Entity(
                        counter_entry=p4r.CounterEntry(
                            counter_id=info.id,
                            index=p4r.Index(index=i),
                            data=p4r.CounterData(packet_count=packets, byte_count=nbytes),
                        )
                    )
                )
        return iter(out)


def _check_weight(profile: ProfileInfo, weight: int, where: str) -> None:
    if profile.weights_disallowed:
        if weight != 0:
            raise errors.invalid(f"{where}: {profile.name} does not allow weights (got {weight})")
    elif weight <= 0:
        raise errors.invalid(f"{where}: weight must be positive (got {weight})")


def _free_id(*taken: dict[int, Any]) -> int:
    """The smallest id (from 1) in none of ``taken``."""
    i = 1
    while any(i in d for d in taken):
        i += 1
    return i
