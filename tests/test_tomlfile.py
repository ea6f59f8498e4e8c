"""Every file loader reports an unreadable, non-UTF-8 or invalid TOML file the same way: the path and why."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlcp.tomlfile import TomlFileError, read_toml


def _loaders() -> list[tuple[str, Callable[[Path], Any]]]:
    from dlcp.config import load as job
    from dlcp.controller.fabric import load as fabric
    from dlcp.simulations.scenario import load as scenario
    from dlcp.testbed.spec import load as testbed
    from dlcp.testbed.switch.config import load as switch

    return [("job", job), ("fabric", fabric), ("scenario", scenario), ("testbed", testbed), ("switch", switch)]


def _bad_files(tmp: Path) -> list[tuple[Path, str]]:
    (tmp / "latin1.toml").write_bytes(b'name = "caf\xe9"\n')
    (tmp / "broken.toml").write_text("[job\nid = 1\n")
    (tmp / "folder.toml").mkdir()
    return [
        (tmp / "missing.toml", "no such file"),
        (tmp / "folder.toml", "cannot read: Is a directory"),
        (tmp / "latin1.toml", "not UTF-8 text (byte 11)"),
        (tmp / "broken.toml", "invalid TOML: "),
    ]


def test_read_toml_names_the_reason(tmp_path: Path) -> None:
    for path, reason in _bad_files(tmp_path):
        with pytest.raises(TomlFileError) as err:
            read_toml(path)
        assert err.value.path == path and err.value.reason.startswith(reason), err.value
        assert str(err.value).startswith(f"{path}: ")
    (tmp_path / "ok.toml").write_text('a = 1\n[b]\nc = "d"\n')
    assert read_toml(tmp_path / "ok.toml") == {"a": 1, "b": {"c": "d"}}


@pytest.mark.parametrize("name", ["job", "fabric", "scenario", "testbed", "switch"])
def test_every_loader_refuses_a_bad_file_with_its_path_and_reason(tmp_path: Path, name: str) -> None:
    load = dict(_loaders())[name]
    for path, reason in _bad_files(tmp_path):
        with pytest.raises(ValueError) as err:
            load(path)
        assert not isinstance(err.value, TomlFileError), "the loader's own error type"
        text = str(err.value)
        assert str(path) in text and reason.rstrip(": ") in text, text
