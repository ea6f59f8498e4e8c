"""DLCP's P4Info as the server uses it: ids to names, bit widths, match kinds and action scopes.

The server runs one program, DLCP's (``p4src/v1model/dlcp.p4info.txtpb``). A
client's ``SetForwardingPipelineConfig`` is accepted only when its P4Info has
the same tables, actions, profiles, counters and registers with the same ids;
:func:`differences` says what differs. Names, aliases, annotations and
documentation strings do not count (a recompiled P4Info may reorder or reword
them), except that every entity's fully qualified name must match.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from finsy.proto import p4i
from google.protobuf import text_format
from google.protobuf.message import Message

from dlcp.testbed.switch import entries
from dlcp.testbed.switch.p4rt import errors

_MATCH_KINDS = {
    p4i.MatchField.EXACT: entries.MatchKind.EXACT,
    p4i.MatchField.LPM: entries.MatchKind.LPM,
    p4i.MatchField.TERNARY: entries.MatchKind.TERNARY,
    p4i.MatchField.OPTIONAL: entries.MatchKind.OPTIONAL,
}


@dataclass(frozen=True, slots=True)
class MatchFieldInfo:
    id: int
    name: str
    bitwidth: int
    kind: entries.MatchKind


@dataclass(frozen=True, slots=True)
class ParamInfo:
    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True, slots=True)
class ActionInfo:
    id: int
    name: str
    params: tuple[ParamInfo, ...]


@dataclass(frozen=True, slots=True)
class TableInfo:
    id: int
    name: str
    fields: tuple[MatchFieldInfo, ...]
    actions: dict[int, int]
    """Action id -> ``p4i.ActionRef`` scope (TABLE_AND_DEFAULT, TABLE_ONLY, DEFAULT_ONLY)."""
    profile_id: int
    """The action profile implementing the table, 0 for a direct table."""
    size: int
    initial_default: entries.Action | None
    const_default: bool

    @property
    def needs_priority(self) -> bool:
        """P4Runtime: priority is required iff a ternary, range or optional field is in the key."""
        return any(f.kind in (entries.MatchKind.TERNARY, entries.MatchKind.OPTIONAL) for f in self.fields)

    def field(self, field_id: int) -> MatchFieldInfo | None:
        return next((f for f in self.fields if f.id == field_id), None)


@dataclass(frozen=True, slots=True)
class ProfileInfo:
    id: int
    name: str
    table_ids: tuple[int, ...]
    with_selector: bool
    size: int
    max_group_size: int
    weights_disallowed: bool


@dataclass(frozen=True, slots=True)
class CounterInfo:
    id: int
    name: str
    size: int
    unit: int
    """``p4i.CounterSpec`` unit (BYTES, PACKETS, BOTH)."""


class Schema:
    """Lookup by id of the entities of one P4Info (DLCP's)."""

    def __init__(self, p4info: p4i.P4Info) -> None:
        self.p4info = p4info
        self.actions: dict[int, ActionInfo] = {}
        for a in p4info.actions:
            params = tuple(ParamInfo(p.id, p.name, p.bitwidth) for p in a.params)
            self.actions[a.preamble.id] = ActionInfo(a.preamble.id, a.preamble.name, params)
        self.tables: dict[int, TableInfo] = {}
        for t in p4info.tables:
            self.tables[t.preamble.id] = self._table(t)
        self.profiles: dict[int, ProfileInfo] = {}
        for p in p4info.action_profiles:
            self.profiles[p.preamble.id] = ProfileInfo(
                p.preamble.id,
                p.preamble.name,
                tuple(p.table_ids),
                p.with_selector,
                p.size,
                p.max_group_size,
                p.weights_disallowed,
            )
        self.counters: dict[int, CounterInfo] = {
            c.preamble.id: CounterInfo(c.preamble.id, c.preamble.name, c.size, c.spec.unit) for c in p4info.counters
        }

    def _table(self, t: p4i.Table) -> TableInfo:
        fields = []
        for f in t.match_fields:
            kind = _MATCH_KINDS.get(f.match_type)
            if kind is None:
                raise ValueError(f"table {t.preamble.name}: match field {f.name} has an unsupported match type")
            fields.append(MatchFieldInfo(f.id, f.name, f.bitwidth, kind))
        initial = None
        if t.HasField("initial_default_action"):
            d = t.initial_default_action
            info = self.actions[d.action_id]
            widths = {p.id: p for p in info.params}
            params = tuple((widths[a.param_id].name, int.from_bytes(a.value, "big")) for a in d.arguments)
            initial = entries.Action(info.name, params)
        return TableInfo(
            t.preamble.id,
            t.preamble.name,
            tuple(fields),
            {r.id: r.scope for r in t.action_refs},
            t.implementation_id,
            t.size,
            initial,
            t.const_default_action_id != 0,
        )

    def profile_actions(self, profile: ProfileInfo) -> dict[int, int]:
        """The actions a member of ``profile`` may be bound to (those of the tables it implements), with scope."""
        out: dict[int, int] = {}
        for table_id in profile.table_ids:
            out.update(self.tables[table_id].actions)
        return out


def load_text(path: Path) -> p4i.P4Info:
    """Parse a P4Info in protobuf text format."""
    info = p4i.P4Info()
    text_format.Parse(path.read_text(), info)
    return info


def dlcp_p4info() -> p4i.P4Info:
    """The committed P4Info of DLCP's v1model program, the only one this switch runs."""
    from dlcp.p4.paths import COMMITTED_P4INFO

    return load_text(COMMITTED_P4INFO)


_IGNORED_FIELDS = frozenset({"alias", "annotations", "annotation_locations", "structured_annotations", "doc"})
_ENTITY_LISTS = (
    "tables",
    "actions",
    "action_profiles",
    "counters",
    "direct_counters",
    "meters",
    "direct_meters",
    "controller_packet_metadata",
    "value_sets",
    "registers",
    "digests",
)


def _strip(msg: Message) -> None:
    """Clear, recursively, what does not change the pipeline: aliases, annotations, docs."""
    for fd, value in msg.ListFields():
        if fd.name in _IGNORED_FIELDS:
            msg.ClearField(fd.name)
        elif fd.message_type is not None and not fd.message_type.GetOptions().map_entry:
            if fd.is_repeated:
                for item in value:
                    _strip(item)
            else:
                _strip(value)


def differences(expected: p4i.P4Info, candidate: p4i.P4Info, limit: int = 5) -> list[str]:
    """What makes ``candidate`` a different program from ``expected`` (empty when it is the same one)."""
    out: list[str] = []
    for kind in _ENTITY_LISTS:
        want = {e.preamble.id: e for e in getattr(expected, kind)}
        got = {e.preamble.id: e for e in getattr(candidate, kind)}
        label = kind.rstrip("s").replace("_", " ")
        for eid in sorted(want.keys() - got.keys()):
            out.append(f"{label} {want[eid].preamble.name!r} (id {eid}) is missing")
        for eid in sorted(got.keys() - want.keys()):
            out.append(f"{label} {errors.shown(got[eid].preamble.name)} (id {eid}) is not in DLCP's program")
        for eid in sorted(want.keys() & got.keys()):
            a, b = type(want[eid])(), type(got[eid])()
            a.CopyFrom(want[eid])
            b.CopyFrom(got[eid])
            _strip(a)
            _strip(b)
            if a != b:
                out.append(f"{label} {errors.shown(got[eid].preamble.name)} (id {eid}) differs from DLCP's")
    if not out and expected.type_info != candidate.type_info:
        out.append("type_info differs from DLCP's")
    return out[:limit]
