"""Reading P4Info in protobuf text format without protobuf.

Only what the tests, the vector runner and the controller need: the names of
tables (with their match fields and actions), actions (with parameters),
counters, registers and action profiles. The committed v1model P4Info
(``p4src/v1model/dlcp.p4info.txtpb``) is p4c's output; this module never writes one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<comment>\#[^\n]*)
      | (?P<string>"(?:[^"\\]|\\.)*")
      | (?P<punct>[{}:<>])
      | (?P<word>[A-Za-z0-9_.+-]+)
    )""",
    re.VERBOSE,
)

TextMessage = dict[str, list[Any]]
"""A parsed message: every field maps to the list of its values (scalars or nested messages)."""


def parse_text(text: str) -> TextMessage:
    """Parse protobuf text format into nested dicts of lists."""
    tokens = _tokenize(text)
    msg, pos = _parse_message(tokens, 0, closer=None)
    if pos != len(tokens):
        raise ValueError(f"unexpected {tokens[pos]!r} at token {pos}")
    return msg


def _tokenize(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot parse P4Info text near {text[pos : pos + 30]!r}")
        pos = m.end()
        if m.group("comment") is None:
            out.append(m.group(m.lastgroup or "word"))
    return out


def _parse_message(tokens: list[str], pos: int, closer: str | None) -> tuple[TextMessage, int]:
    msg: TextMessage = {}
    while pos < len(tokens):
        tok = tokens[pos]
        if closer is not None and tok == closer:
            return msg, pos + 1
        name = tok
        pos += 1
        if pos < len(tokens) and tokens[pos] == ":":
            pos += 1
        if pos >= len(tokens):
            raise ValueError(f"field {name!r} has no value")
        if tokens[pos] in ("{", "<"):
            sub, pos = _parse_message(tokens, pos + 1, "}" if tokens[pos] == "{" else ">")
            msg.setdefault(name, []).append(sub)
        else:
            msg.setdefault(name, []).append(_scalar(tokens[pos]))
            pos += 1
    if closer is not None:
        raise ValueError(f"missing {closer!r}")
    return msg, pos


def _scalar(tok: str) -> str | int:
    if tok.startswith('"'):
        return bytes(tok[1:-1], "utf-8").decode("unicode_escape")
    try:
        return int(tok, 0)
    except ValueError:
        return tok


def _one(msg: TextMessage, name: str, default: Any = None) -> Any:
    values = msg.get(name)
    return values[0] if values else default


@dataclass(frozen=True)
class MatchField:
    name: str
    bitwidth: int
    match_type: str


@dataclass(frozen=True)
class Action:
    name: str
    id: int
    params: tuple[tuple[str, int], ...]
    """(name, bitwidth) per parameter, in order."""


@dataclass(frozen=True)
class Table:
    name: str
    id: int
    match_fields: tuple[MatchField, ...]
    actions: tuple[str, ...]
    size: int
    implementation: str | None
    """Name of the action profile/selector, when the table has one."""


@dataclass(frozen=True)
class P4Info:
    tables: dict[str, Table]
    actions: dict[str, Action]
    counters: dict[str, int]
    """Counter name -> size."""
    registers: dict[str, int]
    """Register name -> size."""
    action_profiles: dict[str, int]
    """Action profile name -> size."""

    def names(self) -> set[str]:
        """Every controller-visible name: entities, match fields (``table.field``) and action parameters."""
        out = set(self.tables) | set(self.actions) | set(self.counters) | set(self.registers)
        out |= set(self.action_profiles)
        out |= {f"{t.name}.{f.name}" for t in self.tables.values() for f in t.match_fields}
        out |= {f"{a.name}.{p}" for a in self.actions.values() for p, _ in a.params}
        return out

    def action(self, name: str) -> Action:
        """Look an action up by full name or by its unique last component."""
        if name in self.actions:
            return self.actions[name]
        hits = [a for a in self.actions.values() if a.name.rsplit(".", 1)[-1] == name]
        if len(hits) != 1:
            raise KeyError(f"action {name!r}: {len(hits)} matches")
        return hits[0]


def load(path: Path) -> P4Info:
    return from_text(path.read_text())


def from_text(text: str) -> P4Info:
    msg = parse_text(text)
    actions: dict[str, Action] = {}
    by_id: dict[int, str] = {}
    for a in msg.get("actions", []):
        pre = _one(a, "preamble")
        params = tuple((_one(p, "name"), _one(p, "bitwidth", 0)) for p in a.get("params", []))
        act = Action(_one(pre, "name"), _one(pre, "id"), params)
        actions[act.name] = act
        by_id[act.id] = act.name
    profiles: dict[str, int] = {}
    profile_by_id: dict[int, str] = {}
    for p in msg.get("action_profiles", []):
        pre = _one(p, "preamble")
        profiles[_one(pre, "name")] = _one(p, "size", 0)
        profile_by_id[_one(pre, "id")] = _one(pre, "name")
    tables: dict[str, Table] = {}
    for t in msg.get("tables", []):
        pre = _one(t, "preamble")
        fields = tuple(
            MatchField(_one(f, "name"), _one(f, "bitwidth", 0), str(_one(f, "match_type", "EXACT")))
            for f in t.get("match_fields", [])
        )
        refs = tuple(by_id[_one(r, "id")] for r in t.get("action_refs", []))
        impl = _one(t, "implementation_id")
        tables[_one(pre, "name")] = Table(
            _one(pre, "name"), _one(pre, "id"), fields, refs, _one(t, "size", 0), profile_by_id.get(impl)
        )
    counters = {_one(_one(c, "preamble"), "name"): _one(c, "size", 0) for c in msg.get("counters", [])}
    registers = {_one(_one(r, "preamble"), "name"): _one(r, "size", 0) for r in msg.get("registers", [])}
    return P4Info(tables, actions, counters, registers, profiles)
