"""Tofino's trim sessions: the controller gives each port a mirror session, writes it, and names it in a table."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import finsy as fy
import pytest
from finsy import P4Schema
from finsy.proto import p4r

from dlcp.controller import fabric, state, trim_sessions
from dlcp.controller.diff import diff
from dlcp.controller.entries import Entry
from dlcp.controller.model import SwitchSpec
from dlcp.p4 import names, paths, sizes

ROOT = Path(__file__).resolve().parents[2]
STAR = '[topology]\nkind = "star"\nhosts = 5\nhost_link = { buffer = "1MiB" }\n'
JOB = '[[job]]\nid = 7\nmode = "ps"\nworkers = ["h1", "h2", "h3", "h4", "h5"]\nservers = ["h5"]\n'


def _desired(target: str) -> list[Entry]:
    f = fabric.from_dict(tomllib.loads(f'[defaults]\ntarget = "{target}"\n' + STAR + JOB))
    return state.desired(f)["s1"]


def _tables(entries: list[Entry]) -> list[fy.P4TableEntry]:
    return [e.entity for e in entries if isinstance(e.entity, fy.P4TableEntry)]


def _clones(entries: list[Entry]) -> list[fy.P4CloneSessionEntry]:
    return [e.entity for e in entries if isinstance(e.entity, fy.P4CloneSessionEntry)]


def test_only_tofino_switches_get_trim_sessions() -> None:
    for target in ("dlcp", "bmv2"):
        entries = _desired(target)
        assert not _clones(entries), target
        assert not [t for t in _tables(entries) if t.table_id == names.TRIM_SESSIONS], target
    assert _clones(_desired("tofino"))


def test_each_port_gets_its_own_session_named_in_port_sessions() -> None:
    entries = _desired("tofino")
    rows = [t for t in _tables(entries) if t.table_id == names.TRIM_SESSIONS]
    assert {t.action.name for t in rows} == {names.SET_TRIM_SESSION}  # type: ignore[union-attr]
    by_port = {int(t.match["port"]): int(t.action.args["session_id"]) for t in rows}  # type: ignore[index,union-attr,arg-type]
    assert sorted(by_port) == [1, 2, 3, 4, 5]
    assert sorted(by_port.values()) == list(range(sizes.TRIM_SESSION_BASE, sizes.TRIM_SESSION_BASE + 5))
    assert sizes.TRIM_SESSION_BASE > 0, "session 0 is the program's 'no session'"
    clones = {c.session_id: c for c in _clones(entries)}
    assert sorted(clones) == sorted(by_port.values())
    for port, session in by_port.items():
        c = clones[session]
        assert list(c.replicas) == [(port, 0)], "one copy, to the port the session is named for"
        assert c.class_of_service == sizes.TRIM_QUEUE
        assert c.packet_length_bytes == sizes.TRIMMED_FRAME_BYTES + sizes.TNA_MIRROR_HEADER_BYTES == 83


def test_the_truncation_keeps_the_mirror_header_the_program_declares() -> None:
    """The copy carries bridge_h (p4src/tna/headers.p4) before the frame: its width is what the session adds."""
    text = (ROOT / "p4src" / "tna" / "headers.p4").read_text()
    kind_bits = int(re.search(r"typedef bit<(\d+)> pkt_kind_t;", text).group(1))  # type: ignore[union-attr]
    bridge = re.search(r"header bridge_h \{([^}]*)\}", text).group(1)  # type: ignore[union-attr]
    assert re.findall(r"(\w+)\s+\w+;", bridge) == ["pkt_kind_t"]
    assert kind_bits == 8 * sizes.TNA_MIRROR_HEADER_BYTES


def test_more_tofino_ports_than_trim_sessions_is_refused_naming_the_switch() -> None:
    many = sizes.MAX_TRIM_SESSION - sizes.TRIM_SESSION_BASE + 2
    spec = SwitchSpec("s9", "127.0.0.1:1", 1, "", "tofino", 0x02DC00000000, {p: f"l{p}" for p in range(1, many + 1)})
    with pytest.raises(ValueError, match=rf"switch\.s9: {many} ports, but Tofino has trim sessions 1\.\.255"):
        trim_sessions.sessions(spec)
    fits = SwitchSpec("s9", "127.0.0.1:1", 1, "", "tofino", 0x02DC00000000, {p: f"l{p}" for p in range(1, many)})
    assert max(trim_sessions.sessions(fits).values()) == sizes.MAX_TRIM_SESSION


def test_clone_sessions_are_diffed_by_session_id() -> None:
    """Re-applying writes nothing; a changed session is modified, a foreign one deleted by its id alone,
    a missing one inserted. (Clone sessions need no P4Info; the v1model one encodes them.)"""
    schema = P4Schema(paths.COMMITTED_P4INFO)
    wanted = [e for e in _desired("tofino") if isinstance(e.entity, fy.P4CloneSessionEntry)]
    on_switch = [e.entity.encode(schema) for e in wanted]
    groups = schema.tables[names.NEXT_HOPS].id

    again = diff("s1", on_switch, wanted, schema, groups)
    assert again.changes == [] and again.unchanged == len(wanted)

    changed = fy.P4CloneSessionEntry(1, class_of_service=0, packet_length_bytes=83, replicas=[(1, 0)])
    foreign = fy.P4CloneSessionEntry(200, replicas=[(9, 0)])
    current = [changed.encode(schema), *on_switch[1:-1], foreign.encode(schema)]
    plan = diff("s1", current, wanted, schema, groups)
    ops = sorted((c.op, c.entity.packet_replication_engine_entry.clone_session_entry.session_id) for c in plan.changes)
    assert ops == [("delete", 200), ("insert", wanted[-1].entity.session_id), ("modify", 1)]  # type: ignore[union-attr]
    delete = next(c for c in plan.changes if c.op == "delete")
    key_only = p4r.Entity()
    key_only.packet_replication_engine_entry.clone_session_entry.session_id = 200
    assert delete.entity == key_only and delete.note == "clone session 200"
    modify = next(c for c in plan.changes if c.op == "modify")
    assert modify.entity.packet_replication_engine_entry.clone_session_entry.class_of_service == sizes.TRIM_QUEUE


def test_replica_order_does_not_count_as_a_change() -> None:
    schema = P4Schema(paths.COMMITTED_P4INFO)
    two = Entry(fy.P4CloneSessionEntry(3, replicas=[(1, 0), (2, 0)]), "fabric", "two copies")
    swapped = fy.P4CloneSessionEntry(3, replicas=[(2, 0), (1, 0)]).encode(schema)
    assert diff("s1", [swapped], [two], schema, schema.tables[names.NEXT_HOPS].id).changes == []
