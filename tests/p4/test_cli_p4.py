"""``dlcp p4``: the generator checks, and the build's report when compilers are absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlcp.cli.main import main
from dlcp.testbed.toolchain import tools


def test_gen_checks_pass_on_the_committed_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["p4", "gen-constants", "--check"]) == 0
    assert main(["p4", "gen-vectors", "--check"]) == 0
    assert capsys.readouterr().out == ""


def test_gen_vectors_check_fails_on_a_stale_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["p4", "gen-vectors", "--check", "--dir", str(tmp_path)]) == 1
    assert "stale:" in capsys.readouterr().out
    assert main(["p4", "gen-vectors", "--dir", str(tmp_path)]) == 0
    assert main(["p4", "gen-vectors", "--check", "--dir", str(tmp_path)]) == 0


def test_build_reports_missing_compilers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(tools.BIN_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(tools.TOFINO_P4C_ENV, raising=False)
    monkeypatch.delenv(tools.SDE_INSTALL_ENV, raising=False)
    assert main(["p4", "build", "--out", str(tmp_path / "out"), "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["tool"] for r in results] == ["p4c-bm2-ss", "p4test", tools.TOFINO_COMPILER]
    assert all(r["skipped"] and "not found" in r["skipped"] for r in results)


@pytest.mark.parametrize(
    ("target", "named"),
    [("all", ["p4c-bm2-ss", "p4test"]), ("v1model", ["p4c-bm2-ss"]), ("tna", ["p4test"])],
)
def test_strict_build_refuses_missing_compilers(
    target: str, named: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(tools.BIN_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(tools.TOFINO_P4C_ENV, raising=False)
    monkeypatch.delenv(tools.SDE_INSTALL_ENV, raising=False)
    out = tmp_path / "out"
    assert main(["p4", "build", "--out", str(out), "--target", target, "--strict"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("dlcp: error: --strict: ") and "Traceback" not in captured.err
    for tool in named:
        assert f"{tool} not found" in captured.err
    assert "Tofino" not in captured.err  # not required by --target all
    assert captured.out == "" and not out.exists()  # refused before any compiler ran


def test_strict_tna_needs_tofino_includes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A p4test that is found but never run: only the refusal is under test, not a compile.
    p4test = tmp_path / tools.P4TEST
    p4test.write_text("#!/bin/sh\nexit 99\n")
    p4test.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(tools.BIN_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(tools.TNA_INCLUDE_ENV, raising=False)
    # An installed Tofino compiler brings tna.p4 along (tools.tna_include_dir): none here either.
    monkeypatch.delenv(tools.TOFINO_P4C_ENV, raising=False)
    monkeypatch.delenv(tools.SDE_INSTALL_ENV, raising=False)
    assert main(["p4", "build", "--out", str(tmp_path / "out"), "--target", "tna", "--strict"]) == 2
    err = capsys.readouterr().err
    assert "tna.p4 not found" in err and tools.TNA_INCLUDE_ENV in err
