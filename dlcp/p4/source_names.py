"""Resolving controller-visible names (``DlcpIngress.routing.ipv4_routes``) in the P4 sources.

Used by the drift tests: every table, action, counter, register, action
profile, match field and action parameter named in the P4Info must exist in
the source of *both* architectures, so one controller drives either. This is a
light reader for this repository's P4 style (one declaration per statement),
not a P4 parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_INCLUDE = re.compile(r'^\s*#include\s+"([^"]+)"', re.MULTILINE)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_CONTROL = re.compile(r"\bcontrol\s+(\w+)\s*\(")
_TABLE = re.compile(r"\btable\s+(\w+)\s*\{")
_ACTION = re.compile(r"\baction\s+(\w+)\s*\(([^)]*)\)")
_INSTANCE = re.compile(r"(?:@name\(\"([.\w]+)\"\)\s*)?\b(\w+)\s*(?:<[^;{}]*>)?\s*\([^;{}]*\)\s+(\w+)\s*;")
_KEY_NAME = re.compile(r'@name\("(\w+)"\)')


def program_text(path: Path, seen: set[Path] | None = None) -> str:
    """The program with local ``#include "..."`` files inlined (each once) and comments removed."""
    seen = set() if seen is None else seen
    path = path.resolve()
    if path in seen:
        return ""
    seen.add(path)
    text = _COMMENT.sub("", path.read_text())
    return _INCLUDE.sub(lambda m: program_text(path.parent / m.group(1), seen), text)


def _block(text: str, start: int) -> str:
    """The text between the ``{`` at or after ``start`` and its matching ``}``."""
    i = text.index("{", start)
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    raise ValueError("unbalanced braces")


@dataclass
class Scope:
    """What a control declares: tables (name -> key field names), actions (name -> params), instances."""

    tables: dict[str, set[str]] = field(default_factory=dict)
    actions: dict[str, list[str]] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)
    """Instance name -> type name (sub-controls and externs)."""
    global_names: set[str] = field(default_factory=set)
    """Names given with ``@name(".x")``."""


def _scope(body: str) -> Scope:
    s = Scope()
    for m in _TABLE.finditer(body):
        s.tables[m.group(1)] = set(_KEY_NAME.findall(_block(body, m.start())))
    for m in _ACTION.finditer(body):
        params = [p.split()[-1] for p in m.group(2).split(",") if p.strip()]
        s.actions[m.group(1)] = params
    for m in _INSTANCE.finditer(body):
        if m.group(2) in ("action", "table", "apply", "if"):
            continue
        s.instances[m.group(3)] = m.group(2)
        if m.group(1) and m.group(1).startswith("."):
            s.global_names.add(m.group(1)[1:])
    return s


@dataclass
class Program:
    controls: dict[str, Scope]
    top: Scope

    @classmethod
    def load(cls, path: Path) -> Program:
        text = program_text(path)
        controls = {}
        spans = []
        for m in _CONTROL.finditer(text):
            close = text.index(")", m.end())
            # A control declaration (type only, no body) ends with ';' before any '{'.
            brace = text.find("{", close)
            semi = text.find(";", close)
            if brace < 0 or 0 <= semi < brace:
                continue
            body = _block(text, close)
            controls[m.group(1)] = _scope(body)
            spans.append(body)
        top_text = text
        for body in spans:
            top_text = top_text.replace(body, "")
        top = _scope(top_text)
        for c in controls.values():
            top.global_names |= c.global_names
        return cls(controls, top)

    def _owner(self, qualified: str) -> tuple[Scope, str] | None:
        parts = qualified.split(".")
        if len(parts) == 1:
            return (self.top, parts[0])
        scope = self.controls.get(parts[0])
        for part in parts[1:-1]:
            if scope is None or part not in scope.instances:
                return None
            scope = self.controls.get(scope.instances[part])
        return None if scope is None else (scope, parts[-1])

    def has(self, qualified: str) -> bool:
        """Whether a table, action or instance of that qualified name exists."""
        if "." not in qualified and qualified in self.top.global_names:
            return True
        owner = self._owner(qualified)
        if owner is None:
            return False
        scope, name = owner
        return name in scope.tables or name in scope.actions or name in scope.instances

    def table_keys(self, qualified: str) -> set[str]:
        owner = self._owner(qualified)
        return set() if owner is None else owner[0].tables.get(owner[1], set())

    def action_params(self, qualified: str) -> list[str]:
        owner = self._owner(qualified)
        return [] if owner is None else owner[0].actions.get(owner[1], [])
