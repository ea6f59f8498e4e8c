"""P4Runtime values and keys to canonical entries (validated as the spec says) and back.

Bytestrings (P4Runtime spec, "Bytestrings"): a request may carry leading zero
bytes; the value must fit the P4Info bit width and the string must not be
empty, or the update fails with OUT_OF_RANGE. Replies use the canonical,
shortest form. Match keys (spec, "Match Format") must use each field once, with
the match kind the P4Info declares; don't-care fields are omitted (an LPM
prefix length of 0 or a ternary mask of 0 is refused), an LPM value has no bit
set past its prefix, a ternary value none outside its mask, and an exact field
is never omitted; violations are INVALID_ARGUMENT.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from finsy.proto import p4i, p4r

from dlcp.testbed.switch import entries
from dlcp.testbed.switch.p4rt import errors
from dlcp.testbed.switch.p4rt.schema import Schema, TableInfo

MatchKind = entries.MatchKind


def decode_uint(data: bytes, bitwidth: int, what: str) -> int:
    """The unsigned value of a P4Runtime bytestring of a ``bit<bitwidth>`` value."""
    if not data:
        raise errors.out_of_range(f"{what}: empty bytestring")
    zeros = len(data) - len(data.lstrip(b"\0"))
    if len(data) - zeros > (bitwidth + 7) // 8:  # too wide whatever it holds: its value is not shown
        raise errors.out_of_range(f"{what}: a {len(data)}-byte value does not fit in {bitwidth} bits")
    value = int.from_bytes(data, "big")
    if value >> bitwidth:
        raise errors.out_of_range(f"{what}: value {value:#x} does not fit in {bitwidth} bits")
    return value


def encode_uint(value: int) -> bytes:
    """The canonical (shortest) bytestring of a non-negative value; 0 is one zero byte."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode_match(table: TableInfo, matches: Sequence[p4r.FieldMatch]) -> tuple[entries.FieldMatch, ...]:
    """The canonical key of ``matches`` for ``table``, in P4Info order, don't-care fields omitted."""
    seen: dict[int, entries.FieldMatch] = {}
    for m in matches:
        info = table.field(m.field_id)
        if info is None:
            raise errors.invalid(f"table {table.name}: no match field with id {m.field_id}")
        if m.field_id in seen:
            raise errors.invalid(f"table {table.name}: match field {info.name} given twice")
        what = f"{table.name} match field {info.name}"
        kind = m.WhichOneof("field_match_type")
        if kind != info.kind.value:
            raise errors.invalid(f"{what} is {info.kind.value.upper()}, the request gives {kind or 'no match'}")
        if info.kind is MatchKind.EXACT:
            seen[m.field_id] = entries.FieldMatch(info.name, info.kind, decode_uint(m.exact.value, info.bitwidth, what))
        elif info.kind is MatchKind.OPTIONAL:
            value = decode_uint(m.optional.value, info.bitwidth, what)
            seen[m.field_id] = entries.FieldMatch(info.name, info.kind, value)
        elif info.kind is MatchKind.LPM:
            plen = m.lpm.prefix_len
            if not 0 < plen <= info.bitwidth:
                hint = " (a don't-care LPM field is omitted)" if plen == 0 else ""
                raise errors.invalid(f"{what}: prefix length {plen} is not in 1..{info.bitwidth}{hint}")
            value = decode_uint(m.lpm.value, info.bitwidth, what)
            if value & ((1 << (info.bitwidth - plen)) - 1):
                raise errors.invalid(f"{what}: value {value:#x} has bits set past the /{plen} prefix")
            seen[m.field_id] = entries.FieldMatch(info.name, info.kind, value, plen)
        else:  # TERNARY
            value = decode_uint(m.ternary.value, info.bitwidth, what)
            mask = decode_uint(m.ternary.mask, info.bitwidth, what)
            if mask == 0:
                raise errors.invalid(f"{what}: mask is 0 (a don't-care ternary field is omitted)")
            if value & ~mask:
                raise errors.invalid(f"{what}: value {value:#x} has bits set outside mask {mask:#x}")
            seen[m.field_id] = entries.FieldMatch(info.name, info.kind, value, mask)
    for f in table.fields:
        if f.kind is MatchKind.EXACT and f.id not in seen:
            raise errors.invalid(f"table {table.name}: exact match field {f.name} is missing")
    return tuple(seen[f.id] for f in table.fields if f.id in seen)


def decode_priority(table: TableInfo, priority: int) -> int:
    if table.needs_priority:
        if priority <= 0:
            raise errors.invalid(f"table {table.name} has ternary or optional fields: priority must be > 0")
    elif priority != 0:
        raise errors.invalid(f"table {table.name} has no ternary, range or optional field: priority must be 0")
    return priority


def decode_action(
    schema: Schema, action: p4r.Action, allowed: dict[int, int], *, where: str, as_default: bool = False
) -> entries.Action:
    """The canonical action of ``action``, one of ``allowed`` (action id -> scope) for ``where``."""
    if action.action_id not in allowed:
        raise errors.invalid(f"{where}: action id {action.action_id} is not one of its actions")
    info = schema.actions[action.action_id]
    scope = allowed[action.action_id]
    if as_default and scope == p4i.ActionRef.TABLE_ONLY:
        raise errors.permission_denied(f"{where}: {info.name} is TABLE_ONLY, it cannot be the default action")
    if not as_default and scope == p4i.ActionRef.DEFAULT_ONLY:
        raise errors.permission_denied(f"{where}: {info.name} is DEFAULT_ONLY, it can only be the default action")
    widths = {p.id: p for p in info.params}
    values: dict[int, int] = {}
    for p in action.params:
        param = widths.get(p.param_id)
        if param is None:
            raise errors.invalid(f"{where}: action {info.name} has no parameter with id {p.param_id}")
        if p.param_id in values:
            raise errors.invalid(f"{where}: action {info.name} parameter {param.name} given twice")
        values[p.param_id] = decode_uint(p.value, param.bitwidth, f"{info.name} parameter {param.name}")
    missing = [p.name for p in info.params if p.id not in values]
    if missing:
        raise errors.invalid(f"{where}: action {info.name} is missing parameter(s) {', '.join(missing)}")
    return entries.Action(info.name, tuple((p.name, values[p.id]) for p in info.params))


def encode_match(table: TableInfo, match: Iterable[entries.FieldMatch]) -> list[p4r.FieldMatch]:
    ids = {f.name: f.id for f in table.fields}
    out = []
    for m in match:
        fm = p4r.FieldMatch(field_id=ids[m.name])
        if m.kind is MatchKind.EXACT:
            fm.exact.value = encode_uint(m.value)
        elif m.kind is MatchKind.OPTIONAL:
            fm.optional.value = encode_uint(m.value)
        elif m.kind is MatchKind.LPM:
            fm.lpm.value = encode_uint(m.value)
            fm.lpm.prefix_len = m.arg
        else:
            fm.ternary.value = encode_uint(m.value)
            fm.ternary.mask = encode_uint(m.arg)
        out.append(fm)
    return out


def encode_action(schema: Schema, action: entries.Action) -> p4r.Action:
    info = next(a for a in schema.actions.values() if a.name == action.name)
    ids = {p.name: p.id for p in info.params}
    return p4r.Action(
        action_id=info.id,
        params=[p4r.Action.Param(param_id=ids[name], value=encode_uint(value)) for name, value in action.params],
    )
