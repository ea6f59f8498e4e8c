"""Finding the Tofino compiler (dlcp.testbed.toolchain.tools): bf-p4c, or a p4c with p4c-barefoot beside it,
never plain p4c.

Fake executables only: nothing here runs a compiler.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dlcp.cli.main import main
from dlcp.testbed.toolchain import tools


def _exe(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\nexit 99\n")  # never run here
    path.chmod(0o755)
    return path


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No Tofino compiler anywhere: an empty PATH and none of the variables set."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for var in (tools.BIN_DIR_ENV, tools.TOFINO_P4C_ENV, tools.SDE_INSTALL_ENV):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_absent(env: pytest.MonkeyPatch) -> None:
    assert tools.find_tofino_compiler() is None
    reason = tools.tofino_missing_reason()
    assert reason is not None and tools.TOFINO_P4C_ENV in reason and "p4c-barefoot" in reason


def test_plain_p4c_is_not_taken_for_the_tofino_one(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    plain = _exe(tmp_path / "p4", "p4c")
    barefoot = _exe(tmp_path / "tofino", "p4c")
    _exe(tmp_path / "tofino", "p4c-barefoot")
    env.setenv("PATH", f"{plain.parent}:{barefoot.parent}")
    found = tools.find_tofino_compiler()
    assert found is not None and found.driver == barefoot
    env.setenv("PATH", str(plain.parent))
    assert tools.find_tofino_compiler() is None


def test_bf_p4c_first(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _exe(tmp_path / "a", "p4c")
    _exe(tmp_path / "a", "p4c-barefoot")
    sde = _exe(tmp_path / "b", "bf-p4c")
    env.setenv("PATH", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    found = tools.find_tofino_compiler()
    assert found is not None and found.driver == sde


def test_sde_install(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sde = _exe(tmp_path / "sde" / "install" / "bin", "bf-p4c")
    env.setenv(tools.SDE_INSTALL_ENV, str(tmp_path / "sde" / "install"))
    found = tools.find_tofino_compiler()
    assert found is not None and found.driver == sde and found.found_by == "$SDE_INSTALL"


def test_variable_wins_and_is_checked(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    on_path = _exe(tmp_path / "path", "bf-p4c")
    chosen = _exe(tmp_path / "chosen", "p4c")
    env.setenv("PATH", str(on_path.parent))
    env.setenv(tools.TOFINO_P4C_ENV, str(chosen))
    # A p4c without p4c-barefoot: the variable names a wrong file; no fallback to PATH.
    assert tools.find_tofino_compiler() is None
    reason = tools.tofino_missing_reason()
    assert reason is not None and tools.TOFINO_P4C_ENV in reason and "no p4c-barefoot beside it" in reason
    _exe(tmp_path / "chosen", "p4c-barefoot")
    found = tools.find_tofino_compiler()
    assert found is not None and found.driver == chosen and tools.tofino_missing_reason() is None
    env.setenv(tools.TOFINO_P4C_ENV, str(tmp_path / "nothing"))
    assert "is not an executable file" in (tools.tofino_missing_reason() or "")


def test_tna_includes_beside_the_tofino_compiler(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    driver = _exe(tmp_path / "prefix" / "bin", "p4c")
    _exe(tmp_path / "prefix" / "bin", "p4c-barefoot")
    inc = tmp_path / "prefix" / "share" / "p4c" / "p4include"
    inc.mkdir(parents=True)
    (inc / "tna.p4").write_text("")
    env.delenv(tools.TNA_INCLUDE_ENV, raising=False)
    env.setenv(tools.TOFINO_P4C_ENV, str(driver))
    assert tools.tna_include_dir() == inc


@pytest.mark.parametrize("target", ["tofino", "tofino2"])
def test_build_refuses_a_tofino_target_without_the_compiler(
    target: str, env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["p4", "build", "--target", target, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("dlcp: error: Tofino compiler not found") and "Traceback" not in captured.err
    assert f"needed for {target}" in captured.err and tools.TOFINO_P4C_ENV in captured.err
    assert captured.out == "" and not out.exists()
