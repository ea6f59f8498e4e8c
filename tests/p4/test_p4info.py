"""P4Info text reading, and the drift checks that need no compiler.

Every table, action, key, parameter, counter, register and action profile
named in the committed v1model P4Info must exist in the source of both
architectures, and so must every name the Python side (dlcp.p4.names) uses.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dlcp.p4 import names, p4info, paths
from dlcp.p4.source_names import Program

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = {arch: ROOT / "p4src" / arch / "dlcp.p4" for arch in ("v1model", "tna")}

SAMPLE = """
# comment
pkg_info {
  arch: "v1model"
}
tables {
  preamble {
    id: 1
    name: "C.t"
    alias: "t"
  }
  match_fields {
    id: 1
    name: "dst_addr"
    bitwidth: 32
    match_type: LPM
  }
  action_refs {
    id: 2
  }
  implementation_id: 3
  size: 1024
}
actions {
  preamble {
    id: 2
    name: "C.set"
    alias: "set"
  }
  params {
    id: 1
    name: "port"
    bitwidth: 9
  }
  params {
    id: 2
    name: "mac"
    bitwidth: 48
  }
}
action_profiles {
  preamble {
    id: 3
    name: "C.sel"
  }
  table_ids: 1
  with_selector: true
  size: 64
}
counters {
  preamble {
    id: 4
    name: "C.hits"
  }
  spec {
    unit: BOTH
  }
  size: 4096
}
registers {
  preamble { id: 5 name: "reg" }
  type_spec { bitstring { bit { bitwidth: 32 } } }
  size: 4096
}
"""


def test_parse_sample() -> None:
    info = p4info.from_text(SAMPLE)
    t = info.tables["C.t"]
    assert t.match_fields == (p4info.MatchField("dst_addr", 32, "LPM"),)
    assert t.actions == ("C.set",) and t.size == 1024 and t.implementation == "C.sel"
    assert info.actions["C.set"].params == (("port", 9), ("mac", 48))
    assert info.counters == {"C.hits": 4096}
    assert info.registers == {"reg": 4096}
    assert info.action_profiles == {"C.sel": 64}
    assert info.action("set").name == "C.set"
    assert "C.t.dst_addr" in info.names() and "C.set.mac" in info.names()


@pytest.mark.parametrize("bad", ['tables { preamble { name: "x" }', "tables { @ }", "name:"])
def test_parse_rejects_broken_text(bad: str) -> None:
    with pytest.raises(ValueError):
        p4info.parse_text(bad)


@pytest.fixture(scope="module", params=sorted(PROGRAMS))
def program(request: pytest.FixtureRequest) -> Program:
    return Program.load(PROGRAMS[request.param])


def test_python_names_exist_in_both_sources(program: Program) -> None:
    for n in (*names.TABLES, *names.ACTIONS, *names.COUNTERS, names.QUEUE_OCCUPANCY, names.ECMP_SELECTOR):
        assert program.has(n), n


def test_tna_only_names_are_in_the_tna_source_only(committed: p4info.P4Info) -> None:
    """The trim-session table is Tofino's alone: v1model truncates by itself, and the software switch and the
    v1model P4Info (which the software switch's P4Runtime server accepts) have no such table."""
    tna, v1model = Program.load(PROGRAMS["tna"]), Program.load(PROGRAMS["v1model"])
    for n in (*names.TNA_TABLES, *names.TNA_ACTIONS):
        assert tna.has(n), n
        assert not v1model.has(n), n
    assert tna.table_keys(names.TRIM_SESSIONS) == {"port"}
    assert tna.action_params(names.SET_TRIM_SESSION) == ["session_id"]
    assert not set(names.TNA_TABLES) & set(committed.tables)
    assert not set(names.TNA_ACTIONS) & set(committed.actions)


def test_source_check_can_fail(program: Program) -> None:
    assert not program.has("DlcpIngress.routing.no_such_table")
    assert not program.has("DlcpIngress.nowhere.ipv4_routes")
    assert not program.has("no_such_register")


@pytest.fixture(scope="module")
def committed() -> p4info.P4Info:
    if not paths.COMMITTED_P4INFO.exists():
        pytest.fail(f"{paths.COMMITTED_P4INFO} is missing: `dlcp p4 build --update-p4info` writes it (needs p4c)")
    return p4info.load(paths.COMMITTED_P4INFO)


def test_committed_p4info_names_exist_in_both_sources(committed: p4info.P4Info, program: Program) -> None:
    for t in committed.tables.values():
        assert program.has(t.name), t.name
        assert {f.name for f in t.match_fields} <= program.table_keys(t.name), t.name
    for a in committed.actions.values():
        if a.name == "NoAction":  # from core.p4
            continue
        assert program.has(a.name), a.name
        assert [p for p, _ in a.params] == program.action_params(a.name), a.name
    for n in (*committed.counters, *committed.registers, *committed.action_profiles):
        assert program.has(n), n


def test_python_names_are_in_the_committed_p4info(committed: p4info.P4Info) -> None:
    assert set(names.TABLES) <= set(committed.tables)
    assert set(names.ACTIONS) <= set(committed.actions)
    assert set(names.COUNTERS) <= set(committed.counters)
    assert names.QUEUE_OCCUPANCY in committed.registers
    assert committed.tables[names.NEXT_HOPS].implementation == names.ECMP_SELECTOR
    for t in names.TABLES:
        assert committed.tables[t].size > 0
