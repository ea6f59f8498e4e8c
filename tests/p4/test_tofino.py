"""The TNA program under the Tofino compiler, for Tofino 1 and 2: it compiles, fits, and keeps the v1model names.

Skipped, with the reason, where the Tofino compiler is not installed (every CI
machine): docs/switch.md, "Getting the Tofino compiler". The reading of its
reports is tested without it (test_tofino_report.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dlcp.p4 import names, p4info, paths
from dlcp.testbed.toolchain import build, tofino_report, tools

STAGES = {"tofino": 12, "tofino2": 20}
"""MAU stages per pipeline of each chip."""
MIRROR_ID_BITS = {"tofino": 10, "tofino2": 8}
"""Width of ``MirrorId_t`` (tna.p4, t2na.p4): the trim session the controller writes."""


def _compile(target: str, tmp_path_factory: pytest.TempPathFactory) -> build.StepResult:
    reason = tools.tofino_missing_reason()
    if reason:
        pytest.skip(reason)
    return build.build_tofino(target, tmp_path_factory.mktemp(target))


@pytest.fixture(scope="module")
def tofino(tmp_path_factory: pytest.TempPathFactory) -> build.StepResult:
    return _compile("tofino", tmp_path_factory)


@pytest.fixture(scope="module")
def tofino2(tmp_path_factory: pytest.TempPathFactory) -> build.StepResult:
    return _compile("tofino2", tmp_path_factory)


@pytest.fixture(scope="module", params=sorted(STAGES))
def chip(request: pytest.FixtureRequest) -> build.StepResult:
    """Each chip's compile (the module's fixtures: each chip is compiled once)."""
    result = request.getfixturevalue(request.param)
    assert isinstance(result, build.StepResult)
    return result


def _without_pipe(name: str) -> str:
    """P4Info names of a TNA program may carry the pipeline's name first (``pipe.DlcpIngress...``)."""
    return name.removeprefix("pipe.")


def test_compiles_to_a_binary(chip: build.StepResult) -> None:
    assert chip.ok, chip.output
    # The compiler ends with "N errors, M warnings generated." and prefixes each error "error:".
    assert "0 errors," in chip.output and "error:" not in chip.output.lower(), chip.output
    binary = f"{chip.target}.bin"
    assert {a.name for a in chip.artifacts} >= {binary, "context.json", "bfrt.json", "dlcp.p4info.txtpb"}
    assert chip.report_error is None


def test_every_chip_fits(chip: build.StepResult) -> None:
    report = chip.report
    assert report is not None, chip.report_error
    assert report.stages_available == STAGES[chip.target]
    for gress in tofino_report.GRESSES:
        assert 0 < report.stages_used(gress) <= report.stages_available, report.table()
    assert all(r.used <= r.available for r in report.resources)


def test_trim_sessions_come_from_the_table_the_controller_writes(chip: build.StepResult) -> None:
    """Tofino 2's mirror ids are 8 bits: the session is the table's action data, not computed from the port."""
    info = p4info.load(next(a for a in chip.artifacts if a.name == "dlcp.p4info.txtpb"))
    tables = {_without_pipe(n): t for n, t in info.tables.items()}
    actions = {_without_pipe(n): a for n, a in info.actions.items()}
    table = tables[names.TRIM_SESSIONS]
    assert [(f.name, f.bitwidth, f.match_type) for f in table.match_fields] == [("port", 9, "EXACT")]
    assert actions[names.SET_TRIM_SESSION].params == (("session_id", MIRROR_ID_BITS[chip.target]),)


def test_fits_with_room_to_spare(tofino: build.StepResult) -> None:
    report = tofino.report
    assert report is not None, tofino.report_error
    assert report.stages_available == 12
    assert 0 < report.stages_used("ingress") <= tofino_report.INGRESS_STAGE_BUDGET, report.table()
    assert 0 < report.stages_used("egress") <= report.stages_available, report.table()
    assert all(r.used <= r.available for r in report.resources)


def test_same_names_as_the_v1model_p4info(chip: build.StepResult) -> None:
    """One controller drives both targets: every name it may use is in the Tofino P4Info too, on both chips."""
    v1 = p4info.load(paths.COMMITTED_P4INFO)
    tna = p4info.load(next(a for a in chip.artifacts if a.name == "dlcp.p4info.txtpb"))
    tables = {_without_pipe(n): t for n, t in tna.tables.items()}
    for name, table in v1.tables.items():
        assert name in tables, name
        assert [(f.name, f.bitwidth, f.match_type) for f in table.match_fields] == [
            (f.name, f.bitwidth, f.match_type) for f in tables[name].match_fields
        ], name
        assert table.size <= tables[name].size, name
    actions = {_without_pipe(n): a for n, a in tna.actions.items()}
    for name, action in v1.actions.items():
        assert name in actions, name
        assert action.params == actions[name].params, name
    assert set(v1.counters) <= {_without_pipe(n) for n in tna.counters}
    assert set(v1.registers) <= {_without_pipe(n) for n in tna.registers}
    assert set(v1.action_profiles) <= {_without_pipe(n) for n in tna.action_profiles}


def test_ipv4_checksum_is_the_deparser_s(tofino: build.StepResult) -> None:
    """The checksum update is the ingress deparser's Checksum unit, not arithmetic in a table's action."""
    pipe = tofino_report.pipe_dirs(_out(tofino))[0]
    bfa = next(pipe.glob("*.bfa")).read_text()
    deparser = bfa[bfa.index("deparser ingress:") :]
    deparser = deparser[: deparser.index("deparser egress:")] if "deparser egress:" in deparser else deparser
    # The assembler's form (p4c-barefoot 9.13.4): the IPv4 checksum field is emitted from
    # "full_checksum N", which sums "partial_checksum N", whose inputs are the saved complements.
    assert re.search(r"full_checksum 0: \S+  # ingress::hdr\.pkt\.ipv4\.\$valid", deparser), deparser
    partial = deparser[deparser.index("partial_checksum 0:") :]
    for name in ("ipv4_checksum_inv", "ipv4_ttl_inv", "hdr.pkt.ipv4.ttl", "hdr.pkt.ipv4.total_len"):
        assert name in partial[: partial.index("full_checksum 0:")], name


def _out(result: build.StepResult) -> Path:
    bfrt = next(a for a in result.artifacts if a.name == "bfrt.json")
    return bfrt.parent
