"""Reading a TOML file for a loader (job, switch, fabric, testbed and scenario files): one place for why it fails.

Each loader checks the parsed table against its own dataclasses and reports with its own error type;
what can go wrong before that (the file cannot be read, is not UTF-8, is not TOML) is the same for all
and is reported the same way, by :class:`TomlFileError`'s ``reason``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any


class TomlFileError(ValueError):
    """A TOML file that could not be read or parsed; ``reason`` says why, without the path."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def read_toml(path: str | Path) -> dict[str, Any]:
    """The parsed TOML of ``path``; :class:`TomlFileError` if it cannot be read, decoded or parsed."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise TomlFileError(p, "no such file") from None
    except OSError as exc:
        raise TomlFileError(p, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TomlFileError(p, f"not UTF-8 text (byte {exc.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlFileError(p, f"invalid TOML: {exc}") from None
